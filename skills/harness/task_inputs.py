"""A task's input sets, drawn from a seed on the device that uses them.

The worker draws each set for the reference; the candidate's child draws the same set from the
same seed on the same device instead of receiving it. A large task's five sets are GiBs (10 GiB
for bench_01_relu) that would otherwise be copied to the host, written, read and copied back for
every job. Both sides fingerprint what they drew before anything runs on it, so a set the child
drew differently (get_inputs() using randomness that the seeds do not govern, or a candidate that
changed torch's generator or defaults) is reported instead of being judged wrong.
"""
import hashlib
import math
import random

import torch

_SAMPLES = 4096  # elements per tensor whose exact bytes enter the fingerprint


def set_seed(seed, index):
    """The seed of input set `index` of a job whose seed is `seed`."""
    return seed + 1000003 * (index + 1)


def draw(module, seed, device):
    """One input set: get_inputs() with torch's and Python's generators seeded, tensors made on
    `device` (a GPU fills GiBs of randn in milliseconds, the host in seconds)."""
    torch.manual_seed(seed)
    random.seed(seed)
    with torch.device(device):
        values = list(module.get_inputs())
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in values]


def fingerprint(values):
    """Per value: dtype, shape, the float64 sum, and a digest of evenly spaced elements' bytes."""
    out = []
    for x in values:
        if not isinstance(x, torch.Tensor):
            out.append(["value", repr(x)])
            continue
        flat = x.detach().reshape(-1)
        if flat.is_complex():
            flat = torch.view_as_real(flat).reshape(-1)
        n = flat.numel()
        step = max(1, n // _SAMPLES)
        sample = flat[::step].contiguous().cpu()
        total = float(torch.sum(flat, dtype=torch.float64)) if n else 0.0
        digest = hashlib.sha256(sample.view(torch.uint8).numpy().tobytes() if sample.numel() else b"").hexdigest()
        out.append([str(x.dtype), list(x.shape), total, digest[:32]])
    return out


def difference(ours, theirs):
    """None when two fingerprints describe the same set, else what differs first. `theirs` comes
    from the candidate's process: anything malformed is a difference, never an exception."""
    try:
        return _difference(ours, theirs)
    except Exception as e:
        return f"a malformed fingerprint ({type(e).__name__})"


def _difference(ours, theirs):
    if not isinstance(theirs, list) or len(theirs) != len(ours):
        return f"{len(ours)} values expected"
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if not isinstance(b, list) or len(a) != len(b):
            return f"value {k}: {b!r} instead of {a!r}"
        if a[0] == "value":
            if a != b:
                return f"value {k}: {b[1]} instead of {a[1]}"
            continue
        if a[0] != b[0] or list(a[1]) != list(b[1]):
            return f"value {k}: {b[0]} {b[1]} instead of {a[0]} {a[1]}"
        sums_agree = isinstance(b[2], (int, float)) and (
            a[2] == b[2] or (math.isnan(a[2]) and math.isnan(b[2]))
            or math.isclose(a[2], b[2], rel_tol=1e-9, abs_tol=1e-9))
        if not sums_agree or a[3] != b[3]:
            return f"value {k}: other values (sum {b[2]!r} instead of {a[2]!r})"
    return None
