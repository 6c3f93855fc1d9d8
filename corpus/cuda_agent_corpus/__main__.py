"""python -m cuda_agent_corpus validate|import|list|synth|catalogue (what `cuda-agent corpus`
runs). Results go to standard output (one JSON object with --json), progress to standard error
and, with --progress-file, to that file as well (the C++ command shows it as it grows).
Exit status: 0 done, 1 some task failed validation, 2 bad usage (one line naming the fix)."""
from __future__ import annotations

import argparse
import json
import sys
import traceback
from pathlib import Path

from .task import TaskError, TaskSet


class _Progress:
    def __init__(self, path):
        self.file = open(path, "a", buffering=1) if path else None

    def __call__(self, message: str) -> None:
        print(f"[corpus] {message}", file=sys.stderr, flush=True)
        if self.file:
            self.file.write(message + "\n")


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


def cmd_validate(args, progress) -> int:
    from .loader import validate
    results, failed = [], 0
    for label, path, _task in _task_paths(args.targets):
        if args.filters:
            from .filters import FilterConfig, filter_task
            cfg = FilterConfig(device=args.device, runtime_min_ms=args.min_ms,
                               runtime_max_ms=args.max_ms)
            res = filter_task({"id": label, "code": Path(path).read_text(),
                               "config": cfg.__dict__})
            ok = res["accepted"]
            failed += not ok
            results.append({"id": label, "ok": ok, "stage": res["stage"], "error": res["reason"],
                            "eager_ms": res.get("eager_ms"), "seconds": res["seconds"]})
            eager = f"{res['eager_ms']:.3f} ms eager" if res.get("eager_ms") else ""
            progress(f"{'ok  ' if ok else 'FAIL'} {label}  {res['stage']} {eager} {res['reason']}")
            continue
        try:
            v = validate(path, device=args.device)
            results.append({"id": label, "ok": True, "output_shapes": v.output_shapes,
                            "forward_ms": round(v.forward_ms, 3)})
            progress(f"ok   {label}  out {v.output_shapes}  {v.forward_ms:.2f} ms")
        except TaskError as e:
            failed += 1
            results.append({"id": label, "ok": False, "error": str(e)})
            progress(f"FAIL {label}: {e}")
    _emit(args, {"validated": len(results), "failed": failed, "tasks": results},
          f"{len(results) - failed}/{len(results)} tasks valid")
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
                      filter=fcfg)
    summary = synthesize(cfg, progress)
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

    sub.add_parser("catalogue", help="the operators crawled from the installed torch")

    args = parser.parse_args(argv)
    progress = _Progress(args.progress_file)
    handlers = {"validate": cmd_validate, "import": cmd_import, "list": cmd_list,
                "synth": cmd_synth, "catalogue": cmd_catalogue}
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
