"""KernelBench-format candidates laid out as solution workdirs: what the static reading accepts
and refuses, what the workdir holds, and the prelude's run-time check of the sources."""
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

from cuda_agent_corpus import kernelbench_candidate as kb

HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "kernelbench_candidates"

MODEL_NEW = """
class ModelNew:
    def forward(self, x):
        return mod.f(x)
"""


def convert(tmp_path, code):
    return kb.convert(code, tmp_path / "out")


def test_kernelbench_example_layout(tmp_path):
    record = kb.convert_file(CANDIDATES / "bench_01_relu.py", tmp_path)
    assert record["files"] == ["kernels/relu_inline.cu", "kernels/relu_inline_binding.cpp", "model_new.py"]
    cu = (tmp_path / "kernels/relu_inline.cu").read_text()
    assert cu.index("#include <cuda_runtime.h>") < cu.index("__global__ void relu_kernel")
    binding = (tmp_path / "kernels/relu_inline_binding.cpp").read_text()
    assert "torch::Tensor relu_forward(torch::Tensor x);" in binding
    assert 'm.def("relu_forward", &relu_forward' in binding
    assert "REGISTER_BINDING(kernelbench_relu_inline" in binding
    assert record["modules"][0]["cuda"] is True
    assert record["modules"][0]["ignored_flags"] == {"extra_cflags": [""], "extra_ldflags": [""]}


def test_cpu_only_module_is_a_kernel_source(tmp_path):
    record = kb.convert_file(CANDIDATES / "smoke_01_relu.py", tmp_path)
    assert record["files"] == ["kernels/relu_inline.cpp", "model_new.py"]
    text = (tmp_path / "kernels/relu_inline.cpp").read_text()
    # Both cpp_sources strings, in order, after load_inline's include.
    assert text.index("#include <torch/extension.h>") < text.index('extern "C" void relu_run') \
        < text.index("torch::Tensor relu_forward")


@pytest.mark.parametrize("sources", [
    'SRC = "torch::Tensor f(torch::Tensor x) { return x; }"',
    'A = "torch::Tensor f(torch::Tensor x) "\nSRC = A + "{ return x; }"',
    'B = "return x;"\nSRC = f"torch::Tensor f(torch::Tensor x) {{ {B} }}"',
    'SRC = "".join(["torch::Tensor f(torch::Tensor x) ", "{ return x; }"])',
    'import textwrap\nSRC = textwrap.dedent("""\n    torch::Tensor f(torch::Tensor x) { return x; }\n""")',
    'SRC: str = "torch::Tensor f(torch::Tensor x) { return x; }"',
])
def test_static_forms_are_read(tmp_path, sources):
    code = f"from torch.utils.cpp_extension import load_inline\n{sources}\n" \
           f"mod = load_inline(name='m', cpp_sources=SRC, functions=['f'])\n{MODEL_NEW}"
    convert(tmp_path, code)
    text = (tmp_path / "out/kernels/m.cpp").read_text()
    assert "torch::Tensor f(torch::Tensor x)" in text and "return x;" in text


@pytest.mark.parametrize("code, message", [
    ("SRC = open('k.cu').read()\nmod = load_inline(name='m', cpp_sources=SRC, functions=['f'])",
     "not a value cuda-agent can read"),
    ("SRC = 'a'\nSRC = 'b'\nmod = load_inline(name='m', cpp_sources=SRC, functions=['f'])",
     "changes after it is bound"),
    ("P = []\nP.append('x')\nmod = load_inline(name='m', cpp_sources=P, functions=['f'])",
     "changes after it is bound"),
    ("S = 'x'\nfor S in ['y']:\n    pass\nmod = load_inline(name='m', cpp_sources=S, functions=['f'])",
     "changes after it is bound"),
    ("mod = load_inline(name='m', cpp_sources=UNDEFINED, functions=['f'])", "the name 'UNDEFINED'"),
    ("mod = load_inline(name='m', cpp_sources='x', functions=['f'], **opts)", "**kwargs"),
    ("mod = load_inline(name='m', cpp_sources='x', functions=['not an id'])", "not a C++ identifier"),
    ("a = load_inline(name='m', cpp_sources='x', functions=['f'])\n"
     "b = load_inline(name='m', cpp_sources='y', functions=['g'])", "two load_inline calls are named 'm'"),
    ("a = load_inline(name='m', cpp_sources='x', functions=['f'])\n"
     "b = load_inline(name='n', cpp_sources='y', functions=['f'])", "function 'f' is defined by"),
    ("from torch.utils.cpp_extension import load\nmod = load(name='m', sources=['k.cu'])",
     "torch.utils.cpp_extension.load"),
    ("x = 1", "calls load_inline nowhere"),
    ("mod = load_inline(name='m', cpp_sources='no module here')", "define no PYBIND11_MODULE"),
])
def test_what_cannot_be_read_is_refused_in_one_line(tmp_path, code, message):
    with pytest.raises(kb.ConversionError) as err:
        convert(tmp_path, code + "\n" + MODEL_NEW)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_a_program_without_model_new_or_that_does_not_parse(tmp_path):
    with pytest.raises(kb.ConversionError, match="no top-level class ModelNew"):
        convert(tmp_path, "mod = load_inline(name='m', cpp_sources='x', functions=['f'])")
    with pytest.raises(kb.ConversionError, match="does not parse"):
        convert(tmp_path, "class ModelNew(:\n")


