"""Where a timed run's fixed cost comes from: one task's eager and torch.compile'd Model timed by
several bracketings of the same call, against triton.testing.do_bench.

    python tools/gpu/timing_variants.py [--repeats 10] [--runs 50] TASK_ID...

Every variant gets freshly cloned inputs and an L2 flush before each run, like the harness:
  idle-start  synchronise, start mark, call, synchronise, end mark (the harness before the pad)
  padded      the harness's own timing.Timer: synchronise, GPU spins ~1 ms, start mark, call,
              synchronise, end mark
  queued      start mark, call, end mark, no synchronisation in between (do_bench's bracketing)
For each it prints the median of --repeats medians of --runs runs and their coefficient of
variation, then do_bench's median and how far each variant lies from it.
"""
import argparse
import importlib.util
import os
import statistics
import sys

import torch
import triton.testing

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "skills"))
from harness import timing  # noqa: E402


def run_once(variant, fn, inputs, timer):
    if variant == "padded":
        return timer.time_once(fn, inputs)[0]
    args = timing.clone_inputs(inputs)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        timer.flush_buffer.fill_(1)
        if variant == "queued":
            start.record()
            fn(*args)
            end.record()
        else:
            torch.cuda.synchronize()
            start.record()
            fn(*args)
            torch.cuda.synchronize()
            end.record()
        end.synchronize()
    return start.elapsed_time(end)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("tasks", nargs="+")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("timing_variants: no CUDA device; run it on a GPU host")
    timer = timing.Timer("cuda")
    variants = ("idle-start", "padded", "queued")
    print(f"repeats={args.repeats} runs={args.runs} device={torch.cuda.get_device_name()} "
          f"pad={timing.LAUNCH_PAD_CYCLES} cycles")
    print(f"{'task':26s} {'what':9s} {'variant':11s} {'median ms':>10s} {'cv':>7s} {'do_bench ms':>12s} {'diff':>7s}")
    for task_id in args.tasks:
        path = os.path.join(REPO, "corpus", "tasks", "bench", task_id + ".py")
        spec = importlib.util.spec_from_file_location("variants_task", path)
        task = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(task)
        torch.manual_seed(0)
        model = task.Model(*task.get_init_inputs()).cuda().eval()
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
        for what, fn in (("eager", model), ("compiled", torch.compile(model))):
            for _ in range(10):  # warm-up, and torch.compile's first call
                run_once("padded", fn, inputs, timer)
            medians = {v: [] for v in variants}
            for _ in range(args.repeats):
                for v in variants:  # interleaved, so that drift hits every variant alike
                    medians[v].append(statistics.median(run_once(v, fn, inputs, timer) for _ in range(args.runs)))
            with torch.no_grad():
                reference = triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=200, return_mode="median")
            for v in variants:
                mid = statistics.median(medians[v])
                cv = statistics.pstdev(medians[v]) / statistics.fmean(medians[v])
                print(f"{task_id:26s} {what:9s} {v:11s} {mid:10.4f} {100 * cv:6.2f}% {reference:12.4f} "
                      f"{100 * (reference - mid) / mid:+6.1f}%", flush=True)


if __name__ == "__main__":
    main()
