"""The check of the candidate's native code (skills/harness/native_code.py): the ELF reader, the
policy on imported symbols, and that honest bindings (the CPU and GPU test candidates', the shipped
demonstrations', built as the product builds them) pass it while a broken shared object is refused
in one line. The red-team candidates that it closes are run by test_redteam.py."""
import os
import shutil
import struct
import subprocess
import sysconfig

import pytest

import build_candidate
from conftest import CACHE, HERE, REPO

from harness import guard, native_code
from harness.native_code import COMPUTE, SWITCH, UNCHECKED

EXT = sysconfig.get_config_var("EXT_SUFFIX")


def module_file(module_dir):
    return os.path.join(module_dir, "cuda_extension" + EXT)


def nm_undefined(path):
    out = subprocess.run(["nm", "-D", "--undefined-only", path], capture_output=True, text=True, check=True).stdout
    return {line.split()[-1].split("@")[0] for line in out.splitlines() if line.strip()}


# --- the policy ---------------------------------------------------------------------------------

@pytest.mark.parametrize("symbol, names", [
    ("_ZN2at4_ops4relu4callERKNS_6TensorE", ("at", "_ops", "relu", "call")),
    ("_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE", ("c10", "impl", "ExcludeDispatchKeyGuard")),
    ("_ZNK2at10TensorBase8data_ptrIfEEPT_v", ("at", "TensorBase", "data_ptr")),
    ("_ZN3c104cuda19get_cuda_error_helpB5cxx11E9cudaError", ("c10", "cuda", "get_cuda_error_help")),
    ("_ZTWN3c104impl26raw_local_dispatch_key_setE", ("c10", "impl", "raw_local_dispatch_key_set")),
    ("_ZZN2at6native4reluERKNS_6TensorEE4name", ("at", "native", "relu")),
    ("_ZNSt6vectorIiSaIiEE9push_backEOi", ()),
    ("dlsym", ()),
])
def test_scope_reads_the_leading_names(symbol, names):
    assert native_code.scope(symbol) == names


# What the honest bindings import (taken from the shipped demonstrations' and the test candidates'
# modules), which must stay allowed.
HONEST = [
    "_ZN2at4_ops10empty_like4callERKNS_6TensorESt8optionalIN3c1010ScalarTypeEES5_INS6_6LayoutEES5_INS6_6DeviceEES5_IbES5_INS6_12MemoryFormatEE",
    "_ZN2at4_ops19empty_memory_format4callEN3c108ArrayRefINS2_6SymIntEEESt8optionalINS2_10ScalarTypeEES6_INS2_6LayoutEES6_INS2_6DeviceEES6_IbES6_INS2_12MemoryFormatEE",
    "_ZN2at4_ops10contiguous4callERKNS_6TensorEN3c1012MemoryFormatE",
    "_ZN2at4_ops7reshape4callERKNS_6TensorEN3c108ArrayRefINS5_6SymIntEEE",
    "_ZN3c104impl23ExcludeDispatchKeyGuardC1ENS_14DispatchKeySetE",
    "_ZN3c104cuda20getCurrentCUDAStreamEa",
    "_ZN3c104cuda20CUDACachingAllocator9allocatorE",
    "_ZN2at4cuda24getCurrentCUDABlasHandleEv",
    "_ZN2at4cuda5emptyEN3c108ArrayRefIlEENS1_13TensorOptionsESt8optionalINS1_12MemoryFormatEE",
    "_ZN2at25compositeexplicitautograd5zerosEN3c108ArrayRefIlEENS1_13TensorOptionsE",
    "_ZN3c106detail14torchCheckFailEPKcS2_jS2_",
    "_ZNK2at10TensorBase8data_ptrIfEEPT_v",
    "cudaGetLastError", "__cudaRegisterFatBinary", "PyLong_FromLong", "memcpy",
]

