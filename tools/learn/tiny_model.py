"""Creates a tiny randomly initialised Qwen2 checkpoint with its own byte-level BPE tokenizer, for
learning runs on hosts where no real checkpoint can be downloaded (`learner.init_model = "tiny"`,
config/examples/learn-smoke.toml).

The tokenizer is trained on the texts an episode shows the model (SKILL.md, the tool schemas, the
corpus tasks and the shipped demonstrations), with Qwen2's pre-tokenizer split and its special
tokens, so that `tokenizer.json` is the same kind of file a Qwen2.5 checkpoint ships. The weights
are transformers' initialisation at a larger scale (a tiny model fits its demonstrations
in fewer steps) under a fixed seed. Writes config.json, model.safetensors,
generation_config.json, tokenizer.json and tokenizer_config.json into --out; prints one JSON line
(vocabulary, parameters) on success.

    python tools/learn/tiny_model.py --out DIR [--hidden 64] [--layers 2] [--vocab 3000] [--seed 0]
"""
import argparse
import json
import pathlib
import sys

SOURCE = pathlib.Path(__file__).resolve().parents[2]
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
               r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
           "<tool_response>", "</tool_response>"]


def training_texts():
    """What the model reads and writes in an episode, in a fixed order."""
    paths = [SOURCE / "skills" / "SKILL.md"]
    paths += sorted((SOURCE / "skills" / "tools").glob("*.json"))
    paths += sorted((SOURCE / "corpus" / "tasks").glob("*/*.py"))
    paths += sorted(p for p in (SOURCE / "corpus" / "demos").glob("**/*") if p.is_file())
    return [p.read_text(encoding="utf-8", errors="replace") for p in paths]


def bpe_tokenizer(texts, vocab):
    """A byte-level BPE with Qwen2's normalizer, pre-tokenizer split and special tokens, trained
    on `texts`."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), "isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    return tok


def write_tokenizer_config(out, chat_template=None):
    """tokenizer_config.json as Qwen2.5 writes it; without a chat template the chat format is
    taken from config.json's model_type."""
    config = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
              "tokenizer_class": "PreTrainedTokenizerFast"}
    if chat_template:
        config["chat_template"] = chat_template
    (out / "tokenizer_config.json").write_text(json.dumps(config))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=pathlib.Path)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.hidden < 8 or args.hidden % 8:
        sys.exit(f"tiny_model: --hidden {args.hidden} must be a positive multiple of 8 (heads of 8 dimensions or more)")
    if args.layers < 1:
        sys.exit(f"tiny_model: --layers {args.layers} must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    if any(args.out.glob("*.safetensors")) or (args.out / "config.json").exists():
        sys.exit(f"tiny_model: {args.out} holds a checkpoint already; choose an empty directory")

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tok = bpe_tokenizer(training_texts(), args.vocab)
    tok.save(str(args.out / "tokenizer.json"))
    write_tokenizer_config(args.out)
    # Heads of 16 dimensions up to 4 of them, then 4 wider ones: attention's memory in training
    # grows with the heads times the sequence length squared.
    heads = max(1, min(args.hidden // 16, 4))
    config = Qwen2Config(vocab_size=tok.get_vocab_size(), hidden_size=args.hidden,
                         intermediate_size=2 * args.hidden, num_hidden_layers=args.layers,
                         num_attention_heads=heads, num_key_value_heads=max(1, heads // 2),
                         max_position_embeddings=32768, tie_word_embeddings=True,
                         eos_token_id=tok.token_to_id("<|im_end|>"), bos_token_id=None)
    config.initializer_range = 0.1
    torch.manual_seed(args.seed)
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # larger embeddings than transformers' 0.02: a tiny model learns faster
        model.model.embed_tokens.weight.normal_(0.0, 0.5)
    model.save_pretrained(str(args.out), safe_serialization=True)
    print(json.dumps({"model_dir": str(args.out), "vocab": tok.get_vocab_size(), "hidden": args.hidden,
                      "layers": args.layers, "parameters": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
