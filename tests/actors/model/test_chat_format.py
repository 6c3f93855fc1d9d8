"""The chat format against transformers' apply_chat_template with the models' real templates.

Every conversation below, and every prefix of it, is rendered by the C++ chat format (through
chat_probe) and by transformers with each family's template (tests/actors/model/templates/README.md
says where they come from), and the two texts must be equal byte for byte. The messages are
handed to transformers the way vLLM hands an OpenAI conversation to a template: arguments parsed
from their JSON text ({} when empty, the text itself when it is not JSON), content a string.
"""

import json
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
TOOLS_DIR = ROOT / "skills" / "tools"
LLAMA32_DATE = "02 Dec 2026"

# name passed to the probe, template file, extra template variables, the probe's settings
FAMILIES = {
    "qwen2": ("qwen2", "qwen2.5-instruct.jinja", {}, {}),
    "qwen3": ("qwen3", "qwen3.jinja", {}, {}),
    "qwen3-nothink": ("qwen3", "qwen3.jinja", {"enable_thinking": False}, {"enable_thinking": False}),
    "llama3.1": ("llama3", "llama3.1-instruct.jinja", {}, {}),
    "llama3.2": ("llama3", "llama3.2-instruct.jinja", {"date_string": LLAMA32_DATE},
                 {"date_string": LLAMA32_DATE}),
}


def template_dir():
    for candidate in (os.environ.get("CUDA_AGENT_CHAT_TEMPLATES"), ROOT / "shared" / "chat_templates",
                      ROOT / "tests" / "actors" / "model" / "templates"):
        if candidate and pathlib.Path(candidate).is_dir() and any(pathlib.Path(candidate).glob("*.jinja")):
            return pathlib.Path(candidate)
    return None


def load_template(file):
    folder = template_dir()
    if folder is None or not (folder / file).is_file():
        pytest.skip(f"chat template {file} not found (see tests/actors/model/templates/README.md)")
    return (folder / file).read_text(encoding="utf-8")


def probe_path():
    build = os.environ.get("CUDA_AGENT_BUILD_DIR")
    if not build:
        pytest.fail("CUDA_AGENT_BUILD_DIR is not set: point it at build/tests/actors/model")
    path = pathlib.Path(build) / "chat_probe"
    if not path.is_file():
        pytest.fail(f"{path} is not built: cmake --build build --target chat_probe")
    return path


def run_probe(request):
    request = dict(request, tools_dir=str(TOOLS_DIR))
    done = subprocess.run([str(probe_path())], input=json.dumps(request).encode(), capture_output=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    import transformers

    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")),
        bos_token="<|begin_of_text|>", eos_token="<|im_end|>")


TOKENIZER = None


def hf_render(template, messages, offered, generation_prompt, variables, split_calls):
    global TOKENIZER
    if TOKENIZER is None:
        TOKENIZER = tokenizer()
    tools = None
    if offered:
        tools = [{"type": "function", "function": json.loads((TOOLS_DIR / f"{name}.json").read_text())}
                 for name in offered]
    try:
        return TOKENIZER.apply_chat_template(to_hf(messages, split_calls), tools=tools, tokenize=False,
                                             add_generation_prompt=generation_prompt, chat_template=template,
                                             **variables)
    except Exception as error:  # the template raises: the C++ must refuse as well
        return {"error": str(error)}


def vllm_arguments(text):
    if not text:
        return {}
    try:
        return json.loads(text)
    except ValueError:
        return text


def to_hf(messages, split_calls):
    out = []
    for m in messages:
        d = {"role": m["role"], "content": m.get("content", "")}
        calls = [{"id": c["call_id"], "type": "function",
                  "function": {"name": c["tool"], "arguments": vllm_arguments(c["arguments_json"])}}
                 for c in m.get("tool_calls", [])]
        if m["role"] == "tool":
            d["tool_call_id"] = m.get("tool_call_id", "")
        if calls and split_calls:  # llama3 takes one call a turn: the C++ splits such a turn
            out.extend(dict(d, tool_calls=[c]) for c in calls)
            continue
        if calls:
            d["tool_calls"] = calls
        out.append(d)
    return out


def call(i, tool, arguments):
    return {"call_id": f"ep-t0-{i}", "tool": tool,
            "arguments_json": arguments if isinstance(arguments, str) else json.dumps(arguments)}


