"""The C++ tokenizer (actors/model/tokenizer.cpp, driven through tokenizer_probe) against HF
tokenizers: byte-level BPE tokenizers trained here on a mixed corpus, in the Qwen2 style (NFC,
Split with Qwen2's pattern, ByteLevel without regex) and the Llama 3 style (Split with Llama 3's
pattern, ByteLevel with the GPT-2 regex, ignore_merges, TemplateProcessing adding a BOS), must give
the same ids for the same text and the same text for the same ids. Run with -s for the encode
throughput of both."""

import json
import os
import random
import subprocess
import time
import unicodedata
from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers
from tokenizers import pre_tokenizers, processors, trainers

QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"]
# Added tokens beyond the special ones, with the flags HF treats differently: a normalized one
# written decomposed (its NFC form is what matches), a single-word one, a stripping one.
EXTRA_TOKENS = [
    AddedToken("cafe\u0301 au lait", normalized=True, special=False),
    AddedToken("FooBar", single_word=True, normalized=False, special=False),
    AddedToken("<mask>", lstrip=True, rstrip=True, normalized=False, special=True),
]
# Whole words put into the vocabulary after training: with ignore_merges they are taken whole.
IGNORE_MERGES_WORDS = ["ĠZyxwvut", "Ġquokkaquokka", "Ġ12345"]


# --- the corpus -----------------------------------------------------------------------------------

WORDS = (
    "the of and to in is was for on that with as by at from it an be this which or are have not "
    "kernel thread block memory shared global warp launch latency throughput tensor matrix vector "
    "reduce scan sort compile link profile benchmark agent policy reward episode token model layer "
    "attention softmax gradient optimizer learning rate batch sequence cache queue actor message "
    "Alice Bob Charlie NVIDIA CUDA Python LibTorch GPU CPU H200 O'Brien McDonald's rock'n'roll"
).split()
CONTRACTIONS = ["I'm", "you're", "it's", "we've", "they'll", "he'd", "DON'T", "IT'S", "WE'VE",
                "She'S", "o'clock", "'twas", "l'\u017f", "it'\u017f", "ma'am", "y'all'd've", "''s"]
UNICODE_BITS = [
    "café", "cafe\u0301", "naïve", "nai\u0308ve", "Ångström", "A\u030angstro\u0308m",
    "\u212b", "\u212a", "Tiếng Việt", "Tie\u0302\u0301ng Vie\u0323\u0302t", "Tie\u0301\u0302ng",
    "q\u0307\u0323", "q\u0323\u0307", "\u1100\u1161\u11a8", "한국어 텍스트", "Ελληνικά", "Русский текст",
    "中文文本，包含标点。", "日本語のテキスト、カタカナ。", "العربية النص ١٢٣", "עברית", "हिन्दी पाठ",
    "ภาษาไทย", "👨\u200d👩\u200d👧\u200d👦", "👍🏽", "👍🏿👋🏻", "🇯🇵🇫🇷", "1\ufe0f\u20e3", "🏳\ufe0f\u200d🌈",
    "e\u0301\u0301", "\u0301start", "ﬁ ﬀ", "½ ² Ⅻ ⅻ", "x\u00a0y", "x\u3000y", "x\u2028y", "x\u0085y",
    "x\u180ey", "x\u200by", "\U00011f04\U0001e4d0\U00031350", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "\u00ad", "\x00\x01\x7f",
    "\ufffd", "cafe\u0301 au lait", "FooBar", "xFooBar", "FooBarx", " FooBar.", "é<mask>x",
    "a <mask>  b", "\t<mask>\n",
]
WHITESPACE_BITS = ["  ", "   ", "\t", "\t\t", " \t ", "\r\n", "\r\n\r\n", "\n\n\n", "   \n",
                   "\t\n  \r\n", " \r", "\r", "    ", "        x", "trailing   \n"]
