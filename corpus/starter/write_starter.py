"""Writes the starter corpus from the patterns: corpus/tasks/<set>/ (task files and index) and
corpus/demos/<set>/<task_id>/ (the solution files and demo.json, the trajectory the `demo`
policy plays). The smoke set is sized for a CPU and solved in C++; the bench set is sized for
one H200 and solved in CUDA.

    /tmp/tv/venv/bin/python -m starter.write_starter      (from corpus/)
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from . import snippets
from .patterns_a import SINGLE
from .patterns_b import FUSED
from .patterns_c import BLOCKS

PATTERNS = SINGLE + FUSED + BLOCKS
LEVEL = {"single": 1, "fused": 2, "block": 3}
SETS = {"smoke": "cpu", "bench": "cuda"}


def expand(text: str, device: str) -> str:
    lang = "cpu" if device == "cpu" else "cuda"
    text = text.replace("@GEMM", snippets.GEMM_CPU if lang == "cpu" else snippets.GEMM_CUDA)
    text = text.replace("@REDUCE", snippets.REDUCE_CUDA)
    text = text.replace("@MAX", snippets.MAX_CUDA)
    text = text.replace("@ELEMENTWISE", snippets.ELEMENTWISE_CUDA)
    return text


def binding(pattern: dict, device: str) -> str:
    tokens = sorted(snippets.BINDING_TOKENS[device].items(), key=lambda kv: -len(kv[0]))
    lines = []
    for line in pattern["binding"].split("\n"):
        had_token = "@" in line
        for token, value in tokens:  # longest first: @STREAM and @SD before @S
            line = line.replace(token, value)
        if had_token and not line.strip():
            continue  # a token that means nothing on this device
        lines.append(line)
    return snippets.BINDING_HEAD[device] + "\n".join(lines)


def first_comment(code: str) -> str:
    lines = []
    for line in code.splitlines():
        s = line.strip()
        if s.startswith("//"):
            lines.append(s[2:].strip())
        elif lines:
            break
    return " ".join(lines)


def demo_for(task_id: str, pattern: dict, device: str, kernel_name: str) -> dict:
    lang = "C++" if device == "cpu" else "CUDA"
    kernel_text = expand(pattern["cpu" if device == "cpu" else "cuda"], device)
    ops = " -> ".join(pattern["operators"])
    plan = first_comment(kernel_text.split("extern \"C\"")[0]) or first_comment(kernel_text)
    steps = [
        {"thought": "Read the reference program to see its operators, shapes and parameters.",
         "tool": "Read", "arguments": {"file_path": "model.py"}},
        {"thought": f"The task computes {ops}. All the arithmetic goes into a {lang} kernel: "
                    f"{plan or 'one pass over the data.'}",
         "tool": "Write", "arguments": {"file_path": f"kernels/{kernel_name}",
                                        "content": {"$file": f"kernels/{kernel_name}"}}},
        {"thought": "The binding checks the inputs, allocates the outputs with torch::empty and "
                    "calls the kernel; it computes nothing itself.",
         "tool": "Write", "arguments": {"file_path": f"kernels/{pattern['name']}_binding.cpp",
                                        "content": {"$file": f"kernels/{pattern['name']}_binding.cpp"}}},
        {"thought": "ModelNew keeps the reference's constructor and parameters so its state dict "
                    "loads, and its forward only calls the extension.",
         "tool": "Write", "arguments": {"file_path": "model_new.py",
                                        "content": {"$file": "model_new.py"}}},
        {"thought": "Compile the extension.", "tool": "Bash", "arguments": {"command": "build"}},
        {"thought": "Check correctness against the reference on fresh inputs.", "tool": "Bash",
         "arguments": {"command": "verify"}},
        {"thought": "Measure it against eager and torch.compile.", "tool": "Bash",
         "arguments": {"command": "profile"}},
    ]
    return {"task_id": task_id, "device": device, "steps": steps,
            "final": f"ModelNew computes {ops} in a {lang} kernel ({kernel_name}) bound as "
                     f"cuda_extension.{pattern['name']}_forward; it builds, verifies and has been "
                     "profiled."}


def write(root: Path) -> None:
    for set_name, device in SETS.items():
        task_dir = root / "tasks" / set_name
        demo_dir = root / "demos" / set_name
        for d in (task_dir, demo_dir):
            if d.exists():
                shutil.rmtree(d)
            d.mkdir(parents=True)
        index = {"set": set_name, "tasks": []}
        for number, pattern in enumerate(PATTERNS, start=1):
            task_id = f"{set_name}_{number:02d}_{pattern['name']}"
            sizes = pattern["sizes"][set_name]
            code = pattern["task"]
            for key, value in sizes.items():
                code = code.replace("{" + key + "}", str(value))
            (task_dir / f"{task_id}.py").write_text(code)
            index["tasks"].append({
                "id": task_id, "name": pattern["name"], "level": LEVEL[pattern["category"]],
                "operators": pattern["operators"], "source": "starter", "sizes": sizes,
                "file": f"{task_id}.py", "category": pattern["category"],
                "demo": f"../../demos/{set_name}/{task_id}"})
            sol = demo_dir / task_id
            (sol / "kernels").mkdir(parents=True)
            kernel_name = pattern["name"] + (".cpp" if device == "cpu" else ".cu")
            (sol / "kernels" / kernel_name).write_text(
                expand(pattern["cpu" if device == "cpu" else "cuda"], device))
            (sol / "kernels" / f"{pattern['name']}_binding.cpp").write_text(binding(pattern, device))
            (sol / "model_new.py").write_text(pattern["model_new"])
            (sol / "demo.json").write_text(
                json.dumps(demo_for(task_id, pattern, device, kernel_name), indent=1) + "\n")
        (task_dir / "index.json").write_text(json.dumps(index, indent=1) + "\n")
        print(f"{set_name}: {len(PATTERNS)} tasks and demonstrations", file=sys.stderr)


if __name__ == "__main__":
    write(Path(__file__).resolve().parent.parent)
