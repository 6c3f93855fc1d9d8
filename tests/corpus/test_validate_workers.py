"""`corpus validate` through persistent worker processes: per-task time limit, crashing tasks
that fail alone, results in input order, failures counted by cause, the progress format (in
Python and through the real `cuda-agent corpus validate`), and the pool itself."""
import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent_corpus import __main__ as cli
from cuda_agent_corpus import progress, workers
from cuda_agent_corpus.loader import instantiate, load_source
from test_task_and_loader import GOOD  # one valid task: Linear then relu on [4, 8]

HERE = Path(__file__).resolve().parent

FORWARD = "        return torch.relu(self.lin(x))"


def _forward(body):
    return GOOD.replace(FORWARD, body)


# (file name, program, expected cause or None for valid), in the order they are given.
CASES = [
    ("good_first", GOOD, None),
    ("hangs", _forward("        import time\n        time.sleep(1000)"), "timeout"),
    ("after_hang", GOOD, None),
    ("segfaults", _forward("        import os, signal\n        os.kill(os.getpid(), signal.SIGSEGV)"),
     "crash"),
    ("exits", _forward("        import os\n        os._exit(3)"), "crash"),
    ("after_crashes", GOOD, None),
    ("syntax", "def broken(:\n", "parse"),
    ("no_module", "import no_such_module_xyz\n", "import"),
    ("no_inputs", "import torch\nclass Model(torch.nn.Module): pass\n", "missing_symbols"),
    ("bad_init", GOOD.replace("return [8]", "raise RuntimeError('no init')"), "init"),
    ("bad_inputs", GOOD.replace("return [torch.randn(4, 8)]", "raise RuntimeError('boom')"),
     "inputs"),
    ("bad_forward", GOOD.replace("return [8]", "return [9]"), "forward"),
    ("no_tensor", _forward("        return 3"), "no_tensor"),
    ("nan", _forward("        return x / 0 * 0"), "non_finite"),
    ("exits_python", _forward("        raise SystemExit(4)"), "forward"),
    ("good_last", GOOD, None),
]
TIMEOUT_S = 4


def _write_cases(directory):
    paths = []
    for name, code, _cause in CASES:
        p = directory / f"{name}.py"
        p.write_text(code)
        paths.append(str(p))
    return paths


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """One JSON run of every case through two workers (one run: each worker costs a torch import)."""
    paths = _write_cases(tmp_path_factory.mktemp("cases"))
    out, err = io.StringIO(), io.StringIO()
    started = time.monotonic()
    old = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    try:
        status = cli.main(["--json", "validate", *paths, "--workers", "2",
                           "--task-timeout", str(TIMEOUT_S)])
    finally:
        sys.stdout, sys.stderr = old
    return status, json.loads(out.getvalue()), err.getvalue(), time.monotonic() - started


def test_every_task_gets_its_cause_in_input_order(validated):
    status, doc, err, _ = validated
    assert status == 1, err
    assert [t["id"] for t in doc["tasks"]] == [name for name, _, _ in CASES]
    for entry, (name, _code, cause) in zip(doc["tasks"], CASES):
        assert entry["cause"] == cause, (name, entry)
        assert entry["ok"] == (cause is None), entry
        if cause:
            assert "\n" not in entry["error"] and entry["error"], entry
    assert doc["validated"] == len(CASES) and doc["workers"] == 2
    assert doc["failed"] == sum(1 for _, _, c in CASES if c)


def test_failures_are_counted_by_cause(validated):
    _, doc, _, _ = validated
    expected = {}
    for _, _, cause in CASES:
        if cause:
            expected[cause] = expected.get(cause, 0) + 1
    assert doc["failures_by_cause"] == expected
    assert list(doc["failures_by_cause"])[0] == "crash"  # the most common first


def test_a_hung_task_is_killed_and_the_run_goes_on(validated):
    _, doc, err, seconds = validated
    hung = doc["tasks"][1]
    assert hung["cause"] == "timeout" and f"after {TIMEOUT_S} s" in hung["error"]
    assert TIMEOUT_S - 0.5 <= hung["seconds"] < TIMEOUT_S + 5
    assert doc["tasks"][2]["ok"] and doc["tasks"][-1]["ok"]
    assert seconds < 60  # not a hang: the sleep was for 1000 s
    assert "SIGSEGV" in doc["tasks"][3]["error"] and "exit status 3" in doc["tasks"][4]["error"]
    # Per-task lines and the status show as the run goes (standard error without a file).
    assert "[corpus] FAIL hangs [timeout]" in err
    assert re.search(r"\[corpus\] done 16/16 running 0 queued 0 \| [\d.]+/(s|min) \| 0s left "
                     r"\| 12 failed", err), err


def test_text_report_lists_failures_by_cause(tmp_path, capsys):
    paths = [str(p) for p in _write_some(tmp_path, ["good_first", "syntax", "no_module", "bad_forward"])]
    assert cli.main(["validate", *paths, "--workers", "1"]) == 1
    out = capsys.readouterr().out
    assert "failures by cause:" in out
    assert re.search(r"^\s+parse\s+1\s+syntax$", out, re.M), out
    assert re.search(r"^\s+forward\s+1\s+bad_forward$", out, re.M), out
    assert "1/4 tasks valid" in out