def test_own_pybind_module_becomes_a_registration(tmp_path):
    code = ("SRC = '''torch::Tensor f(torch::Tensor x) { return x; }\n"
            "PYBIND11_MODULE(TORCH_EXTENSION_NAME, mod) { mod.def(\"f\", &f); }'''\n"
            "mod = load_inline(name='own', cpp_sources=SRC)\n" + MODEL_NEW)
    convert(tmp_path, code)
    text = (tmp_path / "out/kernels/own.cpp").read_text()
    assert "PYBIND11_MODULE" not in text
    assert "REGISTER_BINDING(kernelbench_own, kernelbench_own_module);" in text
    assert "static void kernelbench_own_module(pybind11::module& mod)\n{" in text.replace(") {", ")\n{")


def _run_prelude(model_new: Path, tmp_path, extra=""):
    """Runs the converted model_new.py with a stand-in cuda_extension module (the real one is a
    build's output; here only the prelude's check is under test)."""
    script = (f"import sys, types\nsys.modules['cuda_extension'] = types.ModuleType('cuda_extension')\n"
              f"sys.modules['cuda_extension'].relu_forward = lambda x: 'built'\n{extra}\n"
              f"import runpy\nns = runpy.run_path({str(model_new)!r})\n"
              "print(ns['ModelNew']().forward(None))\n")
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)


def test_prelude_returns_the_built_module(tmp_path):
    kb.convert_file(CANDIDATES / "bench_01_relu.py", tmp_path)
    result = _run_prelude(tmp_path / "model_new.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "built"


def test_prelude_refuses_sources_that_differ_at_run_time(tmp_path):
    # What the program passes at run time is not the text cuda-agent built (here a line added
    # after conversion stands for any run-time change): the import fails, nothing unbuilt runs.
    kb.convert_file(CANDIDATES / "bench_01_relu.py", tmp_path)
    model_new = tmp_path / "model_new.py"
    text = model_new.read_text().replace(
        'relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x);"',
        'relu_cpp_source = "torch::Tensor relu_forward(torch::Tensor x); // changed"')
    model_new.write_text(text)
    result = _run_prelude(model_new, tmp_path)
    assert result.returncode != 0
    assert "its sources at run time are not those cuda-agent built" in result.stderr


def test_future_imports_stay_first(tmp_path):
    code = "from __future__ import annotations\n" + (CANDIDATES / "bench_01_relu.py").read_text()
    (tmp_path / "cand.py").write_text(code)
    kb.convert_file(tmp_path / "cand.py", tmp_path / "out")
    text = (tmp_path / "out" / "model_new.py").read_text()
    assert text.startswith("from __future__ import annotations\n")
    compile(text, "model_new.py", "exec")  # a misplaced future import is a SyntaxError


def test_demonstrations_for_a_directory_of_generations(tmp_path):
    result = kb.write_demonstrations(CANDIDATES, ["smoke_01_relu", "smoke_08_add_relu"], tmp_path, "cpu")
    assert result["smoke_01_relu"]["ok"] and not result["smoke_08_add_relu"]["ok"]
    demo = json.loads((tmp_path / "smoke_01_relu" / "demo.json").read_text())
    assert demo["task_id"] == "smoke_01_relu" and demo["device"] == "cpu"
    written = [s["arguments"]["file_path"] for s in demo["steps"] if s["tool"] == "Write"]
    assert written == ["kernels/relu_inline.cpp", "model_new.py"]
    assert [s["arguments"]["command"] for s in demo["steps"] if s["tool"] == "Bash"] == ["build", "verify", "profile"]
    # Not converted: a kernel whose build fails with the reason, so it counts as not compiled.
    failing = (tmp_path / "smoke_08_add_relu" / "kernels" / "kernelbench_not_converted.cpp").read_text()
    assert failing.startswith("#error") and "changes after it is bound" in failing
    with pytest.raises(Exception, match="no generation for smoke_02_gelu"):
        kb.write_demonstrations(CANDIDATES, ["smoke_02_gelu"], tmp_path, "cpu")
