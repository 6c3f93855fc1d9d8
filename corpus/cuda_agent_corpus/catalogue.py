"""The operator catalogue, crawled from the installed torch.

Functions are found by walking `torch` and `torch.nn.functional` and probing each public callable
on small tensors: what it accepts and what shape it returns decides its kind (shape-preserving
unary, elementwise binary, dim-wise shape-preserving, reduction). Probing also drops operators
that are random (two calls differ), produce non-finite values on normal inputs, or fail. Modules
are found by walking `torch.nn`: activation modules constructible without arguments are probed
like unary functions; parametric modules (Linear, Conv2d, LayerNorm, ...) need constructor
arguments derived from the input shape, so their argument and shape rules are declared here and
kept only when the installed torch has the class.
"""
from __future__ import annotations

import dataclasses
import inspect
import warnings
from typing import Callable, Dict, List, Optional, Tuple

Shape = Tuple[int, ...]

# Random, in-place, stateful, shape-changing or non-float names never probed (non-finite results
# on normal inputs, e.g. torch.log, are dropped by the probe itself).
_DENY_SUBSTRINGS = ("dropout", "rrelu", "rand", "bernoulli", "normal", "poisson", "multinomial",
                    "seed", "empty", "save", "load", "set_", "_like", "fill", "zero", "ones",
                    "full", "arange", "range", "linspace", "logspace", "eye", "tensor", "sparse",
                    "quantize", "fake_quant", "as_strided", "resize", "storage", "grad", "cuda",
                    "vmap", "compile", "jit", "detach", "clone", "contiguous", "copy",
                    "numel", "is_", "result_type", "can_cast", "promote", "index", "scatter",
                    "gather", "take", "put", "sort", "argsort", "topk", "unique", "nonzero",
                    "where", "masked", "bincount", "histc", "histogram", "embedding", "one_hot",
                    "stft", "fft", "ctc", "loss", "nll", "kl_div", "cross_entropy", "pad",
                    "interpolate", "upsample", "grid_sample", "affine_grid", "pixel", "channel_shuffle",
                    "native", "batch_norm", "instance_norm", "layer_norm", "group_norm", "rms_norm",
                    "local_response", "conv", "pool", "linear", "bilinear", "unfold", "fold",
                    "align", "sym_", "typename", "chain_matmul", "einsum", "cdist", "pdist",
                    "cosine", "pairwise", "triplet", "margin", "hinge", "ravel", "flatten",
                    "squeeze", "reshape", "view", "permute", "transpose", "swapaxes", "swapdims",
                    "movedim", "moveaxis", "flip", "roll", "rot90", "tile", "repeat", "expand",
                    "broadcast", "stack", "cat", "concat", "split", "chunk", "narrow", "select",
                    "slice", "diag", "tril", "triu", "trace", "block", "kron", "cartesian",
                    "combinations", "meshgrid", "atleast", "hstack", "vstack", "dstack",
                    "column_stack", "row_stack", "positive", "real", "imag", "conj", "angle",
                    "complex", "polar", "view_as", "frexp", "ldexp", "nan_to_num", "is",
                    "dequantize", "int_repr", "q_", "adjoint", "mvlgamma", "polygamma", "igamma",
                    "bucketize", "searchsorted", "cummax", "cummin", "mode", "median", "kthvalue",
                    "aminmax", "max_unpool", "lu", "svd", "qr", "eig", "cholesky", "inverse",
                    "solve", "det", "pinv", "matrix", "lstsq", "orgqr", "ormqr", "geqrf", "histogramdd",
                    "threshold", "softmin", "cross", "fliplr", "flipud", "msort", "feature_alpha", "alpha_dropout", "gumbel", "sample", "renorm",
                    "normalize", "dist", "logdet", "slogdet", "count_nonzero", "allclose", "equal",
                    "isclose", "argmax", "argmin", "all", "any", "std_mean", "var_mean",
                    "nanmedian", "nanquantile", "quantile", "fix_", "absolute_", "clamp_",
                    "hardshrink", "softshrink", "tanhshrink", "signbit", "sign", "sgn", "floor",
                    "ceil", "round", "trunc", "frac", "fix", "heaviside", "bitwise", "logical",
                    "gcd", "lcm", "fmod", "remainder", "floor_divide", "true_divide", "div", "divide",
                    "pow", "float_power", "xlogy", "special", "nextafter", "copysign", "hypot",
                    "lerp", "addc", "addmm", "addmv", "addr", "baddbmm", "addbmm", "mv", "dot",
                    "vdot", "inner", "outer", "ger", "tensordot", "glu", "prelu", "erfinv",
                    "reciprocal", "rsqrt", "log", "sqrt", "acos", "asin", "atanh", "acosh",
                    "lgamma", "digamma", "i0", "sinc", "exp2", "logit", "logcumsumexp",
                    "cumprod", "prod", "nanmean", "nansum", "std", "var", "norm")


def _deny_matches(entry: str, name: str) -> bool:
    # "is_" is a prefix, a short word ("lu", "det") a whole name, a longer one a substring.
    if entry.endswith("_"):
        return name.startswith(entry)
    if len(entry) <= 5:
        return name == entry
    return entry in name


def _denied(name: str) -> bool:
    return name.startswith("_") or name.endswith("_") or \
        any(_deny_matches(entry, name) for entry in _DENY_SUBSTRINGS)


