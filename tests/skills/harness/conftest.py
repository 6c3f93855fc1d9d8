"""Fixtures for the harness tests: a real worker process speaking the framed msgpack protocol,
candidate solution directories assembled from tests/skills/harness/candidates, built modules cached by
content (tests/skills/harness/build_candidate.py)."""
import json
import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
SKILLS = os.path.join(REPO, "skills")
sys.path.insert(0, SKILLS)
sys.path.insert(0, HERE)

from harness import framing  # noqa: E402
import build_candidate  # noqa: E402

CACHE = os.environ.get("CUDA_AGENT_HARNESS_TEST_CACHE", "/tmp/cuda-agent-harness-test-cache")


class Worker:
    def __init__(self):
        env = dict(os.environ, PYTHONPATH=SKILLS)
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.worker"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def request(self, msg):
        framing.write_frame(self.proc.stdin.fileno(), msg)
        return framing.read_frame(self.proc.stdout.fileno())

    def close(self):
        try:
            self.request({"op": "shutdown"})
        except Exception:
            pass
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def worker():
    w = Worker()
    yield w
    w.close()


def ship_module(shipped, work, vendor):
    """A second extension module, named shipped["name"], built from shipped["kernels"] into
    vendor/<name><EXT_SUFFIX> inside the solution, for model_new.py to load by its path: it never
    lies in the module directory the worker checks before loading."""
    (work / "kernels").mkdir(parents=True)
    for k in shipped["kernels"]:
        shutil.copy(os.path.join(HERE, "kernels", k), work / "kernels" / k)
    (work / "binding.cpp").write_text('#include <torch/extension.h>\n#include "binding_registry.h"\n'
                                      f'PYBIND11_MODULE({shipped["name"]}, m) {{ BindingRegistry::getInstance().applyBindings(m); }}\n')
    built = os.path.join(build_candidate.build(str(work), CACHE), "cuda_extension" + sysconfig.get_config_var("EXT_SUFFIX"))
    vendor.mkdir()
    shutil.copy(built, vendor / (shipped["name"] + sysconfig.get_config_var("EXT_SUFFIX")))


@pytest.fixture(scope="session")
def solutions(tmp_path_factory):
    root = tmp_path_factory.mktemp("solutions")
    baselines = tmp_path_factory.mktemp("baselines")
    built = {}

    def make(name, candidates_dir="candidates"):
        if name in built:
            return built[name]
        src = os.path.join(HERE, candidates_dir, name)
        meta = json.load(open(os.path.join(src, "candidate.json")))
        dst = root / name
        (dst / "kernels").mkdir(parents=True)
        shutil.copy(os.path.join(HERE, "tasks", meta["task"] + ".py"), dst / "model.py")
        shutil.copy(os.path.join(src, "model_new.py"), dst / "model_new.py")
        for k in meta["kernels"]:
            shutil.copy(os.path.join(HERE, "kernels", k), dst / "kernels" / k)
        module_dir = build_candidate.build(str(dst), CACHE)
        if meta.get("shipped_module"):
            ship_module(meta["shipped_module"], root / (name + ".shipped"), dst / "vendor")
        job = {"op": "evaluate", "task_path": str(dst / "model.py"), "solution_dir": str(dst),
               "module_path": module_dir, "device": meta.get("device", "cpu"), "warmup_runs": 1,
               "timed_runs": 3, "candidate_timeout_s": 60, "cpu_threads": 1, "baseline_cache_dir": str(baselines)}
        job.update(meta.get("options", {}))
        built[name] = (meta, job)
        return built[name]

    return make


def candidate_names(kind, candidates_dir="candidates"):
    names = []
    for name in sorted(os.listdir(os.path.join(HERE, candidates_dir))):
        meta = json.load(open(os.path.join(HERE, candidates_dir, name, "candidate.json")))
        memo = meta.get("memo", False)  # judged by the speed it earns, not by a violation
        clock = meta.get("clock_cheat", False)  # lies about its time: judged by the worker's clock
        hole = "known_hole" in meta  # a cheat the harness does not catch yet (test_redteam.py)
        # A known hole is only ever that kind, whatever else it says: a wrong output judged right
        # names no violation, and its expect_error is what closing the hole will make it fail with.
        honest = not meta["expect_violations"] and "expect_error" not in meta and not memo and not clock and not hole
        fault = "expect_error" in meta and not hole
        if (kind == "honest" and honest) or (kind == "fault" and fault) or (kind == "memo" and memo) or \
                (kind == "known_hole" and hole) or (kind == "clock" and clock) or \
                (kind == "cheat" and not honest and not fault and not memo and not clock and not hole):
            names.append(name)
    return names
