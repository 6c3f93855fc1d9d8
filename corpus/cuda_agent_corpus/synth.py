"""`cuda-agent corpus synth`: compose candidates, drop those too similar to a reference set,
run the four filters in bounded worker processes, write what passes into a set directory, and
summarise why the rest were rejected.

Workers: `workers.WorkerPool`, the pool `corpus validate` uses: on cuda one process per visible
GPU by default, each pinned with CUDA_VISIBLE_DEVICES (more workers than GPUs share them
round-robin); on cpu a configurable number. A worker runs `filters.filter_task` on plain dicts,
so the same function can later be dispatched to a GPU pool slot instead. A candidate that hangs
past the task timeout, or takes its worker down, is rejected and the worker replaced.
"""
from __future__ import annotations

import dataclasses
import hashlib
import random
import time
from typing import Callable, Dict, List, Optional

from . import catalogue, compose, dedup, filters, workers as pool
from .task import Task, TaskSet

Progress = Optional[Callable[[str], None]]
# on_status(done, running, queued, elapsed_s, tail): live counts for progress.Reporter.status
Status = Optional[Callable[[int, int, int, float, str], None]]


@dataclasses.dataclass
class SynthConfig:
    out_dir: str
    count: int = 20                   # candidates to compose
    seed: int = 0
    device: str = "cpu"
    workers: int = 0                  # 0: one per GPU on cuda, 2 on cpu
    elements: int = 1 << 16           # typical element count of a task's input
    id_prefix: str = "synth"
    references: List[str] = dataclasses.field(default_factory=list)
    reference_threshold: float = 0.9  # drop a candidate more similar than this to a reference
    filter: filters.FilterConfig = dataclasses.field(default_factory=filters.FilterConfig)
    op_count_weights: Optional[Dict[int, float]] = None
    task_timeout: float = 600.0       # seconds one candidate's filters may take (0: no limit)


def acceptance_by_stage(total: int, rejected: Dict[str, int]) -> Dict[str, dict]:
    """For each stage: how many candidates entered it, passed it, and the pass rate."""
    out, entered = {}, total
    for stage in ("reference_dedup", "self_dedup") + filters.STAGES:
        failed = rejected.get(stage, 0)
        out[stage] = {"entered": entered, "passed": entered - failed,
                      "rate": round((entered - failed) / entered, 4) if entered else None}
        entered -= failed
    return out


def filter_verdict(outcome: pool.Outcome) -> dict:
    """A filter's verdict; a candidate whose filters hung, took the worker down or let an
    exception out (a CUDA error outside its stages, say) is rejected at the eager stage with
    the reason, instead of ending the run."""
    if outcome.failure is None:
        return outcome.value
    return {"accepted": False, "stage": "eager",
            "reason": f"{outcome.failure}: {outcome.message}"}


def synthesize(cfg: SynthConfig, progress: Progress = None, on_status: Status = None) -> dict:
    started = time.perf_counter()
    say = progress or (lambda _m: None)
    rng = random.Random(cfg.seed)
    ops = catalogue.crawl()
    say(f"catalogue: {len(ops)} operators from torch ({catalogue.summary(ops)})")
    reference = dedup.read_references(cfg.references)
    if cfg.references:
        say(f"reference set: {len(reference)} programs")

    rejected: Dict[str, int] = {}
    examples: Dict[str, str] = {}
    candidates: List[compose.Candidate] = []
    seen = set()
    composed = 0
    for i in range(cfg.count):
        cand = compose.compose(rng, ops, f"{cfg.id_prefix}_{cfg.seed}_{i:05d}", cfg.elements,
                               cfg.op_count_weights)
        if cand is None:
            rejected["compose"] = rejected.get("compose", 0) + 1
            continue
        composed += 1
        if len(reference):
            dup, name, score = dedup.is_duplicate(reference, cand.code, cfg.reference_threshold)
            if dup:
                rejected["reference_dedup"] = rejected.get("reference_dedup", 0) + 1
                examples.setdefault("reference_dedup", f"{cand.id}: {score:.3f} similar to {name}")
                continue
        key = hashlib.sha256(" ".join(dedup.ast_tokens(cand.code) +
                                      [str(cand.input_shape)]).encode()).hexdigest()
        if key in seen:
            rejected["self_dedup"] = rejected.get("self_dedup", 0) + 1
            continue
        seen.add(key)
        candidates.append(cand)

    filter_cfg = dataclasses.asdict(cfg.filter)
    filter_cfg["device"] = "cuda" if cfg.device.startswith("cuda") else cfg.device
    results: Dict[str, dict] = {}
    envs = pool.environments_for(cfg.device, cfg.workers, len(candidates))
    workers = len(envs)
    say(f"filtering {len(candidates)} candidates on {cfg.device} with {workers} worker(s)")
    filter_started = time.perf_counter()

    def on_result(outcome: pool.Outcome) -> None:
        cand = candidates[outcome.index]
        res = results[cand.id] = filter_verdict(outcome)
        accepted = sum(1 for r in results.values() if r["accepted"])
        say(f"{len(results)}/{len(candidates)} filtered, {accepted} accepted, "
            f"{time.perf_counter() - started:.0f} s; {cand.id} {res['stage']}"
            + (f" ({res['reason'][:120]})" if res["reason"] else ""))

    def on_pool_status(done: int, running: int, queued: int) -> None:
        if on_status:
            accepted = sum(1 for r in results.values() if r["accepted"])
            on_status(done, running, queued, time.perf_counter() - filter_started,
                      f"{accepted} accepted")

    if candidates:
        with pool.WorkerPool(envs, task_timeout=cfg.task_timeout) as workers_pool:
            workers_pool.run("cuda_agent_corpus.filters:filter_task",
                             [{"id": c.id, "code": c.code, "config": filter_cfg}
                              for c in candidates], on_result, on_pool_status)

    ts = TaskSet.open_or_create(cfg.out_dir)
    written = []
    for cand in candidates:
        res = results.get(cand.id)
        if res is None:
            continue
        if not res["accepted"]:
            rejected[res["stage"]] = rejected.get(res["stage"], 0) + 1
            examples.setdefault(res["stage"], f"{cand.id}: {res['reason']}")
            continue
        sizes = dict(cand.sizes)
        sizes[f"eager_ms_{filter_cfg['device']}"] = round(res["eager_ms"], 4)
        task = Task(id=cand.id, name="_".join(o.split(".")[-1] for o in cand.operators),
                    level=1 if len(cand.operators) == 1 else 2, operators=cand.operators,
                    source="synth", file=f"{cand.id}.py", sizes=sizes)
        ts.add(task, cand.code, replace=True)
        written.append(cand.id)
    ts.save()

    seconds = time.perf_counter() - started
    summary = {
        "device": cfg.device, "workers": workers, "candidates": cfg.count, "composed": composed,
        "filtered": len(candidates), "accepted": len(written), "rejected": rejected,
        "acceptance": acceptance_by_stage(composed, rejected),
        "examples": examples, "seconds": round(seconds, 2),
        "candidates_per_minute": round(cfg.count / seconds * 60, 2),
        "tasks_per_minute": round(len(written) / seconds * 60, 2),
        "compile": cfg.filter.compile, "compile_backend": cfg.filter.compile_backend,
        "runtime_window_ms": [cfg.filter.runtime_min_ms, cfg.filter.runtime_max_ms],
        "out_dir": str(cfg.out_dir), "tasks": written,
    }
    return summary
