"""python -m cuda_agent_corpus validate|import|list|synth|catalogue (what `cuda-agent corpus`
runs). Results go to standard output (one JSON object with --json), progress to standard error
and, with --progress-file, to that file as well (the C++ command shows it as it grows; status
lines there are records that it draws, see progress.py).
Exit status: 0 done, 1 some task failed validation, 2 bad usage (one line naming the fix)."""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from .progress import Reporter
from .task import TaskError, TaskSet


def _task_paths(targets):
    """(label, path, Task or None) for each task file named or held by a set directory."""
    for target in targets:
        p = Path(target)
        if p.is_dir():
            ts = TaskSet.open(p)
            for task in ts.tasks.values():
                yield task.id, ts.path_of(task), task
        elif p.is_file():
            yield p.stem, p, None
        else:
            raise TaskError(f"{p}: no such task file or set directory")


def _filters_payload(args, label, path) -> dict:
    from .filters import FilterConfig
    cfg = FilterConfig(device="cuda" if args.device.startswith("cuda") else args.device,
                       runtime_min_ms=args.min_ms, runtime_max_ms=args.max_ms)
    try:
        code = Path(path).read_text()
    except OSError as e:
        return {"id": label, "read_error": f"{path}: cannot read ({e.strerror}); check the path"}
    return {"id": label, "code": code, "config": cfg.__dict__}


def _validate_entry(args, label, outcome) -> dict:
    """One task's entry in the report, with its failure cause (None when it is valid)."""
    entry = {"id": label, "seconds": outcome.seconds}
    if outcome.failure is not None:  # the pool's: timeout, crash, error
        return {**entry, "ok": False, "cause": outcome.failure, "error": f"{label}: {outcome.message}"}
    v = outcome.value
    if args.filters:
        ok = v["accepted"]
        return {**entry, "ok": ok, "cause": None if ok else v["stage"], "stage": v["stage"],
                "error": v["reason"], "eager_ms": v.get("eager_ms")}
    if not v["ok"]:
        return {**entry, "ok": False, "cause": v["cause"], "error": v["error"]}
    return {**entry, "ok": True, "cause": None, "output_shapes": v["output_shapes"],
            "forward_ms": v["forward_ms"]}


def _task_line(entry) -> str:
    if not entry["ok"]:
        return f"FAIL {entry['id']} [{entry['cause']}]: {entry['error']}"
    if "stage" in entry:
        eager = f"{entry['eager_ms']:.3f} ms eager" if entry.get("eager_ms") else ""
        return f"ok   {entry['id']}  {entry['stage']} {eager}"
    return f"ok   {entry['id']}  out {entry['output_shapes']}  {entry['forward_ms']:.2f} ms"


