"""How repeatable the harness's timings are, and whether an independent timer agrees with them.

    python tools/gpu/timing_study.py --bin build-gpu/tools/cuda-agent [--device cuda|cpu]
        [--repeats 10] [--runs 50] [--set KEY=VALUE ...] TASK_ID...

For each task of the device's set (bench on cuda, smoke on cpu): builds its demonstration with
`cuda-agent build`, asks one real harness worker for --repeats profiles in a row (no baseline
cache, so eager, torch.compile and the candidate are all measured each time), and reports for
each the median of the per-profile medians and their coefficient of variation. It then times the
same ModelNew and Model in this process with an independent timer and prints how far that lies
from the harness's median: triton.testing.do_bench on cuda (its own L2 flush and CUDA events;
median), torch.utils.benchmark's blocked_autorange on cpu (median, one thread like the harness).
"""
import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SKILLS = os.path.join(REPO, "skills")
sys.path.insert(0, SKILLS)
sys.path.insert(0, os.path.join(REPO, "tests", "skills", "harness"))

import torch  # noqa: E402
from conftest import Worker  # noqa: E402  the red-team tests' client of a real worker


def load_module(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def materialise(set_name, task_id, root):
    """A solution directory: the demonstration's files and the task as model.py."""
    sol = os.path.join(root, task_id)
    shutil.copytree(os.path.join(REPO, "corpus", "demos", set_name, task_id), sol)
    shutil.copy(os.path.join(REPO, "corpus", "tasks", set_name, task_id + ".py"), os.path.join(sol, "model.py"))
    return sol


def build(binary, sets, sol, device):
    argv = [binary] + [a for kv in sets for a in ("--set", kv)] + ["build", sol, "--device", device, "--json"]
    result = json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)
    if not result.get("ok"):
        raise SystemExit(f"{sol}: build failed: {result.get('error') or result.get('diagnostics')}")
    path = result["module_path"]
    return path if os.path.isdir(path) else os.path.dirname(path)


def independent_ms(sol, module_dir, device):
    """Median milliseconds of ModelNew and of Model, timed here and not by the harness."""
    sys.path.insert(0, module_dir)
    sys.modules.pop("cuda_extension", None)
    task = load_module("study_model", os.path.join(sol, "model.py"))
    new = load_module("study_model_new", os.path.join(sol, "model_new.py"))
    torch.manual_seed(0)
    model = task.Model(*task.get_init_inputs()).to(device).eval()
    model_new = new.ModelNew(*task.get_init_inputs()).to(device).eval()
    model_new.load_state_dict(model.state_dict(), strict=True)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        if device == "cuda":
            import triton.testing
            times = [triton.testing.do_bench(lambda: m(*inputs), warmup=25, rep=200, return_mode="median")
                     for m in (model_new, model)]
        else:
            import torch.utils.benchmark as benchmark
            times = [1000 * benchmark.Timer("m(*inputs)", globals={"m": m, "inputs": inputs}, num_threads=1)
                     .blocked_autorange(min_run_time=1.0).median for m in (model_new, model)]
    sys.path.remove(module_dir)
    return times


def independent_in_child(sol, module_dir, device):
    """independent_ms in a fresh interpreter: two solutions' modules, both named cuda_extension,
    cannot live in one process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--independent", sol, module_dir, device],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--independent":
        print(json.dumps(independent_ms(*sys.argv[2:])))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", required=True, help="the cuda-agent binary")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--set", action="append", default=[], help="a setting for `cuda-agent build`")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("tasks", nargs="+")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("timing_study: no CUDA device; run it on a GPU host or pass --device cpu")
    set_name = "bench" if args.device == "cuda" else "smoke"
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu, 1 thread"

    root = tempfile.mkdtemp(prefix="timing-study-")
    worker = Worker()
    print(f"repeats={args.repeats} timed_runs={args.runs} warmup_runs={args.warmup} "
          f"device={device_name}")
    print(f"{'task':28s} {'what':9s} {'median ms':>10s} {'cv of medians':>14s} {'other ms':>12s} {'diff':>7s}")
    for task_id in args.tasks:
        sol = materialise(set_name, task_id, root)
        module_dir = build(args.bin, args.set, sol, args.device)
        medians = {"eager": [], "compiled": [], "candidate": []}
        for _ in range(args.repeats):
            reply = worker.request({"op": "profile", "task_path": os.path.join(sol, "model.py"), "solution_dir": sol,
                                    "module_path": module_dir, "device": args.device, "timed_runs": args.runs,
                                    "warmup_runs": args.warmup, "candidate_timeout_s": 300, "cpu_threads": 1,
                                    "baseline_cache_dir": ""})
            if not reply["ok"] or reply["record"]["error"] or reply["record"]["violations"]:
                raise SystemExit(f"{task_id}: profile failed: {reply['error'] or reply['record']}")
            for what in medians:
                medians[what].append(reply["profile"][what]["median_ms"])
        independent = dict(zip(("candidate", "eager"), independent_in_child(sol, module_dir, args.device)))
        for what, xs in medians.items():
            mid = statistics.median(xs)
            cv = statistics.pstdev(xs) / statistics.fmean(xs)
            other = independent.get(what)
            tail = f"{other:12.4f} {100 * (other - mid) / mid:+6.1f}%" if other is not None else f"{'':12s} {'':>7s}"
            print(f"{task_id:28s} {what:9s} {mid:10.4f} {100 * cv:13.2f}% {tail}", flush=True)
    worker.close()
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
