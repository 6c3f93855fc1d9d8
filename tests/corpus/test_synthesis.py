"""Catalogue crawl, composer, the four filters (each made to reject), AST dedup, and a small
end-to-end synth run with torch.compile in worker processes."""
import json
import math
import random

import pytest

from cuda_agent_corpus import catalogue, compose, dedup, filters
from cuda_agent_corpus.loader import load_source, validate
from cuda_agent_corpus.synth import SynthConfig, synthesize
from cuda_agent_corpus.task import TaskSet


@pytest.fixture(scope="module")
def ops():
    return catalogue.crawl()


def test_catalogue_classifies_by_probing(ops):
    by_name = {o.name: o.kind for o in ops}
    assert by_name["torch.relu"] == "unary"
    assert by_name["torch.add"] == "binary"
    assert by_name["torch.softmax"] == "dimwise"
    assert by_name["torch.sum"] == "reduction"
    assert by_name["nn.Linear"] == "module"
    assert by_name["nn.GELU"] == "module_unary"
    # Random or shape-changing operators never enter the catalogue.
    assert not any("dropout" in n.lower() or "rrelu" in n.lower() for n in by_name)
    assert "torch.flatten" not in by_name


def test_composer_shapes_match_execution(ops):
    rng = random.Random(3)
    lengths = []
    for i in range(25):
        cand = compose.compose(rng, ops, f"c{i}", 1 << 12)
        assert cand is not None
        lengths.append(len(cand.operators))
        v = validate(load_source(cand.code, cand.id))
        assert v.output_shapes == [list(cand.output_shape)], cand.code
    assert all(1 <= n <= 5 for n in lengths)
    assert lengths.count(2) > len(lengths) / 2  # two-operator chains dominate, as in Ops-6K


def _all_tensor_elements(cand):
    """Elements of every tensor a chain makes or takes, by the composer's own shape rules."""
    sizes = [math.prod(cand.input_shape)]
    for step in cand.steps:
        sizes += [step.weights] + [math.prod(s) for s in step.extra_inputs]
    return sizes + [math.prod(cand.output_shape)]


def test_no_chain_at_the_gpu_scale_asks_for_more_than_its_bound(ops):
    # At 2^28 elements a matmul or Linear over a long row once asked for 150 TB in get_inputs().
    rng = random.Random(11)
    elements = 1 << 28
    made = [compose.compose(rng, ops, f"g{i}", elements) for i in range(300)]
    made = [c for c in made if c is not None]
    assert len(made) > 250
    assert max(max(_all_tensor_elements(c)) for c in made) <= 16 * elements  # 16 GiB of float32 at most
    assert any("Linear" in " ".join(c.operators) or "matmul" in " ".join(c.operators) for c in made)


def _task(body, inputs="[torch.randn(64, 64)]"):
    return f'''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
{body}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
'''


NO_COMPILE = {"compile": False, "runtime_min_ms": 0.0, "runtime_max_ms": 1e9}


@pytest.mark.parametrize("body, stage", [
    ("        return torch.tanh(x)", "accepted"),
    ("        raise ValueError('no')", "eager"),
    ("        return x + torch.rand_like(x)", "deterministic"),
    ("        return torch.zeros_like(x) + 1.0", "nonconstant"),
    ("        return x.sum() * 0.0 + torch.ones(3, 3)", "nonconstant"),
])
def test_filters_reject_at_the_right_stage(body, stage):
    res = filters.filter_task({"id": "t", "code": _task(body), "config": NO_COMPILE})
    assert res["stage"] == stage, res
    assert res["accepted"] == (stage == "accepted")


def test_runtime_window_rejects():
    cfg = dict(NO_COMPILE, runtime_min_ms=1e6)
    res = filters.filter_task({"id": "t", "code": _task("        return torch.tanh(x)"),
                               "config": cfg})
    assert res["stage"] == "runtime" and res["eager_ms"] > 0


def test_compile_stage_rejects_what_dynamo_cannot_run():
    # A graph break on data-dependent Python control flow still compiles; a forward that
    # calls a non-traceable builtin with fullgraph semantics is what fails. Using an unknown
    # backend name is the reliable way to make the compile stage fail.
    cfg = dict(NO_COMPILE, compile=True, compile_backend="no_such_backend")
    res = filters.filter_task({"id": "t", "code": _task("        return torch.tanh(x)"),
                               "config": cfg})
    assert res["stage"] == "compile" and "no_such_backend" in res["reason"]