REFUSED = [
    ("_ZN2at4_ops4relu4callERKNS_6TensorE", COMPUTE),
    ("_ZN2at4_ops5clone4callERKNS_6TensorESt8optionalIN3c1012MemoryFormatEE", COMPUTE),
    ("_ZN2at4_ops10mul_Scalar4callERKNS_6TensorERKN3c106ScalarE", COMPUTE),
    ("_ZN2at4_ops19no_such_op_overload4callERKNS_6TensorE", COMPUTE),
    ("_ZN2at6native4reluERKNS_6TensorE", COMPUTE),
    ("_ZN2at3cpu3addERKNS_6TensorES3_RKN3c106ScalarE", COMPUTE),
    ("_ZN2at4cuda4reluERKNS_6TensorE", COMPUTE),
    ("_ZN2at4cuda7add_outERNS_6TensorERKS1_S4_RKN3c106ScalarE", COMPUTE),
    ("_ZN2at4cuda4blas4gemmIfEEvcclllN3c1017OpMathTypeImplIT_E4typeEPKS5_lSA_lS7_PS5_l", COMPUTE),
    ("_ZN2at25compositeexplicitautograd4onesEN3c108ArrayRefIlEENS1_13TensorOptionsE", COMPUTE),
    ("_ZN2at9full_likeERKNS_6TensorERKN3c106ScalarENS3_13TensorOptionsESt8optionalINS3_12MemoryFormatEE", COMPUTE),
    ("_ZN5torch3jit6tracer12TracingStateC1Ev", COMPUTE),
    ("_ZN2at4_ops4relu10redispatchEN3c1014DispatchKeySetERKNS_6TensorE", SWITCH),
    ("_ZN2at4_ops10empty_like10redispatchEN3c1014DispatchKeySetERKNS_6TensorE", SWITCH),
    ("_ZN2at20enableRecordFunctionEb", SWITCH),
    ("_ZN2at19RecordFunctionGuardC2Eb", SWITCH),
    ("_ZN2at24set_record_function_tls_ERKNS_17RecordFunctionTLSE", SWITCH),
    ("_ZN2at14clearCallbacksEv", SWITCH),
    ("_ZN2at16ThreadLocalState19setThreadLocalStateERKS0_", SWITCH),
    ("_ZN3c104impl29tls_set_dispatch_key_excludedENS_11DispatchKeyEb", SWITCH),
    ("_ZN3c104impl23IncludeDispatchKeyGuardC1ENS_14DispatchKeySetE", SWITCH),
    ("_ZN3c104impl33_force_tls_local_dispatch_key_setENS0_19LocalDispatchKeySetE", SWITCH),
    ("_ZN3c104impl26raw_local_dispatch_key_setE", SWITCH),
    ("_ZTWN3c104impl26raw_local_dispatch_key_setE", SWITCH),
    ("_ZN3c104impl20TorchDispatchModeTLS9pop_stackEv", SWITCH),
    ("_ZN3c1010Dispatcher13realSingletonEv", SWITCH),
    ("_ZNK3c1014OperatorHandle9callBoxedEPSt6vectorINS_6IValueESaIS2_EE", SWITCH),
    ("_ZN5torch8autograd8profiler21disableProfilerLegacyESt8optionalINS1_25ProfilerDisableOptionsEE", SWITCH),
    ("dlsym", SWITCH), ("dlopen", SWITCH), ("dlvsym", SWITCH), ("dl_iterate_phdr", SWITCH), ("_dl_sym", SWITCH),
]


@pytest.mark.parametrize("symbol", HONEST)
def test_policy_allows_what_honest_bindings_import(symbol):
    assert native_code.policy().judge(symbol) is None


@pytest.mark.parametrize("symbol, violation", REFUSED)
def test_policy_refuses_compute_and_switches(symbol, violation):
    verdict = native_code.policy().judge(symbol)
    assert verdict is not None and verdict[0] == violation, verdict
    assert violation in guard.VIOLATIONS and "\n" not in verdict[1]