def _failure_summary(entries, shown: int = 5) -> list:
    """`cause  count  ids...` lines, most common cause first."""
    by_cause = {}
    for e in entries:
        if not e["ok"]:
            by_cause.setdefault(e["cause"], []).append(e["id"])
    lines = []
    for cause, ids in sorted(by_cause.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        more = f" (+{len(ids) - shown} more)" if len(ids) > shown else ""
        lines.append(f"  {cause:<16} {len(ids):>5}  {', '.join(ids[:shown])}{more}")
    return lines


def cmd_validate(args, progress) -> int:
    """Every task through persistent worker processes (workers.WorkerPool): per-task time limit,
    a crashing task fails alone, results in input order, failures counted by cause."""
    import time
    from . import workers
    started = time.perf_counter()
    tasks = [(label, path) for label, path, _task in _task_paths(args.targets)]
    if args.workers < 0 or args.task_timeout < 0:
        raise TaskError("validate: --workers and --task-timeout take 0 or more (0: the default, "
                        "no limit)")
    try:
        envs = workers.environments_for(args.device, args.workers, len(tasks))
    except workers.PoolError as e:
        raise TaskError(str(e)) from e
    device = "cuda" if args.device.startswith("cuda") else args.device  # pinned in the worker
    draw_on_device = device != "cpu" and not args.draw_on_cpu

    entries = [None] * len(tasks)
    payloads, dispatched = [], []  # what goes to the workers, and each one's task index
    for i, (label, path) in enumerate(tasks):
        if args.filters:
            payload = _filters_payload(args, label, path)
            if "read_error" in payload:
                entries[i] = {"id": label, "ok": False, "cause": "read", "seconds": 0.0,
                              "error": payload["read_error"]}
                progress(_task_line(entries[i]))
                continue
        else:
            payload = {"path": str(path), "device": device,
                       "draw_on_device": draw_on_device}
        payloads.append(payload)
        dispatched.append(i)

    failed = sum(1 for e in entries if e is not None)
    limit = f"{args.task_timeout:g} s a task" if args.task_timeout else "no time limit"
    progress(f"validating {len(tasks)} tasks on {args.device} with {len(envs)} worker(s), {limit}")

    def on_result(outcome) -> None:
        nonlocal failed
        i = dispatched[outcome.index]
        entries[i] = _validate_entry(args, tasks[i][0], outcome)
        failed += not entries[i]["ok"]
        progress(_task_line(entries[i]))

    def on_status(done, running, queued) -> None:
        progress.status(done + len(tasks) - len(payloads), running, queued,
                        time.perf_counter() - started, f"{failed} failed" if failed else "")

    if payloads:
        function = ("cuda_agent_corpus.filters:filter_task" if args.filters
                    else "cuda_agent_corpus.loader:validate_task")
        try:
            with workers.WorkerPool(envs, task_timeout=args.task_timeout or None) as pool:
                pool.run(function, payloads, on_result, on_status)
        except workers.PoolError as e:
            raise TaskError(str(e)) from e
    progress.finish()

    seconds = time.perf_counter() - started
    by_cause = {}
    for e in entries:
        if not e["ok"]:
            by_cause[e["cause"]] = by_cause.get(e["cause"], 0) + 1
    rate = len(tasks) / seconds if seconds > 0 else 0.0
    doc = {"validated": len(tasks), "failed": failed,
           "failures_by_cause": dict(sorted(by_cause.items(), key=lambda kv: (-kv[1], kv[0]))),
           "device": args.device, "workers": len(envs), "task_timeout_s": args.task_timeout,
           "draw_on_device": draw_on_device, "seconds": round(seconds, 2),
           "tasks_per_second": round(rate, 2), "tasks": entries}
    text = [f"{len(tasks) - failed}/{len(tasks)} tasks valid in {seconds:.1f} s ({rate:.2f} tasks/s, "
            f"{len(envs)} worker(s) on {args.device})"]
    if failed:
        text = ["failures by cause:"] + _failure_summary(entries) + text
    _emit(args, doc, "\n".join(text))
    return 1 if failed else 0


def cmd_import(args, progress) -> int:
    from . import importers
    if args.kind == "kernelbench":
        ts, skipped = importers.import_kernelbench(args.source, args.out, args.set, progress=progress)
    else:
        ts, skipped = importers.import_ops6k(args.source, args.out, args.set, limit=args.limit,
                                             progress=progress)
    for line in skipped:
        progress(f"skipped {line}")
    _emit(args, {"set": ts.name, "dir": str(ts.dir), "tasks": len(ts.tasks), "skipped": skipped},
          f"{len(ts.tasks)} tasks in {ts.dir} ({len(skipped)} skipped)")
    return 0


def cmd_list(args, progress) -> int:
    ts = TaskSet.open(args.set_dir)
    tasks = [t.to_json() for t in ts.tasks.values()]
    if args.json:
        print(json.dumps({"set": ts.name, "tasks": tasks}))
    else:
        for t in tasks:
            print(f"{t['id']:<32} L{t['level']}  {t['source']:<12} {' -> '.join(t['operators'])}")
        print(f"{len(tasks)} tasks in set {ts.name}")
    return 0


def cmd_synth(args, progress) -> int:
    from .filters import FilterConfig
    from .synth import SynthConfig, synthesize
    fcfg = FilterConfig(device=args.device, compile=not args.no_compile,
                        compile_backend=args.compile_backend, runtime_min_ms=args.min_ms,
                        runtime_max_ms=args.max_ms, timing_runs=args.timing_runs)
    # On an H200 one elementwise op over 2^26 float32 elements takes ~0.13 ms: 2^28 puts typical
    # candidates near the 1 ms floor of the runtime window.
    elements = args.elements or ((1 << 28) if args.device.startswith("cuda") else (1 << 16))
    cfg = SynthConfig(out_dir=args.out, count=args.count, seed=args.seed, device=args.device,
                      workers=args.workers, elements=elements, id_prefix=args.prefix,
                      references=args.reference or [], reference_threshold=args.threshold,
                      filter=fcfg, task_timeout=args.task_timeout)
    summary = synthesize(cfg, progress, progress.status)
    progress.finish()
    if args.summary:
        Path(args.summary).write_text(json.dumps(summary, indent=1) + "\n")
    rates = ", ".join(f"{k} {v['passed']}/{v['entered']}" for k, v in summary["acceptance"].items()
                      if v["entered"])
    _emit(args, summary, f"{summary['accepted']}/{summary['candidates']} candidates accepted in "
          f"{summary['seconds']} s ({summary['tasks_per_minute']} tasks/min); per stage: {rates}; "
          f"rejected: {summary['rejected']}")
    return 0


def cmd_catalogue(args, progress) -> int:
    from . import catalogue
    ops = catalogue.crawl()
    _emit(args, {"operators": [o.to_json() for o in ops], "kinds": catalogue.summary(ops)},
          "\n".join(f"{o.kind:<13} {o.name}" for o in ops) + f"\n{len(ops)} operators")
    return 0


def cmd_kernelbench_candidate(args, progress) -> int:
    """One candidate into a solution workdir, or a directory of generations (named by task) into
    demonstrations that write and judge them, for `cuda-agent check` and `cuda-agent eval`."""
    from . import kernelbench_candidate as kb
    if args.file:
        try:
            record = kb.convert_file(args.file, args.out)
        except kb.ConversionError as e:
            _emit(args, {"ok": False, "error": str(e)}, f"not converted: {e}")
            return 1
        _emit(args, {"ok": True, **record}, f"converted {args.file} into {args.out}: "
              + ", ".join(record["files"]))
        return 0
    if not args.generations or not args.tasks:
        raise TaskError("kernelbench-candidate: give FILE, or --generations DIR with --tasks; see --help")
    result = kb.write_demonstrations(args.generations, args.tasks.split(","), args.out, args.device,
                                     progress)
    failed = sum(1 for r in result.values() if not r["ok"])
    _emit(args, {"converted": len(result) - failed, "not_converted": failed, "tasks": result},
          f"{len(result) - failed}/{len(result)} generations converted into {args.out}")
    return 0


def _emit(args, doc, text) -> None:
    print(json.dumps(doc) if args.json else text, flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="cuda-agent corpus")
    parser.add_argument("--json", action="store_true", help="one JSON object on standard output")
    parser.add_argument("--progress-file", help="also append progress lines to this file")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", help="import and run tasks once")
    p.add_argument("targets", nargs="+", help="task files or set directories")
    p.add_argument("--device", default="cpu")
    p.add_argument("--filters", action="store_true",
                   help="run synth's four filters (eager and compile execution, determinism, "
                        "non-constant output, eager runtime window) instead of one forward")
    p.add_argument("--min-ms", type=float, default=1.0)
    p.add_argument("--max-ms", type=float, default=100.0)
    p.add_argument("--workers", type=int, default=0,
                   help="worker processes (0: one per visible GPU on cuda, 2 on cpu)")
    p.add_argument("--task-timeout", type=float, default=60.0,
                   help="seconds one task may take before its worker is killed (0: no limit)")
    p.add_argument("--draw-on-cpu", action="store_true",
                   help="on cuda, build models and draw inputs on the CPU and move them, as "
                        "the harness does (default: directly on the GPU, much faster)")

    p = sub.add_parser("import", help="import a KernelBench checkout or an Ops-6K parquet file")
    p.add_argument("kind", choices=["kernelbench", "ops6k"])
    p.add_argument("source")
    p.add_argument("--out", required=True, help="set directory to write")
    p.add_argument("--set", help="set name (default: the directory's name)")
    p.add_argument("--limit", type=int, help="import at most this many rows (ops6k)")

    p = sub.add_parser("list", help="the tasks of a set")
    p.add_argument("set_dir")

    p = sub.add_parser("synth", help="compose, filter and write new tasks")
    p.add_argument("--out", required=True)
    p.add_argument("--count", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--elements", type=int, default=0)
    p.add_argument("--prefix", default="synth")
    p.add_argument("--reference", action="append", help="reference task directory or file")
    p.add_argument("--threshold", type=float, default=0.9)
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--compile-backend", default="inductor")
    p.add_argument("--min-ms", type=float, default=1.0)
    p.add_argument("--max-ms", type=float, default=100.0)
    p.add_argument("--timing-runs", type=int, default=5)
    p.add_argument("--summary", help="write the summary JSON to this file")
    p.add_argument("--task-timeout", type=float, default=600.0,
                   help="seconds one candidate's filters may take (0: no limit)")

    sub.add_parser("catalogue", help="the operators crawled from the installed torch")

    p = sub.add_parser("kernelbench-candidate",
                       help="lay out a KernelBench-format model_new.py (load_inline) as a solution")
    p.add_argument("file", nargs="?", help="the candidate's model_new.py")
    p.add_argument("--out", required=True, help="solution directory (FILE) or demonstrations root")
    p.add_argument("--generations", help="directory of generations: <task>.py or <task>/model_new.py")
    p.add_argument("--tasks", help="comma-separated task ids to convert from --generations")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])

    args = parser.parse_args(argv)
    progress = Reporter(args.progress_file)
    handlers = {"validate": cmd_validate, "import": cmd_import, "list": cmd_list,
                "synth": cmd_synth, "catalogue": cmd_catalogue,
                "kernelbench-candidate": cmd_kernelbench_candidate}
    try:
        return handlers[args.command](args, progress)
    except TaskError as e:
        print(f"cuda-agent corpus: error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # never exit 1 silently: 1 means "some tasks failed" to the caller
        traceback.print_exc()
        print(f"cuda-agent corpus: error: {args.command} failed: {type(e).__name__}: {e}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
