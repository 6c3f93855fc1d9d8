"""The programmatic composer: chains of 1-5 catalogue operators with shape inference, written
out as a task in the KernelBench format.

A chain starts from one input of rank 2, 3 or 4 whose element count is drawn around the
configured scale; each step picks an operator that accepts the current shape, infers the shape
it returns, and records the constructor arguments and extra inputs it needs. Generated sizes are
guesses: the filters measure the real runtime and drop what misses the window. A chain in which
any tensor (input, intermediate, extra input or layer weight) would hold more than MAX_GROWTH
times the configured element count is dropped here: a matmul or Linear over a long row would
otherwise ask for a square of it (150 TB, seen on an H200 at 2^28 elements).
"""
from __future__ import annotations

import dataclasses
import math
import random
from typing import Dict, List, Optional, Sequence, Tuple

from .catalogue import Op

Shape = Tuple[int, ...]

# How many operators a task composes: CUDA-Agent-Ops-6K is 84% two-operator tasks.
DEFAULT_OP_COUNT_WEIGHTS = {1: 0.05, 2: 0.84, 3: 0.06, 4: 0.03, 5: 0.02}
MAX_GROWTH = 16  # start shapes span 1/8x..8x the configured count; intermediates may grow 2x more


@dataclasses.dataclass
class Step:
    op: str
    init: Optional[str]        # module constructor text, e.g. "nn.Linear(256, 128)"
    call: str                  # forward expression with {x} for the running tensor
    extra_inputs: List[Shape]  # new forward inputs this step consumes, in order
    weights: int = 0           # elements of the step's parameters

    def largest(self, out: Shape) -> int:
        """Elements of the largest tensor this step makes or takes."""
        return max([math.prod(out), self.weights] + [math.prod(s) for s in self.extra_inputs])


@dataclasses.dataclass
class Candidate:
    id: str
    operators: List[str]
    input_shape: Shape
    output_shape: Shape
    steps: List[Step]
    code: str = ""

    @property
    def sizes(self) -> Dict[str, object]:
        return {"input": list(self.input_shape), "output": list(self.output_shape)}


def _pick(rng: random.Random, choices: Sequence):
    return choices[rng.randrange(len(choices))]


def _round_dim(v: float, lo: int = 2) -> int:
    v = max(lo, int(v))
    if v >= 16:
        v -= v % 8
    return v


def start_shape(rng: random.Random, rank: int, elements: int) -> Shape:
    if rank == 2:
        b = _pick(rng, (16, 32, 64, 128, 256))
        return (b, _round_dim(elements / b, 8))
    if rank == 3:
        b = _pick(rng, (4, 8, 16))
        c = _pick(rng, (16, 32, 64))
        return (b, c, _round_dim(elements / (b * c), 8))
    b = _pick(rng, (2, 4, 8, 16))
    c = _pick(rng, (3, 8, 16, 32))
    side = _round_dim(math.sqrt(elements / (b * c)), 4)
    return (b, c, side, side)


