"""Harness benchmark: evaluation time per candidate and the spread of the timings.

    python tests/skills/harness/bench_harness.py [--device cpu|cuda] [--runs 50] [--repeat 3]

Builds honest_elementwise (or gpu_honest on cuda) with the tests' build script, evaluates it
--repeat times through one real worker, and prints per evaluation the wall time and, for eager,
torch.compile and the candidate, the median and coefficient of variation of the timed runs.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from conftest import CACHE, HERE, Worker  # noqa: E402
import build_candidate  # noqa: E402
import json  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cpu-threads", type=int, default=1)
    args = parser.parse_args()
    cdir, name = ("candidates_gpu", "gpu_honest") if args.device == "cuda" else ("candidates", "honest_elementwise")
    src = os.path.join(HERE, cdir, name)
    meta = json.load(open(os.path.join(src, "candidate.json")))
    root = tempfile.mkdtemp()
    sol = os.path.join(root, name)
    os.makedirs(os.path.join(sol, "kernels"))
    shutil.copy(os.path.join(HERE, "tasks", meta["task"] + ".py"), os.path.join(sol, "model.py"))
    shutil.copy(os.path.join(src, "model_new.py"), sol)
    for k in meta["kernels"]:
        shutil.copy(os.path.join(HERE, "kernels", k), os.path.join(sol, "kernels"))
    module = build_candidate.build(sol, CACHE)
    worker = Worker()
    baselines = os.path.join(root, "baselines")
    print(f"device={args.device} runs={args.runs} warmup={args.warmup} cpu_threads={args.cpu_threads}")
    for i in range(args.repeat):
        t = time.monotonic()
        reply = worker.request({"op": "evaluate", "task_path": os.path.join(sol, "model.py"), "solution_dir": sol,
                                "module_path": module, "device": args.device, "timed_runs": args.runs,
                                "warmup_runs": args.warmup, "cpu_threads": args.cpu_threads,
                                "baseline_cache_dir": baselines})
        wall = time.monotonic() - t
        r, p = reply["record"], reply["profile"]
        print(f"evaluation {i}: {wall:.2f} s reward={r['reward']} violations={r['violations']} error={r['error']!r}")
        for k in ("eager", "compiled", "candidate"):
            s = p[k]
            print(f"  {k:9s} median {s['median_ms']:.4f} ms  cv {s['cv']:.4f}  p10 {s['p10_ms']:.4f}  "
                  f"p90 {s['p90_ms']:.4f}  runs {s['runs']}")
    worker.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