def test_layout_ops_are_judged_by_what_they_run():
    # Allowed by name only because the observers judge them by what they run (guard._DECOMPOSED_OPS).
    assert guard.LAYOUT_OPS <= guard._decomposed_ops()
    assert not any(guard.op_allowed(op) for op in ("relu", "add", "mul", "clone", "copy_", "fill_", "addmm"))


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
def test_every_ops_struct_of_libtorch_names_a_registered_operator():
    # at::_ops::<struct>: <name> for an operator's default overload, <name>_<overload> otherwise;
    # checked against every struct libtorch_cpu exports, so none is misread as unknown or as another.
    import torch
    lib = os.path.join(torch.__path__[0], "lib", "libtorch_cpu.so")
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    structs = {native_code.scope(line.split()[-1])[2] for line in out.splitlines()
               if line.split()[-1].startswith("_ZN2at4_ops")}
    assert len(structs) > 1000
    policy = native_code.policy()
    assert structs <= set(policy.structs), sorted(structs - set(policy.structs))[:10]
    assert policy.structs["add_Scalar"] == "add" and policy.structs["empty_memory_format"] == "empty"
    assert policy.structs["add__Tensor"] == "add_"


# --- the reader ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def honest_module(solutions):
    _, job = solutions("honest_elementwise")
    return module_file(job["module_path"])


@pytest.mark.skipif(shutil.which("nm") is None, reason="binutils' nm is not installed")
@pytest.mark.parametrize("name", ["honest_elementwise", "binding_disables_record_function", "native_clock_patch"])
def test_reader_sees_every_undefined_symbol_nm_sees(solutions, name):
    _, job = solutions(name)
    path = module_file(job["module_path"])
    imports = native_code.read_shared_object(path).imports
    assert nm_undefined(path) <= imports  # and defined symbols a relocation names, which nm -u leaves out


def test_the_red_team_modules_are_judged_as_their_tricks(solutions):
    verdicts = {}
    for name in ("binding_aten", "binding_disables_record_function", "binding_calls_cpu_kernels",
                 "binding_resolves_aten_by_name", "native_clock_patch", "honest_linear", "aten_override_in_binding"):
        _, job = solutions(name)
        verdicts[name] = set(native_code.check_module_dir(job["module_path"]))
    assert verdicts == {
        "binding_aten": {COMPUTE},
        "binding_disables_record_function": {COMPUTE, SWITCH},
        "binding_calls_cpu_kernels": {COMPUTE},
        "binding_resolves_aten_by_name": {SWITCH},
        "native_clock_patch": set(),  # its cheat is the clock, caught by the worker's
        "honest_linear": set(),
        "aten_override_in_binding": set(),  # a kernel registered over aten::clone: process_hook's
    }


def elf_fields(data):
    """(phoff, phnum, the end of the loaded segments' file data) of an ELF64 file."""
    phoff, phnum = struct.unpack_from("<Q", data, 32)[0], struct.unpack_from("<H", data, 56)[0]
    end = 0
    for i in range(phnum):
        p_type, _, offset, _, _, filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + 56 * i)
        if p_type == 1:
            end = max(end, offset + filesz)
    return phoff, phnum, end