def _write_some(directory, names):
    chosen = {name: code for name, code, _ in CASES}
    for name in names:
        (directory / f"{name}.py").write_text(chosen[name])
        yield directory / f"{name}.py"


def test_all_valid_exits_0_and_filters_mode_names_stages(tmp_path, capsys):
    good = [str(p) for p in _write_some(tmp_path, ["good_first"])]
    assert cli.main(["--json", "validate", *good, "--workers", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["failed"] == 0 and doc["failures_by_cause"] == {} and doc["tasks"][0]["cause"] is None
    # --filters: the failures are named by the stage of synth's filters that rejected them.
    bad = [str(p) for p in _write_some(tmp_path, ["syntax", "bad_forward"])]
    assert cli.main(["--json", "validate", "--filters", *bad, str(tmp_path / "absent.py")]) == 2
    assert "no such task file" in capsys.readouterr().err
    assert cli.main(["--json", "validate", "--filters", *bad]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert [t["cause"] for t in doc["tasks"]] == ["import", "eager"]
    assert doc["failures_by_cause"] == {"eager": 1, "import": 1}


def test_cuda_without_a_gpu_is_a_usage_error(tmp_path, capsys):
    import torch
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible here")
    good = [str(p) for p in _write_some(tmp_path, ["good_first"])]
    assert cli.main(["validate", "--device", "cuda", *good]) == 2
    err = capsys.readouterr().err.strip()
    assert "torch sees no CUDA GPU" in err and "--device cpu" in err and "\n" not in err


# --- the pool -----------------------------------------------------------------------------------

@pytest.fixture
def probe_path(monkeypatch):
    """Workers find pool_probe.py (next to this file) on their PYTHONPATH."""
    monkeypatch.setenv("PYTHONPATH", str(HERE))


def test_pool_keeps_workers_and_replaces_the_dead(probe_path):
    envs = workers.worker_environments("cpu", 2, cores=4)
    assert [e["OMP_NUM_THREADS"] for e in envs] == ["2", "2"]
    seen, statuses = [], []
    functions = ["echo"] * 4 + ["segfault", "exit_now", "boom", "sleep", "chatty"] + ["echo"] * 4
    with workers.WorkerPool(envs, task_timeout=3) as pool:
        # One function per call: the pool runs one function, so the mix goes in as payloads.
        outcomes = pool.run("pool_probe:dispatch_by_payload", [
            {"fn": f, "value": i} for i, f in enumerate(functions)], seen.append,
            lambda *counts: statuses.append(counts))
        assert pool.replaced == 3  # the segfault, the os._exit and the timeout
    assert [o.index for o in outcomes] == list(range(len(functions)))
    assert sorted(o.index for o in seen) == list(range(len(functions)))
    kinds = [o.failure for o in outcomes]
    assert kinds == [None] * 4 + ["crash", "crash", "error", "timeout", None] + [None] * 4
    assert "ValueError: boom" in outcomes[6].message
    assert outcomes[8].value == {"printed": True}
    pids = {o.value["pid"] for o in outcomes[:4]}
    assert len(pids) <= 2  # persistent: four tasks, at most two processes
    assert statuses[-1] == (len(functions), 0, 0)
    assert all(d + r + q == len(functions) for d, r, q in statuses)


def test_cuda_workers_are_pinned_round_robin(monkeypatch):
    """Three workers on one GPU all see it (an index past the last GPU would hide every GPU);
    two GPUs alternate; the parent's own CUDA_VISIBLE_DEVICES ids are kept."""
    envs = workers.worker_environments("cuda", 3, ["0"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0", "0", "0"]
    envs = workers.worker_environments("cuda", 3, ["5", "7"])
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["5", "7", "5"]
    assert [e["CUDA_VISIBLE_DEVICES"] for e in workers.worker_environments("cuda:1", 2, ["5", "7"])] \
        == ["7", "7"]
    import torch
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5,7")
    assert workers.visible_gpus() == ["5", "7"]
    assert len(workers.environments_for("cuda", 0, tasks=10)) == 2  # one per GPU by default
    assert len(workers.environments_for("cuda", 0, tasks=1)) == 1   # never more than tasks
    assert len(workers.environments_for("cpu", 0, tasks=10)) == 2


def test_live_cuda_pinning_reaches_the_worker(probe_path):
    envs = workers.worker_environments("cuda", 2, ["3"])
    with workers.WorkerPool(envs) as pool:
        outcomes = pool.run("pool_probe:echo", [{"value": i} for i in range(4)])
    assert {o.value["gpu"] for o in outcomes} == {"3"}


def test_cuda_without_a_gpu_is_a_clear_error():
    with pytest.raises(workers.PoolError, match="torch sees no CUDA GPU"):
        workers.worker_environments("cuda", 2, [])


def test_workers_that_cannot_start_stop_the_run(probe_path, monkeypatch):
    monkeypatch.setattr(workers.sys, "executable", "/bin/false")
    with pytest.raises(workers.PoolError, match="die while starting"):
        with workers.WorkerPool([{}]) as pool:
            pool.run("pool_probe:echo", [{"value": 1}])


# --- drawing on the device ----------------------------------------------------------------------

def test_inputs_are_drawn_on_the_device_and_fall_back_to_the_cpu():
    """torch's meta device stands in for a GPU: tensors a task makes are created there; a task
    whose get_inputs only works on the CPU is drawn there and moved instead of failing."""
    on_device = load_source(GOOD, "on_device")
    model, inputs = instantiate(on_device, "on_device", "meta", draw_on_device=True)
    assert inputs[0].device.type == "meta" and model.lin.weight.device.type == "meta"
    cpu_only = load_source(GOOD.replace("return [torch.randn(4, 8)]",
                                        "return [torch.from_numpy(torch.randn(4, 8).numpy())]"),
                           "cpu_only")
    _, inputs = instantiate(cpu_only, "cpu_only", "meta", draw_on_device=True)
    assert inputs[0].device.type == "meta"


# --- the progress format ------------------------------------------------------------------------

def test_status_format():
    assert progress.format_status(0, 2, 8, 5.0) == "done 0/10 running 2 queued 8 | rate - | time left -"
    assert progress.format_status(30, 2, 68, 10.0) == "done 30/100 running 2 queued 68 | 3.0/s | 23s left"
    assert progress.format_status(3, 1, 6, 60.0) == "done 3/10 running 1 queued 6 | 3.0/min | 2m20s left"
    assert progress.format_status(12, 0, 4000, 3600.0, done_at_start=2) == \
        "done 12/4012 running 0 queued 4000 | 0.2/min | 400h00m left"
    assert progress.format_duration(59.5) == "1m00s" and progress.format_duration(7260) == "2h01m"
    assert progress.status_record(3, 1, 6, 2.5, "1 failed") == \
        "#status done=3 running=1 queued=6 elapsed=2.500 | 1 failed"


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_reporter_draws_in_place_on_a_terminal_and_throttles_plain_lines(tmp_path):
    tty = _Stream(True)
    r = progress.Reporter(stream=tty, file_interval_s=0)
    r.status(1, 1, 1, 1.0)
    r("ok   a")
    r.finish()
    text = tty.getvalue()
    assert text.startswith("\r[corpus] done 1/3") and "\x1b[K" in text
    assert "\r\x1b[K[corpus] ok   a\n\r[corpus] done 1/3" in text and text.endswith("\n")

    plain = _Stream(False)
    r = progress.Reporter(stream=plain, plain_interval_s=60)
    for done in range(5):
        r.status(done, 1, 4 - done, 1.0 + done)
    r.finish()
    lines = plain.getvalue().splitlines()
    assert lines == ["[corpus] done 0/5 running 1 queued 4 | rate - | time left -",
                     "[corpus] done 4/5 running 1 queued 0 | 48.0/min | 1s left"]
    assert "\r" not in plain.getvalue() and "\x1b" not in plain.getvalue()

    path = tmp_path / "progress"
    r = progress.Reporter(str(path), stream=_Stream(False), file_interval_s=60)
    r("a message")
    r.status(1, 0, 1, 1.0)
    r.status(2, 0, 0, 2.0)
    r.finish()
    assert path.read_text().splitlines() == [
        "a message", "#status done=1 running=0 queued=1 elapsed=1.000",
        "#status done=2 running=0 queued=0 elapsed=2.000"]


def test_binary_prints_plain_status_lines_when_not_a_terminal(tmp_path):
    """The real `cuda-agent corpus validate`, standard error a pipe: per-task lines and the
    status rendered by tools/cli/progress.hpp from the package's records, never `\\r`."""
    binary = os.environ.get("CUDA_AGENT_BINARY")
    if not binary:
        pytest.skip("CUDA_AGENT_BINARY is not set (ctest sets it)")
    paths = [str(p) for p in _write_some(tmp_path, ["good_first", "syntax", "good_last"])]
    r = subprocess.run([binary, "corpus", "validate", *paths, "--workers", "2",
                        "--task-timeout", "30"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 1, r.stderr
    assert "\r" not in r.stderr and "\x1b" not in r.stderr
    assert "[corpus] FAIL syntax [parse]:" in r.stderr
    assert re.search(r"^\[corpus\] ok   good_last  out \[\[4, 8\]\]", r.stderr, re.M), r.stderr
    statuses = [l for l in r.stderr.splitlines() if l.startswith("[corpus] done ")]
    assert statuses, r.stderr
    assert re.fullmatch(r"\[corpus\] done 3/3 running 0 queued 0 \| [\d.]+/(s|min) \| 0s left "
                        r"\| 1 failed", statuses[-1]), statuses
    assert not any("#status" in l for l in r.stderr.splitlines())
    assert "2/3 tasks valid" in r.stdout and "parse" in r.stdout