def test_import_errors_are_rejections():
    res = filters.filter_task({"id": "t", "code": "def (", "config": NO_COMPILE})
    assert res["stage"] == "import" and not res["accepted"]


def test_dedup_ignores_names_and_sizes():
    a = _task("        y = torch.relu(x)\n        return torch.sum(y, dim=1)")
    b = _task("        z = torch.relu(x)\n        return torch.sum(z, dim=0)",
              "[torch.randn(8, 9)]")
    c = '''import torch\nimport torch.nn as nn\nclass Model(nn.Module):\n    def __init__(self, n):
        super().__init__()\n        self.conv = nn.Conv2d(n, n, 3)\n        self.bn = nn.BatchNorm2d(n)
    def forward(self, x, y):\n        return self.bn(self.conv(x)) * torch.sigmoid(y)\n'''
    ref = dedup.Reference()
    ref.add("a", a)
    assert dedup.is_duplicate(ref, b, 0.9)[0]
    dup, _, score = dedup.is_duplicate(ref, c, 0.9)
    assert not dup and score < 0.9


def test_synth_end_to_end_with_compile(tmp_path):
    """Six candidates through two worker processes, torch.compile (inductor) included."""
    ref_dir = tmp_path / "ref"
    ref_dir.mkdir()
    cfg = SynthConfig(out_dir=str(tmp_path / "out"), count=6, seed=11, workers=2,
                      elements=1 << 12, references=[str(ref_dir)],
                      filter=filters.FilterConfig(runtime_min_ms=0.0, runtime_max_ms=1e4,
                                                  timing_runs=3))
    lines, statuses = [], []
    summary = synthesize(cfg, lines.append, lambda *status: statuses.append(status))
    assert summary["accepted"] >= 3, summary
    assert statuses[-1][:3] == (summary["filtered"], 0, 0)  # live done / running / queued
    assert statuses[-1][4] == f"{summary['accepted']} accepted"
    assert summary["acceptance"]["compile"]["entered"] >= 3
    assert any("filtered" in line for line in lines)
    ts = TaskSet.open(tmp_path / "out")
    assert len(ts.tasks) == summary["accepted"]
    for task in ts.tasks.values():
        assert task.source == "synth" and 1 <= len(task.operators) <= 5
        validate(ts.path_of(task))

    # The accepted tasks, used as a reference at threshold 0.9, are near-duplicates of a re-run.
    again = synthesize(SynthConfig(out_dir=str(tmp_path / "again"), count=6, seed=11, workers=1,
                                   elements=1 << 12, references=[str(tmp_path / "out")],
                                   filter=filters.FilterConfig(compile=False, runtime_min_ms=0.0)))
    assert again["rejected"].get("reference_dedup", 0) >= summary["accepted"]
    json.dumps(summary)  # the summary is plain JSON


def test_cuda_synth_without_a_gpu_is_a_clear_error(monkeypatch):
    from cuda_agent_corpus import workers
    monkeypatch.setattr(workers, "visible_gpus", lambda: [])
    with pytest.raises(workers.PoolError, match="torch sees no CUDA GPU"):
        synthesize(SynthConfig(out_dir="unused", count=2, device="cuda", workers=2,
                               elements=1 << 10))


def test_a_failed_filter_rejects_only_that_candidate():
    """A hung, crashed or raising filter (a CUDA error outside its stages, say) is a rejection
    with its reason, not the end of the run; the pool itself is tested in test_validate_workers."""
    from cuda_agent_corpus.synth import filter_verdict
    from cuda_agent_corpus.workers import Outcome
    res = filter_verdict(Outcome(0, failure="error", message="RuntimeError: CUDA error: an "
                                 "illegal memory access was encountered"))
    assert not res["accepted"] and res["stage"] == "eager"
    assert "error: RuntimeError: CUDA error" in res["reason"]
    res = filter_verdict(Outcome(0, failure="crash", message="the worker process died (SIGSEGV)"))
    assert res["stage"] == "eager" and "SIGSEGV" in res["reason"]
    accepted = {"accepted": True, "stage": "accepted", "reason": "", "eager_ms": 1.0}
    assert filter_verdict(Outcome(0, value=accepted)) is accepted


def test_an_unexpected_error_is_a_named_failure_not_a_silent_exit_1(monkeypatch, capsys):
    from cuda_agent_corpus import __main__ as cli

    def explode(args, progress):
        raise OSError("disk on fire")
    monkeypatch.setattr(cli, "cmd_list", explode)
    assert cli.main(["list", "anywhere"]) == 3
    assert "cuda-agent corpus: error: list failed: OSError: disk on fire" in capsys.readouterr().err