def mutations(data):
    """(what, bytes): the honest module broken in the ways a reader could trip on."""
    phoff, phnum, end = elf_fields(data)
    out = [("empty", b""), ("the magic alone", data[:4]), ("a cut header", data[:40]),
           ("cut in the program headers", data[:phoff + 56 * phnum - 7]),
           ("cut in the loaded segments", data[:end // 2]), ("cut one byte short", data[:end - 1]),
           ("ELF magic then noise", b"\x7fELF" + os.urandom(4096)),
           ("32-bit", data[:4] + b"\x01" + data[5:]), ("big-endian", data[:5] + b"\x02" + data[6:])]
    broken = bytearray(data)
    struct.pack_into("<H", broken, 56, 0xFFFF)  # e_phnum: the extended numbering no shared object uses
    out.append(("program header count 0xffff", bytes(broken)))
    broken = bytearray(data)
    struct.pack_into("<Q", broken, 32, len(data) + 64)  # e_phoff past the end
    out.append(("program headers past the end", bytes(broken)))
    broken = bytearray(data)
    for i in range(phnum):  # every loaded segment writable: the tables could be relocated over
        at = phoff + 56 * i
        if struct.unpack_from("<I", broken, at)[0] == 1:
            struct.pack_into("<I", broken, at + 4, struct.unpack_from("<I", broken, at + 4)[0] | 2)
    out.append(("writable tables", bytes(broken)))
    broken = bytearray(data)
    for i in range(phnum):  # the dynamic section's file offset moved off its address
        at = phoff + 56 * i
        if struct.unpack_from("<I", broken, at)[0] == 2:
            struct.pack_into("<Q", broken, at + 8, struct.unpack_from("<Q", broken, at + 8)[0] + 8)
    out.append(("dynamic section moved", bytes(broken)))
    return out


def test_a_broken_shared_object_is_refused_in_one_line(honest_module, tmp_path):
    data = open(honest_module, "rb").read()
    assert native_code.check_file(honest_module) == {}
    for what, broken in mutations(data):
        path = tmp_path / "cuda_extension.so"
        path.write_bytes(broken)
        verdict = native_code.check_file(str(path), "cuda_extension.so")  # never raises
        assert set(verdict) == {UNCHECKED}, (what, verdict)
        line = verdict[UNCHECKED]
        assert line.startswith("cuda_extension.so") and "\n" not in line and len(line) < 200, (what, line)


def test_the_module_directory_is_read_whole(honest_module, tmp_path):
    shutil.copy(honest_module, tmp_path)
    (tmp_path / "notes.txt").write_text("not code")
    obj = tmp_path / "kernel.o"  # a relocatable object: nothing a process loads
    obj.write_bytes(open(honest_module, "rb").read(16) + struct.pack("<H", 1) + b"\0" * 46)
    assert native_code.check_module_dir(str(tmp_path)) == {}
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.so").write_bytes(open(honest_module, "rb").read()[:4096])
    found = native_code.check_module_dir(str(tmp_path))
    assert set(found) == {UNCHECKED} and found[UNCHECKED].startswith("sub/helper.so"), found


def test_a_truncated_module_fails_its_job_with_a_named_violation(worker, solutions, honest_module, tmp_path):
    # A module the reader cannot read is never loaded and never passes: reward -1, one line.
    _, job = solutions("honest_elementwise")
    broken = tmp_path / os.path.basename(honest_module)
    broken.write_bytes(open(honest_module, "rb").read()[:8192])
    reply = worker.request(dict(job, module_path=str(tmp_path)))
    assert reply["ok"], reply["error"]
    record = reply["record"]
    assert record["violations"] == [UNCHECKED] and record["reward"] == -1 and not record["correct"], record
    assert "refused before it was loaded" in record["error"] and "\n" not in record["error"], record["error"]


# --- honest builds as the product makes them -----------------------------------------------------

def _gpu_candidates_solution(root):
    # Every GPU test candidate builds the same two files (candidates_gpu/*/candidate.json).
    (root / "kernels").mkdir(parents=True)
    for k in ("gpu_elementwise.cu", "gpu_binding.cpp"):
        shutil.copy(os.path.join(HERE, "kernels", k), root / "kernels" / k)
    return str(root)


# Three of the shipped demonstrations (all twenty bench ones passed when built by hand, 2026-12-07).
DEMOS = ["bench/bench_05_matmul", "bench/bench_16_mlp", "smoke/smoke_05_matmul"]


@pytest.mark.parametrize("name", ["candidates_gpu"] + DEMOS)
def test_honest_bindings_built_as_the_product_builds_them_pass(name, tmp_path):
    # Bindings at the product's -O0 (build.binding_flags), which inlines nothing and so imports the
    # most; CUDA sources with nvcc. What they import (at::_ops::empty_like, c10::cuda's stream,
    # ExcludeDispatchKeyGuard through torch::empty, TORCH_CHECK's helpers) must all pass.
    solution = _gpu_candidates_solution(tmp_path) if name == "candidates_gpu" else \
        os.path.join(REPO, "corpus", "demos", name)
    uses_cuda = name == "candidates_gpu" or any(f.endswith(".cu") for f in os.listdir(os.path.join(solution, "kernels")))
    if uses_cuda and shutil.which("nvcc") is None:
        pytest.skip("nvcc is not installed")
    module_dir = build_candidate.build(solution, CACHE, binding_opt="-O0")
    assert native_code.check_module_dir(module_dir) == {}
