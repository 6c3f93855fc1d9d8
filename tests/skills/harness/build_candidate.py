"""Builds a solution directory into an importable `cuda_extension` module for the harness tests.

The product's build is kernels/build (build_solution, used by `cuda-agent check`); this is the
small compile the Python red-team tests use so they can run without the C++ tree. Objects are
cached by the hash of their source and flags, so candidates that share kernel files build once.
"""
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig

import torch.utils.cpp_extension as cpp

HERE = os.path.dirname(os.path.abspath(__file__))


def _flags(opt="-O1"):
    includes = cpp.include_paths() + [sysconfig.get_paths()["include"]]
    abi = int(getattr(__import__("torch")._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return ["-std=c++17", opt, "-fPIC", "-w", f"-D_GLIBCXX_USE_CXX11_ABI={abi}",
            "-DTORCH_EXTENSION_NAME=cuda_extension", "-DTORCH_API_INCLUDE_EXTENSION_H"] + \
        [f"-I{p}" for p in includes]


def _digest(*parts):
    h = hashlib.sha256()
    for p in parts:
        h.update(p if isinstance(p, bytes) else p.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def is_binding_file(path):
    """The product build's binding files (kernels/build: binding.cpp, kernels/*_binding.cpp)."""
    name = os.path.basename(path)
    return name == "binding.cpp" or name.endswith("_binding.cpp")


def build(solution_dir, cache_dir, binding_opt="-O1"):
    """Returns the directory holding cuda_extension<EXT_SUFFIX>; raises CalledProcessError on a compile error.
    binding_opt: the optimisation of binding files; the product compiles them at -O0 (build.binding_flags),
    which inlines nothing and so imports the most of torch's symbols."""
    os.makedirs(cache_dir, exist_ok=True)
    sources = sorted(glob.glob(os.path.join(solution_dir, "kernels", "*.cpp")) +
                     glob.glob(os.path.join(solution_dir, "kernels", "*.cu")))
    binding = os.path.join(solution_dir, "binding.cpp")
    sources.append(binding if os.path.exists(binding) else os.path.join(HERE, "kernels", "binding.cpp"))
    flags = _flags()
    if any(s.endswith(".cu") for s in sources):
        flags.append(f"-I{os.path.join(cpp.CUDA_HOME or '/usr/local/cuda', 'include')}")
    registry = open(os.path.join(HERE, "kernels", "binding_registry.h"), "rb").read()
    objects, jobs = [], []
    tmp = f".{os.getpid()}.tmp"  # test processes share the cache and may build the same object at once
    for src in sources:
        data = open(src, "rb").read()
        own = [binding_opt if f == "-O1" else f for f in flags] if is_binding_file(src) else flags
        obj = os.path.join(cache_dir, _digest(data, registry, " ".join(own), os.path.basename(src)) + ".o")
        objects.append(obj)
        if os.path.exists(obj):
            continue
        work = os.path.join(cache_dir, "src-" + os.path.basename(obj)[:-2])
        os.makedirs(os.path.join(work, "kernels"), exist_ok=True)
        shutil.copy(os.path.join(HERE, "kernels", "binding_registry.h"), work)
        is_binding = os.path.basename(src) == "binding.cpp" and os.path.basename(os.path.dirname(src)) != "kernels" \
            or src == os.path.join(HERE, "kernels", "binding.cpp")
        local = os.path.join(work, "" if is_binding else "kernels", os.path.basename(src))
        shutil.copy(src, local)
        if src.endswith(".cu"):
            cmd = ["nvcc", "-c", "-std=c++17", "-O2", "-Xcompiler", "-fPIC", "-arch=sm_90"] + \
                [f for f in flags if f.startswith(("-I", "-D"))] + [local, "-o", obj + tmp]
        else:
            cmd = ["g++", "-c"] + own + [local, "-o", obj + tmp]
        jobs.append((subprocess.Popen(cmd, stderr=subprocess.PIPE), cmd, obj))
    for proc, cmd, obj in jobs:
        _, err = proc.communicate()
        if proc.returncode != 0:
            raise subprocess.CalledProcessError(proc.returncode, cmd, stderr=err)
        os.replace(obj + tmp, obj)
    module_dir = os.path.join(cache_dir, "mod-" + _digest(*[os.path.basename(o) for o in objects]))
    target = os.path.join(module_dir, "cuda_extension" + sysconfig.get_config_var("EXT_SUFFIX"))
    if not os.path.exists(target):
        os.makedirs(module_dir, exist_ok=True)
        libs = [f"-L{p}" for p in cpp.library_paths()] + [f"-Wl,-rpath,{p}" for p in cpp.library_paths()] + \
            ["-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python"]
        if any(s.endswith(".cu") for s in sources):
            libs += ["-lc10_cuda", "-ltorch_cuda", "-lcudart"] + \
                [f"-L{os.path.join(cpp.CUDA_HOME or '/usr/local/cuda', 'lib64')}"]
        subprocess.run(["g++", "-shared", "-o", target + tmp] + objects + libs, check=True)
        os.replace(target + tmp, target)
    return module_dir


if __name__ == "__main__":
    print(build(sys.argv[1], sys.argv[2]))