def _module_step(rng: random.Random, name: str, shape: Shape) -> Optional[Tuple[Step, Shape]]:
    """Argument and shape rules of the parametric modules (catalogue.MODULE_RANKS)."""
    short = name.split(".", 1)[1]
    rank = len(shape)
    if short == "Linear":
        fin = shape[-1]
        fout = _round_dim(fin * _pick(rng, (0.5, 1.0, 2.0)), 8)
        return Step(name, f"nn.Linear({fin}, {fout})", "", [], fin * fout), shape[:-1] + (fout,)
    if short == "LayerNorm":
        return Step(name, f"nn.LayerNorm({shape[-1]})", "", []), shape
    if short in ("Conv1d", "Conv2d"):
        cin, k = shape[1], _pick(rng, (1, 3, 5))
        cout = _pick(rng, (8, 16, 32, 64))
        pad = k // 2 if rng.random() < 0.7 else 0
        stride = 1 if rng.random() < 0.8 else 2
        spatial = tuple((s + 2 * pad - k) // stride + 1 for s in shape[2:])
        if min(spatial) < 1:
            return None
        return (Step(name, f"nn.{short}({cin}, {cout}, kernel_size={k}, stride={stride}, "
                           f"padding={pad})", "", [], cin * cout * k ** len(spatial)), (shape[0], cout) + spatial)
    if short == "ConvTranspose2d":
        cin, k, stride = shape[1], _pick(rng, (2, 3)), _pick(rng, (1, 2))
        cout = _pick(rng, (8, 16, 32))
        spatial = tuple((s - 1) * stride + k for s in shape[2:])
        return (Step(name, f"nn.ConvTranspose2d({cin}, {cout}, kernel_size={k}, stride={stride})",
                     "", [], cin * cout * k * k), (shape[0], cout) + spatial)
    if short in ("BatchNorm1d", "BatchNorm2d", "InstanceNorm2d"):
        return Step(name, f"nn.{short}({shape[1]})", "", []), shape
    if short == "GroupNorm":
        groups = [g for g in (2, 4, 8) if shape[1] % g == 0]
        if not groups:
            return None
        return Step(name, f"nn.GroupNorm({_pick(rng, groups)}, {shape[1]})", "", []), shape
    if short in ("MaxPool2d", "AvgPool2d", "MaxPool1d", "AvgPool1d"):
        if min(shape[2:]) < 2:
            return None
        spatial = tuple(s // 2 for s in shape[2:])
        return Step(name, f"nn.{short}(kernel_size=2)", "", []), shape[:2] + spatial
    return None


def step_for(rng: random.Random, op: Op, shape: Shape) -> Optional[Tuple[Step, Shape]]:
    """The step applying `op` to a tensor of `shape`, and the shape it returns; None if the
    operator does not apply to that shape."""
    if len(shape) not in op.ranks:
        return None
    if op.kind == "unary":
        return Step(op.name, None, f"{op.name}({{x}})", []), shape
    if op.kind == "module_unary":
        return Step(op.name, f"{op.name}()", "", []), shape
    if op.kind == "binary":
        return Step(op.name, None, f"{op.name}({{x}}, {{y0}})", [shape]), shape
    if op.kind == "dimwise":
        dim = _pick(rng, range(1, len(shape)))
        return Step(op.name, None, f"{op.name}({{x}}, dim={dim})", []), shape
    if op.kind == "reduction":
        dim = _pick(rng, range(1, len(shape)))
        keep = rng.random() < 0.5
        out = shape[:dim] + ((1,) if keep else ()) + shape[dim + 1:]
        if len(out) < 2:
            return None
        return Step(op.name, None, f"{op.name}({{x}}, dim={dim}, keepdim={keep})", []), out
    if op.kind == "matmul":
        n = _round_dim(shape[-1] * _pick(rng, (0.5, 1.0, 2.0)), 8)
        other = shape[:-2] + (shape[-1], n)
        return Step(op.name, None, f"torch.matmul({{x}}, {{y0}})", [other]), shape[:-1] + (n,)
    if op.kind == "module":
        return _module_step(rng, op.name, shape)
    return None


def _weighted(rng: random.Random, weights: Dict[int, float]) -> int:
    total = sum(weights.values())
    r = rng.random() * total
    for k, w in sorted(weights.items()):
        r -= w
        if r <= 0:
            return k
    return max(weights)


def compose(rng: random.Random, ops: List[Op], task_id: str, elements: int,
            op_count_weights: Optional[Dict[int, float]] = None,
            max_tries: int = 50) -> Optional[Candidate]:
    """One random chain; None when no chain fits after max_tries draws."""
    weights = op_count_weights or DEFAULT_OP_COUNT_WEIGHTS
    modules = [o for o in ops if o.kind == "module"]
    for _ in range(max_tries):
        count = _weighted(rng, weights)
        # Half the chains open with a parametric module (a layer), as most Ops-6K tasks do.
        first_pool = modules if modules and rng.random() < 0.5 else ops
        first = _pick(rng, first_pool)
        rank = _pick(rng, first.ranks)
        # Sizes spread log-uniformly over 1/8x..8x the typical count, so a runtime window
        # keeps a useful share whatever the operators cost.
        shape = start_shape(rng, rank, int(elements * 2 ** rng.uniform(-3, 3)))
        start, steps, ok = shape, [], True
        for i in range(count):
            pool = [first] if i == 0 else ops
            for _attempt in range(20):
                op = _pick(rng, pool)
                made = step_for(rng, op, shape)
                if made and (i == 0 or op.name != steps[-1].op):
                    break
            else:
                made = None
            if not made or made[0].largest(made[1]) > MAX_GROWTH * elements:
                ok = False
                break
            step, shape = made
            steps.append(step)
        if ok and steps and math.prod(shape) > 1:
            cand = Candidate(id=task_id, operators=[s.op for s in steps], input_shape=start,
                             output_shape=shape, steps=steps)
            cand.code = render(cand)
            return cand
    return None


def render(cand: Candidate) -> str:
    """The task program for a chain."""
    init_lines, forward_lines, extra_shapes, attrs = [], [], [], 0
    for step in cand.steps:
        names = {}
        for shape in step.extra_inputs:
            names["y0"] = f"y{len(extra_shapes)}"
            extra_shapes.append(shape)
        if step.init is not None:
            attr = f"op{attrs}"
            attrs += 1
            init_lines.append(f"        self.{attr} = {step.init}")
            forward_lines.append(f"        x = self.{attr}(x)")
        else:
            forward_lines.append("        x = " + step.call.format(x="x", **names))
    args = ", ".join(["x"] + [f"y{i}" for i in range(len(extra_shapes))])
    shapes = [cand.input_shape] + extra_shapes
    inputs = ", ".join(f"torch.randn({', '.join(str(d) for d in s)})" for s in shapes)
    body = "\n".join(init_lines) if init_lines else "        pass"
    return f'''import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """{" -> ".join(cand.operators)} on an input of shape {tuple(cand.input_shape)}."""

    def __init__(self):
        super().__init__()
{body}

    def forward(self, {args}):
{chr(10).join(forward_lines)}
        return x


def get_inputs():
    return [{inputs}]


def get_init_inputs():
    return []
'''