NUMBER_BITS = ["1234567890", "3.14159", "1,000,000", "2024-06-01", "x86_64", "0xDEADBEEF",
               "12", "123", "1234", "007", "9" * 17, "1e-6", "-42", "+7", "٣٤٥", "१२३"]
SPECIAL_BITS = ["<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n",
                "<tool_call>\n{\"name\": \"compile\", \"arguments\": {\"file\": \"k.cu\"}}\n</tool_call>",
                "<|endoftext|>", "x<|endoftext|><|endoftext|>y", "<|im_start", "im_end|>",
                "<|im_start|><|im_end|>", " <|im_end|> ", "</tool_call></tool_call>"]

PYTHON_SNIPPET = '''def {name}(xs, k={k}):
    """Return the {k} largest of xs."""
    out = sorted(xs, reverse=True)[:k]
    for i, x in enumerate(out):
        if x % 2 == 0 and i != {k}:
            print(f"{{i:>4}}: {{x!r}}")  # trailing comment   
    return out

'''
CPP_SNIPPET = '''template <typename T>
T {name}(const std::vector<T>& v) {{
  T acc{{}};
  for (std::size_t i = 0; i < v.size(); ++i) acc += v[i] * {k};
  return acc;  // sum
}}

'''
CUDA_SNIPPET = '''__global__ void {name}(const float* __restrict__ a, float* b, int n) {{
\tint i = blockIdx.x * blockDim.x + threadIdx.x;
\tif (i < n) {{
\t\tb[i] = a[i] * {k}.0f + __shfl_down_sync(0xffffffff, a[i], 16);
\t}}
}}
{name}<<<(n + 255) / 256, 256>>>(d_a, d_b, n);\r\n\r\n'''


def make_corpus(min_bytes=1_100_000, seed=1234):
    rng = random.Random(seed)
    parts, size = [], 0
    while size < min_bytes:
        kind = rng.random()
        if kind < 0.35:
            words = []
            for _ in range(rng.randint(5, 40)):
                r = rng.random()
                if r < 0.08:
                    words.append(rng.choice(CONTRACTIONS))
                elif r < 0.14:
                    words.append(rng.choice(NUMBER_BITS))
                elif r < 0.18:
                    words.append(rng.choice(UNICODE_BITS))
                else:
                    w = rng.choice(WORDS)
                    words.append(w.capitalize() if rng.random() < 0.1 else w)
            piece = " ".join(words) + rng.choice([".", "!", "?", ",", ";", " --", "..."])
            piece += rng.choice(["\n", " ", "\n\n", "  \n", "\r\n"])
        elif kind < 0.45:
            piece = PYTHON_SNIPPET.format(name=f"top_{rng.randint(0, 999)}", k=rng.randint(1, 99))
        elif kind < 0.55:
            piece = CPP_SNIPPET.format(name=f"sum{rng.randint(0, 99)}", k=rng.randint(1, 9999))
        elif kind < 0.65:
            piece = CUDA_SNIPPET.format(name=f"axpy_{rng.randint(0, 99)}", k=rng.randint(1, 9))
        elif kind < 0.80:
            piece = "".join(rng.choice(UNICODE_BITS) + rng.choice(["", " ", "\n", "  "])
                            for _ in range(rng.randint(3, 12)))
        elif kind < 0.88:
            piece = "".join(rng.choice(WHITESPACE_BITS) + rng.choice(WORDS) for _ in range(6))
        elif kind < 0.94:
            piece = " ".join(rng.choice(NUMBER_BITS) for _ in range(rng.randint(3, 10))) + "\n"
        else:
            piece = "".join(rng.choice(SPECIAL_BITS) + rng.choice(WORDS + [""]) for _ in range(4))
        parts.append(piece)
        size += len(piece.encode())
    return "".join(parts)


def lines_of(text):
    lines = text.split("\n")
    return [line + "\n" for line in lines[:-1]] + ([lines[-1]] if lines[-1] else [])


