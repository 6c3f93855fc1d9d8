"""Forward + backward time of SDPA's fused attention kernels at the learner's shapes, and how far
each one's output and gradients are from flash attention's, on one CUDA device.

    python tools/bench/attention_kernels.py [--tokens 8192,32768] [--heads 14] [--kv-heads 2]
        [--head-dim 64] [--repeats 5] [--json]

The learner's attention (actors/model/transformer.cpp, attend) is causal, batch 1, bf16; flash
takes grouped key/value heads as they are, every other kernel gets them repeated to each query
head (as the learner does where cuDNN is preferred). Each kernel is timed over --repeats
forward + backward passes after one untimed pass, the device synchronised around each; a kernel
that cannot take the shape says why. FLOPs: causal attention's two products, forward
2 * T^2 * heads * head_dim, backward 2.5 times that.
"""
import argparse
import json
import statistics
import sys
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

KERNELS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION,
           "efficient": SDPBackend.EFFICIENT_ATTENTION}


def run(kernel, q, k, v, grad_out):
    repeat = kernel != "flash" and q.size(1) != k.size(1)
    qq, kk, vv = (t.detach().requires_grad_() for t in (q, k, v))
    with sdpa_kernel([KERNELS[kernel]]):
        kr = kk.repeat_interleave(q.size(1) // k.size(1), 1) if repeat else kk
        vr = vv.repeat_interleave(q.size(1) // v.size(1), 1) if repeat else vv
        out = torch.nn.functional.scaled_dot_product_attention(qq, kr, vr, is_causal=True,
                                                               enable_gqa=not repeat and q.size(1) != k.size(1))
        out.backward(grad_out)
    return out.detach(), qq.grad, kk.grad, vv.grad


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", default="8192,32768")
    parser.add_argument("--heads", type=int, default=14)
    parser.add_argument("--kv-heads", type=int, default=2)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention_kernels.py: no CUDA device visible; run it on the GPU host")
    rows = []
    for T in (int(t) for t in args.tokens.split(",")):
        gen = torch.Generator(device="cuda").manual_seed(T)
        shape = lambda h: (1, h, T, args.head_dim)  # noqa: E731
        q = torch.randn(shape(args.heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        k = torch.randn(shape(args.kv_heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        v = torch.randn(shape(args.kv_heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        grad_out = torch.randn(shape(args.heads), device="cuda", dtype=torch.bfloat16, generator=gen)
        flops = 3.5 * 2 * T * T * args.heads * args.head_dim
        reference = None
        for kernel in KERNELS:
            row = {"tokens": T, "kernel": kernel}
            try:
                result = run(kernel, q, k, v, grad_out)
                times = []
                for _ in range(args.repeats):
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    run(kernel, q, k, v, grad_out)
                    torch.cuda.synchronize()
                    times.append(time.perf_counter() - start)
            except RuntimeError as e:
                row["error"] = str(e).splitlines()[0][:200]
                rows.append(row)
                continue
            if reference is None:
                reference = result
            row["ms"] = {"median": 1e3 * statistics.median(times), "min": 1e3 * min(times), "max": 1e3 * max(times)}
            row["tflops"] = flops / statistics.median(times) / 1e12
            row["max_abs_diff_to_flash"] = {name: (a.float() - b.float()).abs().max().item()
                                            for name, a, b in zip(("out", "dq", "dk", "dv"), result, reference)}
            rows.append(row)
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "heads": args.heads, "kv_heads": args.kv_heads,
           "head_dim": args.head_dim, "rows": rows}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['device']}, torch {out['torch']}, cuDNN {out['cudnn']}; causal, batch 1, bf16, "
          f"{args.heads} heads / {args.kv_heads} kv heads x {args.head_dim}")
    for r in rows:
        if "error" in r:
            print(f"{r['tokens']:>6} {r['kernel']:<9} cannot run: {r['error']}")
            continue
        d = r["max_abs_diff_to_flash"]
        print(f"{r['tokens']:>6} {r['kernel']:<9} {r['ms']['median']:8.2f} ms [{r['ms']['min']:.2f}-{r['ms']['max']:.2f}] "
              f"{r['tflops']:6.1f} TFLOP/s  max |diff| to flash: out {d['out']:.3g} dq {d['dq']:.3g} "
              f"dk {d['dk']:.3g} dv {d['dv']:.3g}")


if __name__ == "__main__":
    main()