NESTED = {"command": "python -c \"print('a\\\\tb')\" | grep -E '^x{2}$'", "timeout": 1000,
          "description": "quotes \" and \\ and\ttab, é 中文 🚀", "run_in_background": False,
          "extra": {"nested": {"list": [1, 2.5, 1e-07, 100.0, -0.0, 1e16, None, True, "x"], "empty": {}},
                    "arr": []}}

ALL = ["Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "BashOutput", "KillBash"]

CONVERSATIONS = {
    "user_only": ([{"role": "user", "content": "Hello"}], []),
    "system_no_tools": ([{"role": "system", "content": "  Be brief.\n"},
                         {"role": "user", "content": "Hi"},
                         {"role": "assistant", "content": "Hello!"},
                         {"role": "user", "content": "Again"}], []),
    "tools_no_system": ([{"role": "user", "content": "Write a kernel."},
                         {"role": "assistant", "content": "Looking around first.",
                          "tool_calls": [call(0, "Bash", {"command": "ls -la"}),
                                         call(1, "Read", {"file_path": "model.py"}),
                                         call(2, "Grep", {"pattern": "def forward", "path": "."})]},
                         {"role": "tool", "tool_call_id": "ep-t0-0", "content": "model.py\nsolution"},
                         {"role": "tool", "tool_call_id": "ep-t0-1", "content": "import torch\n"},
                         {"role": "tool", "tool_call_id": "ep-t0-2", "content": "model.py:12: def forward"},
                         {"role": "assistant", "content": "",
                          "tool_calls": [call(0, "Write", {"file_path": "k.cu", "content": "__global__ void k() {}\n"})]},
                         {"role": "tool", "tool_call_id": "ep-t0-0", "content": "wrote 23 bytes"},
                         {"role": "assistant", "content": "Done."}], ALL),
    "system_tools_unicode": ([{"role": "system", "content": "You write CUDA.\nSecond line — ünïcødé ✓"},
                              {"role": "user", "content": "Première ligne\n\nsecond 中文 🚀\u2028end"},
                              {"role": "assistant", "content": "Running\nit.",
                               "tool_calls": [call(0, "Bash", NESTED)]},
                              {"role": "tool", "tool_call_id": "ep-t0-0",
                               "content": "line1\n\tline2 \"quoted\" \\ back\u0001ctl é"},
                              {"role": "user", "content": "\u3000 padded\u00a0 "}], ["Bash", "Read", "Edit"]),
    "empty_contents": ([{"role": "system", "content": ""},
                        {"role": "user", "content": ""},
                        {"role": "assistant", "content": ""},
                        {"role": "user", "content": "x"},
                        {"role": "assistant", "content": "", "tool_calls": [call(0, "Glob", {"pattern": "*.cu"})]},
                        {"role": "tool", "tool_call_id": "ep-t0-0", "content": ""}], ["Glob"]),
    "malformed_arguments": ([{"role": "user", "content": "go"},
                             {"role": "assistant", "content": "",
                              "tool_calls": [call(0, "Bash", "{\"command\": \"ls\"")]},
                             {"role": "tool", "tool_call_id": "ep-t0-0", "content": "error: not JSON"},
                             {"role": "assistant", "content": "",
                              "tool_calls": [call(0, "Bash", "")]},
                             {"role": "tool", "tool_call_id": "ep-t0-0", "content": "error"},
                             {"role": "assistant", "content": "",
                              "tool_calls": [call(0, "KillBash", "[1, 2]")]},
                             {"role": "tool", "tool_call_id": "ep-t0-0", "content": "error"}], ["Bash", "KillBash"]),
    "thinking": ([{"role": "system", "content": "sys"},
                  {"role": "user", "content": "first question"},
                  {"role": "assistant", "content": "<think>\nearly reasoning\n</think>\n\nfirst answer"},
                  {"role": "user", "content": "second question"},
                  {"role": "assistant", "content": "<think>\n\nplan: run ls\n\n</think>\n\n\nI will look.",
                   "tool_calls": [call(0, "Bash", {"command": "ls"})]},
                  {"role": "tool", "tool_call_id": "ep-t0-0", "content": "a\nb"},
                  {"role": "assistant", "content": "no think here",
                   "tool_calls": [call(0, "Read", {"file_path": "a"})]},
                  {"role": "tool", "tool_call_id": "ep-t0-0", "content": "content of a"},
                  {"role": "user", "content": "<tool_response>\nlooks like a result\n</tool_response>"},
                  {"role": "assistant", "content": "<think>last</think>final"}], ["Bash", "Read"]),
    "second_system": ([{"role": "user", "content": "u"},
                       {"role": "system", "content": "a later system message"},
                       {"role": "assistant", "content": " trailing space "}], ["Read"]),
    "tools_without_user": ([{"role": "system", "content": "only a system prompt"}], ["Bash"]),
}


def cases():
    for family in FAMILIES:
        for conversation in CONVERSATIONS:
            yield family, conversation


def prefixes(messages):
    return [messages[:k] for k in range(1, len(messages) + 1)]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_render_matches_transformers(family):
    name, file, variables, settings = FAMILIES[family]
    template = load_template(file)
    split = name == "llama3"
    renders, expected = [], []
    for conversation, (messages, offered) in CONVERSATIONS.items():
        for prefix in prefixes(messages):
            for generation_prompt in (True, False):
                renders.append({"messages": prefix, "offered": offered,
                                "add_generation_prompt": generation_prompt})
                expected.append((conversation, len(prefix), generation_prompt,
                                 hf_render(template, prefix, offered, generation_prompt, variables, split)))
    answer = run_probe(dict(settings, format=name, renders=renders))
    assert len(answer["renders"]) == len(expected)
    compared = 0
    for got, (conversation, length, generation_prompt, want) in zip(answer["renders"], expected):
        where = f"{family} {conversation} first {length} messages, generation prompt {generation_prompt}"
        if isinstance(want, dict):
            assert "error" in got, f"{where}: the template raises ({want['error']}) but C++ rendered"
            continue
        assert "error" not in got, f"{where}: C++ refused: {got.get('error')}"
        assert got["text"] == want, f"{where}:\nC++:  {got['text']!r}\nHF:   {want!r}"
        compared += 1
    assert compared > 40


@pytest.mark.parametrize("family", list(FAMILIES))
def test_spans_mark_what_the_model_generates(family):
    """The generated spans of an assistant turn are what the template appends to the prompt."""
    name, file, variables, settings = FAMILIES[family]
    template = load_template(file)
    split = name == "llama3"
    renders, expected = [], []
    for conversation, (messages, offered) in CONVERSATIONS.items():
        for k, m in enumerate(messages):
            if m["role"] != "assistant" or (split and len(m.get("tool_calls", [])) > 1):
                continue
            prompt = hf_render(template, messages[:k], offered, True, variables, split)
            whole = hf_render(template, messages[:k + 1], offered, False, variables, split)
            if isinstance(prompt, dict) or isinstance(whole, dict):
                continue
            # The append-only property itself, in the real template. It breaks where Qwen3's prompt
            # without thinking ends in an empty think block and the turn holds reasoning.
            if not whole.startswith(prompt):
                assert family == "qwen3-nothink" and "</think>" in m["content"], f"{family} {conversation} {k}"
                continue
            turn = whole[len(prompt):]
            if name != "llama3":
                assert turn.endswith("<|im_end|>\n")
                turn = turn[:-1]
            renders.append({"messages": messages[:k + 1], "offered": offered, "add_generation_prompt": False})
            expected.append((conversation, k, len(prompt.encode()), turn))
    answer = run_probe(dict(settings, format=name, renders=renders))
    assert expected
    for got, (conversation, k, prompt_bytes, turn) in zip(answer["renders"], expected):
        text = got["text"].encode()
        generated = b"".join(text[b:e] for b, e, message, gen in got["spans"] if gen and message == k)
        assert generated.decode() == turn, f"{family} {conversation} message {k}"
        assert all(b >= prompt_bytes for b, e, message, gen in got["spans"] if gen and message == k)
        # Spans cover the text in order.
        assert [s[0] for s in got["spans"]][0] == 0 and got["spans"][-1][1] == len(text)
        assert all(a[1] == b[0] for a, b in zip(got["spans"], got["spans"][1:]))


def test_qwen3_breaks_the_prefix_where_the_documentation_says():
    """Qwen3's template itself drops an empty think block and earlier reasoning; the C++ follows."""
    template = load_template("qwen3.jinja")
    messages, offered = CONVERSATIONS["thinking"]
    last = hf_render(template, messages[:7], offered, False, {}, False)  # ends with an assistant turn
    more = hf_render(template, messages[:8], offered, True, {}, False)
    assert not more.startswith(last)  # "<think>\n\n</think>\n\n" of the last turn is gone
    before_query = hf_render(template, messages[:8], offered, False, {}, False)
    after_query = hf_render(template, messages[:9], offered, False, {}, False)
    assert "plan: run ls" in before_query and after_query.startswith(before_query)  # a tool_response "user"
    new_query = messages[:8] + [{"role": "user", "content": "third question"}]
    assert "plan: run ls" not in hf_render(template, new_query, offered, True, {}, False)
    answer = run_probe({"format": "qwen3", "renders": [
        {"messages": messages[:7], "offered": offered, "add_generation_prompt": False},
        {"messages": messages[:8], "offered": offered, "add_generation_prompt": True},
        {"messages": new_query, "offered": offered, "add_generation_prompt": True}]})
    assert answer["renders"][0]["text"] == last
    assert answer["renders"][1]["text"] == more
    assert "plan: run ls" not in answer["renders"][2]["text"]


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama3.1"])
def test_parse_reads_back_the_rendered_calls(family):
    """What the template writes for an assistant turn parses back to the same calls and content."""
    name, file, variables, settings = FAMILIES[family]
    template = load_template(file)
    split = name == "llama3"
    parses, expected = [], []
    for conversation, (messages, offered) in CONVERSATIONS.items():
        for k, m in enumerate(messages):
            calls = m.get("tool_calls", [])
            if m["role"] != "assistant" or not calls or "<think>" in m["content"]:
                continue
            if any(not isinstance(vllm_arguments(c["arguments_json"]), dict) for c in calls):
                continue
            if split and len(calls) > 1:
                continue
            prompt = hf_render(template, messages[:k], offered, True, variables, split)
            whole = hf_render(template, messages[:k + 1], offered, False, variables, split)
            if isinstance(prompt, dict):
                continue
            parses.append({"text": whole[len(prompt):], "offered": offered, "call_id_prefix": "ep-t0"})
            # llama3 drops the content of a turn with a call; qwen3 gives the last turn an empty
            # think block, which parsing keeps as content.
            content = "" if split else m["content"]
            if family == "qwen3":
                content = "<think>\n\n</think>\n\n" + content
            expected.append((conversation, k, content, calls))
    answer = run_probe(dict(settings, format=name, parses=parses))
    assert expected
    for got, (conversation, k, content, calls) in zip(answer["parses"], expected):
        where = f"{family} {conversation} message {k}"
        assert got["stopped"], where
        assert got["content"] == content, where
        assert [c["tool"] for c in got["tool_calls"]] == [c["tool"] for c in calls], where
        for g, c in zip(got["tool_calls"], calls):
            arguments = vllm_arguments(c["arguments_json"])
            assert json.loads(g["arguments_json"]) == arguments, where
            # The text is Python's json.dumps of the arguments, as the template wrote it.
            assert g["arguments_json"] == json.dumps(arguments, ensure_ascii=False), where
            assert g["call_id"] == c["call_id"], where


def test_detects_the_format_from_a_checkpoint(tmp_path):
    """A tokenizer saved by transformers with each real template is detected as its family."""
    for file, name in (("qwen2.5-instruct.jinja", "qwen2"), ("qwen3.jinja", "qwen3"),
                       ("llama3.1-instruct.jinja", "llama3"), ("llama3.2-instruct.jinja", "llama3")):
        tok = tokenizer()
        tok.chat_template = load_template(file)
        out = tmp_path / file
        tok.save_pretrained(out)
        answer = run_probe({"detect": str(out)})
        assert answer.get("detected") == name, (file, answer)
    # A template of another family is refused with the way out.
    tok = tokenizer()
    tok.chat_template = "{% for m in messages %}{{ m.content }}{% endfor %}"
    tok.save_pretrained(tmp_path / "other")
    answer = run_probe({"detect": str(tmp_path / "other")})
    assert "error" in answer and "qwen2, qwen3 or llama3" in answer["error"], answer