def chunks_of(text, size=32768):
    return [text[i:i + size] for i in range(0, len(text), size)]


def sweep_texts():
    """Every code point of planes 0, 1 and 14 (surrogates aside) and every 7th of planes 2 and 3
    (CJK ideographs), each after a letter and after a space and before a digit, 256 a line."""
    cps = [c for c in range(0x20, 0x20000) if not 0xD800 <= c <= 0xDFFF]
    cps += list(range(0x20000, 0x40000, 7)) + list(range(0xE0000, 0xE0200))
    texts = []
    for i in range(0, len(cps), 256):
        texts.append("".join(f"x{chr(c)} {chr(c)}1" for c in cps[i:i + 256]))
    return texts


# --- tokenizers built here ------------------------------------------------------------------------

def train(corpus, pre_tokenizer, normalizer, vocab_size=4000):
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizer
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines_of(corpus), trainer=trainer)
    return tok


def with_edits(tok, edit):
    data = json.loads(tok.to_str())
    edit(data)
    return Tokenizer.from_str(json.dumps(data))


@pytest.fixture(scope="module")
def probe():
    build = os.environ.get("CUDA_AGENT_BUILD_DIR")
    assert build, "set CUDA_AGENT_BUILD_DIR to the build/tests/actors/model folder (CTest does)"
    path = Path(build) / "tokenizer_probe"
    assert path.exists(), f"{path} is missing: build the tokenizer_probe target"
    return path


def run_probe(probe, args, lines, check=True):
    stdin = "".join(json.dumps(x) + "\n" for x in lines)
    res = subprocess.run([str(probe), *args], input=stdin.encode(), capture_output=True)
    if check:
        assert res.returncode == 0, res.stderr.decode()
        return [json.loads(line) for line in res.stdout.decode().split("\n") if line]
    return res


@pytest.fixture(scope="module")
def corpus():
    return make_corpus()


@pytest.fixture(scope="module")
def tokenizers_built(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("tokenizers")
    built = {}

    # Qwen2 style.
    qwen = train(corpus,
                 pre_tokenizers.Sequence([
                     pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
                     pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]),
                 normalizers.NFC())
    qwen.post_processor = processors.ByteLevel(trim_offsets=False)
    qwen.add_tokens(EXTRA_TOKENS)
    path = out / "qwen2.json"
    qwen.save(str(path))
    built["qwen2"] = (path, Tokenizer.from_file(str(path)))

    # Llama 3 style: merges written as "a b" strings, whole-word vocabulary entries, BOS template.
    llama = train(corpus,
                  pre_tokenizers.Sequence([
                      pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                      pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]),
                  None)

    def llama_edits(data):
        model = data["model"]
        model["ignore_merges"] = True
        model["merges"] = [" ".join(m) for m in model["merges"]]
        for word in IGNORE_MERGES_WORDS:
            model["vocab"][word] = len(model["vocab"])

    llama = with_edits(llama, llama_edits)
    llama.add_special_tokens([AddedToken("<|begin_of_text|>", special=True, normalized=False)])
    bos = llama.token_to_id("<|begin_of_text|>")
    llama.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    llama.add_tokens(EXTRA_TOKENS)
    path = out / "llama3.json"
    llama.save(str(path))
    built["llama3"] = (path, Tokenizer.from_file(str(path)))
    return built


def corpus_texts(corpus):
    extra = [w[1:].replace("Ġ", " ") for w in IGNORE_MERGES_WORDS]
    extra = [" " + w for w in extra] + ["a" + w for w in extra]
    long_runs = [" " * 20000, "a" * 20000, "\r\n" * 10000, "7" * 10000, " \t" * 10000 + "x",
                 "e\u0301" * 10000, "中" * 10000]
    return lines_of(corpus) + chunks_of(corpus) + extra + long_runs + ["", " ", "\n"]


# --- tests ----------------------------------------------------------------------------------------

def test_corpus_is_mixed_and_large(corpus):
    assert len(corpus.encode()) >= 1_000_000
    for needle in ["__global__", "def ", "cafe\u0301", "café", "👨\u200d👩", "<|im_start|>", "\r\n",
                   "中文", "العربية"]:
        assert needle in corpus


@pytest.mark.parametrize("name", ["qwen2", "llama3"])
def test_encode_matches_hf(name, probe, corpus, tokenizers_built):
    path, hf = tokenizers_built[name]
    texts = corpus_texts(corpus)
    for add_special, args in [(True, []), (False, ["--no-special"])]:
        if not add_special:  # the post-processor's part only: fewer texts
            texts = texts[:2000] + texts[-50:]
        ours = run_probe(probe, ["encode", str(path), *args], texts)
        theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=add_special)]
        assert len(ours) == len(theirs)
        for text, a, b in zip(texts, ours, theirs):
            assert a == b, f"{name}: ids differ for {text[:200]!r}"
    lines = lines_of(corpus)[:6000]
    assert run_probe(probe, ["pre-tokens", str(path)], lines) == [hf_pre_tokens(hf, t) for t in lines]
    if name == "llama3":
        # The template and ignore_merges are in effect (so their equality above means something).
        assert hf.encode("hi").ids[0] == hf.token_to_id("<|begin_of_text|>")
        assert hf.encode(" Zyxwvut", add_special_tokens=False).ids == [hf.token_to_id("ĠZyxwvut")]


