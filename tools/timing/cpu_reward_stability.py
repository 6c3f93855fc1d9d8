"""Is a CPU reward the same every time? Checks smoke demonstrations with `cuda-agent check`
several times alone and as many times while a 4-episode rollout runs beside them, and compares
each check's eager speed-up with a plain torch.utils.benchmark measurement of the same two calls
(Model and ModelNew on one input set, one thread, in a fresh process).

    .venv/bin/python tools/timing/cpu_reward_stability.py [--bin build/tools/cuda-agent]
        [--repeats 5] [--threads 1] smoke_01_relu smoke_05_matmul ...

Prints one line per demonstration: the rewards seen alone and under load, the median speed-up
over eager and the largest deviation from it, and the plain benchmark's speed-up.
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def check(binary, demo, extra):
    out = subprocess.run([binary, *extra, "check", "--task", f"{ROOT}/corpus/tasks/smoke/{demo}.py", "--solution",
                          f"{ROOT}/corpus/demos/smoke/{demo}", "--device", "cpu", "--json"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"check of {demo} failed ({out.returncode}): {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def built_module(binary, demo):
    out = subprocess.run([binary, "build", f"{ROOT}/corpus/demos/smoke/{demo}"], capture_output=True, text=True,
                         timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"build of {demo} failed: {out.stderr.strip()}")
    path = out.stdout.strip().splitlines()[-1]
    return path if os.path.isdir(path) else os.path.dirname(path)


PLAIN = r'''
import importlib.util, sys, torch, torch.utils.benchmark as bench
task_path, solution, module_dir, threads = sys.argv[1:5]
torch.set_num_threads(int(threads))
sys.path[:0] = [module_dir, solution]
def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); return m
task = load("task", task_path)
new = load("model_new", solution + "/model_new.py")
torch.manual_seed(0)
init = task.get_init_inputs()
ref = task.Model(*init).eval()
cand = new.ModelNew(*init); cand.load_state_dict(ref.state_dict()); cand.eval()
x = task.get_inputs()
with torch.no_grad():
    t = [bench.Timer("m(*x)", globals={"m": m, "x": x}, num_threads=int(threads)).blocked_autorange(min_run_time=1.0).median
         for m in (ref, cand)]
print(t[0] / t[1])
'''


def plain_speedup(demo, module_dir, threads):
    python = os.path.join(ROOT, ".venv", "bin", "python")
    out = subprocess.run([python if os.path.exists(python) else sys.executable, "-c", PLAIN,
                          f"{ROOT}/corpus/tasks/smoke/{demo}.py", f"{ROOT}/corpus/demos/smoke/{demo}", module_dir,
                          str(threads)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise SystemExit(f"plain benchmark of {demo} failed: {out.stderr.strip()[-400:]}")
    return float(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "tools", "cuda-agent"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("demos", nargs="+")
    args = ap.parse_args()
    extra = ["--set", f"harness.cpu_threads={args.threads}"]
    alone = {d: [check(args.bin, d, extra) for _ in range(args.repeats)] for d in args.demos}
    with tempfile.TemporaryDirectory() as tmp:
        rollout = subprocess.Popen([args.bin, "rollout", "--policy", "demo", "--device", "cpu", "--episodes", "4",
                                    "--concurrency", "4", "--log", os.path.join(tmp, "log"), "--run-id", "load"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            loaded = {d: [] for d in args.demos}
            for _ in range(args.repeats):
                for d in args.demos:
                    loaded[d].append(check(args.bin, d, extra))
            still_running = rollout.poll() is None
        finally:
            rollout.kill()
            rollout.wait()
    print(f"rollout still running at the last check: {still_running}")
    print(f"{'demo':<22} {'rewards alone':<16} {'under load':<16} {'median x':>9} {'max dev':>8} {'plain x':>8} {'vs plain':>9}")
    for d in args.demos:
        records = alone[d] + loaded[d]
        speedups = [r["speedup_eager"] for r in records if r["speedup_eager"] is not None]
        med = statistics.median(speedups) if speedups else float("nan")
        dev = max(abs(s / med - 1) for s in speedups) if speedups else float("nan")
        plain = plain_speedup(d, built_module(args.bin, d), args.threads)
        print(f"{d:<22} {','.join(str(r['reward']) for r in alone[d]):<16} "
              f"{','.join(str(r['reward']) for r in loaded[d]):<16} {med:>9.3f} {100 * dev:>7.1f}% {plain:>8.3f} "
              f"{100 * (med / plain - 1):>+8.1f}%")


if __name__ == "__main__":
    main()
