"""transformers' side of `cuda-agent bench generate`: prefill and generate times of one checkpoint.

Loads --model with from_pretrained in --dtype on --device and, per batch x context cell and
repeat, times one forward of B random prompts of T tokens (the prefill, last-token logits only,
as generate's own prefill computes) and then generate with min_new_tokens = max_new_tokens = N,
greedy. Prints one JSON object of the raw seconds; the command turns them into tokens per second.
"""

import argparse
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def int_list(text):
    return [int(x) for x in text.split(",")]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--batches", type=int_list, default=[1])
    parser.add_argument("--contexts", type=int_list, default=[64])
    parser.add_argument("--decode-tokens", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    device = torch.device(args.device)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=DTYPES[args.dtype]).to(device).eval()
    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(7)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def prefill(ids):
        sync()
        start = time.perf_counter()
        model(input_ids=ids, use_cache=True, logits_to_keep=1)
        sync()
        return time.perf_counter() - start

    def generate(ids, n):
        sync()
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                             min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync()
        elapsed = time.perf_counter() - start
        if out.shape[1] != ids.shape[1] + n:
            sys.exit(f"hf_generate.py: generate returned {out.shape[1] - ids.shape[1]} new tokens, not {n}")
        return elapsed

    cells = []
    with torch.inference_mode():
        warm = torch.randint(0, vocab, (1, 16), generator=generator).to(device)
        prefill(warm)
        generate(warm, 4)
        for context in args.contexts:
            for batch in args.batches:
                prefill_s, generate_s = [], []
                # Untimed first, as the engine's side does: a cold prefill timed as a repeat's
                # would be subtracted from its generate time and inflate the decode rate.
                generate(torch.randint(0, vocab, (batch, context), generator=generator).to(device), 3)
                for _ in range(args.repeats):
                    ids = torch.randint(0, vocab, (batch, context), generator=generator).to(device)
                    prefill_s.append(prefill(ids))
                    generate_s.append(generate(ids, args.decode_tokens))
                cells.append({"batch": batch, "context": context, "prefill_s": prefill_s, "generate_s": generate_s})

    print(json.dumps({
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "attn_implementation": getattr(model.config, "_attn_implementation", None),
        "threads": torch.get_num_threads(),
        "cells": cells,
    }))


if __name__ == "__main__":
    main()