def hf_pre_tokens(hf, text):
    if hf.normalizer is not None:
        text = hf.normalizer.normalize_str(text)
    return [piece for piece, _ in hf.pre_tokenizer.pre_tokenize_str(text)]


@pytest.mark.parametrize("name", ["qwen2", "llama3"])
def test_every_code_point_matches_hf(name, probe, tokenizers_built):
    """Pre-tokens, not only ids: a character class that differs often changes no id (a rare
    character is its bytes whichever pre-token holds it)."""
    path, hf = tokenizers_built[name]
    texts = sweep_texts()
    ours = run_probe(probe, ["pre-tokens", str(path)], texts)
    bad = [t for t, a in zip(texts, ours) if a != hf_pre_tokens(hf, t)]
    assert not bad, f"{name}: {len(bad)} of {len(texts)} lines differ, first {bad[0][:120]!r}"
    ours = run_probe(probe, ["encode", str(path), "--no-special"], texts)
    theirs = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    bad = [t for t, a, b in zip(texts, ours, theirs) if a != b]
    assert not bad, f"{name}: {len(bad)} of {len(texts)} lines differ, first {bad[0][:120]!r}"


@pytest.mark.parametrize("name", ["qwen2", "llama3"])
def test_decode_matches_hf(name, probe, corpus, tokenizers_built):
    path, hf = tokenizers_built[name]
    texts = lines_of(corpus)[:3000] + chunks_of(corpus)[:8]
    id_lists = [e.ids for e in hf.encode_batch(texts)]
    # Random id sequences split characters between tokens (invalid UTF-8 -> U+FFFD) and name ids
    # that do not exist (skipped).
    rng = random.Random(7)
    size = hf.get_vocab_size(with_added_tokens=True)
    id_lists += [[rng.randrange(size + 3) for _ in range(rng.randint(1, 12))] for _ in range(3000)]
    for skip, args in [(False, []), (True, ["--skip-special"])]:
        ours = run_probe(probe, ["decode", str(path), *args], id_lists)
        theirs = hf.decode_batch(id_lists, skip_special_tokens=skip)
        for ids, a, b in zip(id_lists, ours, theirs):
            assert a == b, f"{name}: decode({ids}, skip_special_tokens={skip})"
    # Decoding gives the text back, NFC-normalized where the tokenizer normalizes (texts where
    # <mask> strips the spaces around it aside).
    kept = [t for t in texts if "<mask>" not in t]
    ids = [e.ids for e in hf.encode_batch(kept, add_special_tokens=False)]
    decoded = run_probe(probe, ["decode", str(path)], ids)
    want = [unicodedata.normalize("NFC", t) if name == "qwen2" else t for t in kept]
    assert decoded == want