@dataclasses.dataclass
class Op:
    """One catalogue entry. `kind` decides its argument and shape rule:
    unary        f(x) -> x.shape
    binary       f(x, y) with y of x's shape -> x.shape
    dimwise      f(x, dim=d) -> x.shape
    reduction    f(x, dim=d, keepdim=k) -> x.shape without (or keeping as 1) dim d
    module_unary nn.X() applied to x -> x.shape
    module       parametric nn.X(...) with a declared rule (see MODULE_RULES)
    matmul       torch.matmul(x, y) with y of shape (..., K, N) -> (..., M, N)
    """
    name: str       # as written in generated code: "torch.tanh", "F.gelu", "nn.Linear"
    kind: str
    ranks: Tuple[int, ...] = (2, 3, 4)

    def to_json(self) -> dict:
        return {"name": self.name, "kind": self.kind, "ranks": list(self.ranks)}


# Parametric modules: ranks accepted; constructor arguments and output shape come from
# compose.MODULE_RULES (keyed by the same name), which needs the composer's random choices.
MODULE_RANKS: Dict[str, Tuple[int, ...]] = {
    "Linear": (2, 3, 4),
    "LayerNorm": (2, 3, 4),
    "Conv1d": (3,),
    "Conv2d": (4,),
    "ConvTranspose2d": (4,),
    "BatchNorm1d": (2, 3),
    "BatchNorm2d": (4,),
    "GroupNorm": (3, 4),
    "InstanceNorm2d": (4,),
    "MaxPool2d": (4,),
    "AvgPool2d": (4,),
    "MaxPool1d": (3,),
    "AvgPool1d": (3,),
}


def _probe_inputs():
    import torch
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(2, 3, 4, 5, generator=g)
    y = torch.randn(2, 3, 4, 5, generator=g)
    return x, y


def _finite_tensor(v, shape) -> bool:
    import torch
    return isinstance(v, torch.Tensor) and v.is_floating_point() and tuple(v.shape) == shape and \
        bool(torch.isfinite(v).all())


def _same(fn: Callable, *args, **kwargs):
    """Calls fn twice; the result if both succeed and agree exactly, else None."""
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            a = fn(*args, **kwargs)
            b = fn(*args, **kwargs)
    except Exception:
        return None
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return None
    if a.shape != b.shape or not torch.equal(a, b):
        return None
    return a


def _classify(fn: Callable, x, y) -> Optional[str]:
    import torch
    shape = tuple(x.shape)
    out = _same(fn, x)
    if out is not None and _finite_tensor(out, shape):
        if torch.equal(out, x):
            return None  # identity
        return "unary"
    out = _same(fn, x, y)
    if out is not None and _finite_tensor(out, shape):
        return "binary"
    out = _same(fn, x, dim=1)
    if out is not None:
        if _finite_tensor(out, shape):
            return "dimwise"
        if _finite_tensor(out, shape[:1] + shape[2:]):
            kept = _same(fn, x, dim=1, keepdim=True)
            if kept is not None and _finite_tensor(kept, shape[:1] + (1,) + shape[2:]):
                return "reduction"
    return None


def _public_callables(namespace) -> List[Tuple[str, Callable]]:
    out = []
    for name in sorted(dir(namespace)):
        if _denied(name):
            continue
        obj = getattr(namespace, name, None)
        if callable(obj) and not inspect.isclass(obj) and not inspect.ismodule(obj):
            out.append((name, obj))
    return out


def crawl(include_modules: bool = True) -> List[Op]:
    """Probes the installed torch; deterministic for a given torch version."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    x, y = _probe_inputs()
    ops: List[Op] = []
    seen_fns = set()
    for prefix, namespace in (("torch", torch), ("F", F)):
        for name, fn in _public_callables(namespace):
            if prefix == "F" and hasattr(torch, name):
                continue  # the torch.* spelling already covers it
            if not hasattr(torch.Tensor, name) and prefix == "torch":
                continue  # keep to torch functions that are also tensor ops
            kind = _classify(fn, x, y)
            if kind and id(fn) not in seen_fns:
                seen_fns.add(id(fn))
                ops.append(Op(name=f"{prefix}.{name}", kind=kind,
                              ranks=(2, 3, 4) if kind != "reduction" else (3, 4)))
    if include_modules:
        for name in sorted(dir(nn)):
            cls = getattr(nn, name)
            if not inspect.isclass(cls) or not issubclass(cls, nn.Module):
                continue
            if name in MODULE_RANKS:
                ops.append(Op(name=f"nn.{name}", kind="module", ranks=MODULE_RANKS[name]))
                continue
            if cls.__module__ != "torch.nn.modules.activation" or _denied(name.lower()) or \
                    name.startswith(("Softmax", "Softmin", "LogSoftmax")):  # need a dim
                continue
            try:
                module = cls()
            except Exception:
                continue
            if _classify(module, x, y) == "unary":
                ops.append(Op(name=f"nn.{name}", kind="module_unary"))
    if hasattr(torch, "matmul"):
        ops.append(Op(name="torch.matmul", kind="matmul", ranks=(2, 3)))
    return ops


def summary(ops: List[Op]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for op in ops:
        counts[op.kind] = counts.get(op.kind, 0) + 1
    return counts
