"""Writes the record of one H200 smoke stage (tools/gpu/pipeline_gpu.sh, STAGE=smoke).

Reads the stage's steps.txt (one line per step: "step '<command>' rc=<n> in <s> s") and the
checks' output (one line per demonstration: "<task id> <check JSON>"), and writes
gpu-smoke.json when every part passed and every check earned r >= 1, else gpu-smoke-failed.json.
The record names the commit, the date and the content digest of skills/, kernels/ and actors/
as they were run; docs/gpu-smoke.json must carry the digest of the tree it is committed with.
"""
import argparse
import datetime
import json
import os
import re
import subprocess

PARTS = [("build", "build_and_test.sh"), ("redteam_gpu", "test_redteam_gpu.py"),
         ("checks", "check_demos.sh"), ("rollout", " rollout "), ("replay", " replay "),
         ("torch_policy", "test_gpu_torch_rollout.py")]


def read_steps(path):
    parts = {}
    with open(path) as f:
        for line in f:
            m = re.match(r"step '(.*)' rc=(-?\d+) in (\d+) s", line.strip())
            if not m:
                continue
            for name, marker in PARTS:
                if marker in m.group(1):
                    # A part that ran twice (the build again where the rest of a split smoke ran
                    # on another machine) passed only if each run did; its seconds are the sum.
                    part = parts.setdefault(name, {"rc": 0, "seconds": 0})
                    part["rc"] = part["rc"] or int(m.group(2))
                    part["seconds"] += int(m.group(3))
    return parts


def read_checks(path):
    rewards = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                task, _, rest = line.strip().partition(" ")
                if rest.startswith("{"):
                    rewards[task] = json.loads(rest).get("reward")
    return rewards


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", required=True)
    ap.add_argument("--checks", required=True)
    ap.add_argument("--digest", required=True)
    ap.add_argument("--commit", required=True)
    ap.add_argument("--seconds", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--split", choices=["same", "another"],
                    help="where the smoke ran in two calls: whether SMOKE_PART=rest ran on the first part's "
                         "machine or on another one (which built the tree again)")
    ap.add_argument("--first-host", default="", help="the GPU that SMOKE_PART=first ran on")
    args = ap.parse_args()
    parts = read_steps(args.steps)
    rewards = read_checks(args.checks)
    parts.setdefault("checks", {})["rewards"] = rewards
    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        gpu = "unknown"
    passed = all(name in parts and parts[name].get("rc") == 0 for name, _ in PARTS) and \
        len(rewards) >= 3 and all(isinstance(r, int) and r >= 1 for r in rewards.values())
    record = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "commit": args.commit, "digest": args.digest, "host": gpu, "seconds": args.seconds,
              "passed": passed, "parts": parts}
    if args.split:
        record["split"] = {"rest_ran_on": f"{args.split} machine", "first_part_host": args.first_host or "unknown"}
    name = "gpu-smoke.json" if passed else "gpu-smoke-failed.json"
    with open(os.path.join(args.out, name), "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"smoke {'passed' if passed else 'FAILED'} in {args.seconds} s: {os.path.join(args.out, name)}")
    return 0 if passed else 1


if __name__ == "__main__":
    raise SystemExit(main())