VARIANTS = {
    # GPT-2: ByteLevel alone, with its regex and a prefix space on every piece.
    "gpt2": lambda d: d.update(normalizer=None, pre_tokenizer={
        "type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True}),
    # A literal Split pattern, merges as "a b" strings, no decoder (HF joins tokens with spaces).
    "literal": lambda d: d.update(decoder=None, pre_tokenizer={"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"String": ". "}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": True}]},
        model=dict(d["model"], merges=[" ".join(m) for m in d["model"]["merges"]])),
    # No pre-tokenizer: whole pieces reach BPE, characters outside the vocabulary are dropped.
    "none": lambda d: d.update(pre_tokenizer=None),
    # An unknown-token id for those characters instead, fused and not.
    "unk": lambda d: d.update(pre_tokenizer=None, model=dict(d["model"], unk_token="<|endoftext|>")),
    "unk_fused": lambda d: d.update(pre_tokenizer=None, model=dict(
        d["model"], unk_token="<|endoftext|>", fuse_unk=True)),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_match_hf(variant, probe, corpus, tokenizers_built, tmp_path):
    _, qwen = tokenizers_built["qwen2"]
    data = json.loads(qwen.to_str())
    VARIANTS[variant](data)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(data))
    hf = Tokenizer.from_file(str(path))
    texts = lines_of(corpus)[:1500] + chunks_of(corpus)[:2]
    assert run_probe(probe, ["encode", str(path)], texts) == [e.ids for e in hf.encode_batch(texts)]
    ids = [e.ids for e in hf.encode_batch(texts[:500])]
    assert run_probe(probe, ["decode", str(path)], ids) == hf.decode_batch(ids, skip_special_tokens=False)


def test_invalid_utf8_is_replaced_as_rust_does(probe, tokenizers_built):
    path, hf = tokenizers_built["qwen2"]
    raw = [b"abc\xff\xfe def", b"\xe2\x82 x", b"tail \xf0\x9f\x98", b"\xc0\xaf\xed\xa0\x80z",
           b"ok \xf4\x90\x80\x80 \xe0\x80\x80", b"<|im_end|>\x80<|im_end|>", "é".encode()[:1]]
    # Random bytes, mostly lead and continuation bytes at the edges of their valid ranges.
    rng = random.Random(5)
    edges = [0x80, 0xBF, 0xC0, 0xC2, 0xDF, 0xE0, 0xA0, 0xED, 0x9F, 0xF0, 0x90, 0xF4, 0x8F, 0xF5, 0xFF,
             0x41, 0x20]
    raw += [bytes(rng.choice(edges) if rng.random() < 0.7 else rng.randrange(256)
                  for _ in range(rng.randint(1, 30))) for _ in range(2000)]
    ours = run_probe(probe, ["encode", str(path)], [{"hex": r.hex()} for r in raw])
    theirs = [hf.encode(r.decode("utf-8", errors="replace")).ids for r in raw]
    assert ours == theirs


def test_vocabulary_and_specials_match_hf(probe, tokenizers_built):
    for name, (path, hf) in tokenizers_built.items():
        res = subprocess.run([str(probe), "vocab", str(path)], capture_output=True, check=True)
        vocab = json.loads(res.stdout)
        assert vocab["vocab_size"] == hf.get_vocab_size(with_added_tokens=True)
        assert vocab["tokens"] == [hf.id_to_token(i) for i in range(vocab["vocab_size"])]
        specials = {t.content: i for i, t in hf.get_added_tokens_decoder().items() if t.special}
        assert vocab["special"] == specials


def test_concurrent_encodes_agree_with_hf(probe, corpus, tokenizers_built):
    path, hf = tokenizers_built["qwen2"]
    texts = lines_of(corpus)[:4000]
    ours = run_probe(probe, ["encode-threads", str(path), "4"], texts)
    assert ours == [e.ids for e in hf.encode_batch(texts)]


def write_tokenizer(path, tok=None, edit=None, text=None):
    if text is None:
        data = json.loads(tok.to_str())
        if edit:
            edit(data)
        text = json.dumps(data)
    path.write_text(text)
    return path


def test_errors_name_the_file_and_the_problem(probe, tokenizers_built, tmp_path):
    qwen_path, qwen = tokenizers_built["qwen2"]
    good = qwen_path.read_text()
    wordpiece = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1}, unk_token="[UNK]"))
    unigram = Tokenizer(models.Unigram([("a", -1.0), ("b", -2.0)], 0, False))

    def set_key(key, value):
        return lambda d: d.__setitem__(key, value)

    cases = {
        "missing": (tmp_path / "nope" / "tokenizer.json", "cannot open"),
        "truncated": (write_tokenizer(tmp_path / "truncated.json", text=good[:len(good) // 2]),
                      "not valid JSON"),
        "wordpiece": (write_tokenizer(tmp_path / "wp.json", wordpiece), "unsupported model WordPiece"),
        "unigram": (write_tokenizer(tmp_path / "ug.json", unigram), "unsupported model Unigram"),
        "nfkc": (write_tokenizer(tmp_path / "nfkc.json", qwen,
                                 set_key("normalizer", {"type": "NFKC"})), "unsupported normalizer NFKC"),
        "lowercase": (write_tokenizer(tmp_path / "lower.json", qwen,
                                      set_key("normalizer", {"type": "Sequence", "normalizers": [
                                          {"type": "NFC"}, {"type": "Lowercase"}]})),
                      "unsupported normalizer Lowercase"),
        "metaspace": (write_tokenizer(tmp_path / "ms.json", qwen, set_key("pre_tokenizer", {
            "type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": True})),
            "unsupported pre_tokenizer Metaspace"),
        "removed": (write_tokenizer(tmp_path / "rm.json", qwen, set_key("pre_tokenizer", {
            "type": "Split", "pattern": {"Regex": "\\s"}, "behavior": "Removed", "invert": False})),
            "unsupported Split pre-tokenizer behavior Removed"),
        "bad_merge": (write_tokenizer(tmp_path / "merge.json", qwen,
                                      lambda d: d["model"]["merges"].append(["Q", "zzzz"])),
                      "which the vocabulary lacks"),
    }
    for case, (path, expected) in cases.items():
        res = run_probe(probe, ["encode", str(path)], ["hello"], check=False)
        message = res.stderr.decode().strip()
        assert res.returncode != 0, case
        assert expected in message and str(path) in message, (case, message)
        assert "\n" not in message, (case, message)


def test_throughput_printed(probe, corpus, tokenizers_built):
    """Not a timed assertion: prints MB/s of the probe's and HF's single-threaded encode."""
    mb = len(corpus.encode()) / 1e6
    for name, (path, _) in tokenizers_built.items():
        for label, texts in [("lines", lines_of(corpus)), ("32 KiB chunks", chunks_of(corpus))]:
            res = run_probe(probe, ["bench", str(path)], texts)[0]
            hf = Tokenizer.from_file(str(path))
            start = time.perf_counter()
            for t in texts:
                hf.encode(t, add_special_tokens=False)
            seconds = time.perf_counter() - start
            print(f"\n[tokenizer throughput] {name}, {label}, {mb:.2f} MB, one thread: C++ "
                  f"{mb / res['seconds'][0]:.1f} MB/s (fresh cache), {mb / res['seconds'][1]:.1f} "
                  f"MB/s (warm cache); HF Tokenizer.encode {mb / seconds:.1f} MB/s (fresh)")
