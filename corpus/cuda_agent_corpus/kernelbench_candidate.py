"""A KernelBench-format candidate (one `model_new.py` whose `ModelNew` builds its kernels with
`torch.utils.cpp_extension.load_inline`) laid out as a cuda-agent solution workdir, so that the
same build, locked harness and reward judge it as any other solution.

The inline sources are read from the program text without running it: every `load_inline` call
must name its sources with values Python can compute from the file alone (string literals,
f-strings and `+` of them, top-level names bound to such values, lists and tuples of them,
`"sep".join([...])`, `textwrap.dedent(...)`). They become

    kernels/<name>.cu           the call's cuda_sources, after load_inline's own prelude
    kernels/<name>_binding.cpp  the call's cpp_sources and a registration of its `functions`
                                (kernels/<name>.cpp, built with the kernel flags, where the call
                                has no cuda_sources: there the C++ is the kernel)
    model_new.py                the program unchanged, after a prelude that makes load_inline
                                return the module cuda-agent built, once it has checked that the
                                sources the program passes at run time are the ones built.

So load_inline never compiles anything in the harness (it could not: the candidate's sandbox has
no writable cache), and a program whose sources differ at run time from the text fails loudly
instead of running something unbuilt.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
import textwrap
from pathlib import Path
from typing import Dict, List, Optional

# load_inline's positional parameters, in order (torch 2.11).
_POSITIONAL = ("name", "cpp_sources", "cuda_sources", "functions")
_SOURCE_KEYS = ("name", "cpp_sources", "cuda_sources", "functions")
# What load_inline puts before the sources it writes (torch/utils/cpp_extension.py).
_CPP_PRELUDE = "#include <torch/extension.h>\n"
_CUDA_PRELUDE = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>\n"
_PYBIND_MODULE = re.compile(r"PYBIND11_MODULE\s*\(\s*\w+\s*,\s*(\w+)\s*\)")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ConversionError(Exception):
    """A candidate that cannot be laid out as a workdir: one line naming the problem and the fix."""


def _unsupported(node: ast.AST, what: str) -> ConversionError:
    return ConversionError(f"line {getattr(node, 'lineno', '?')}: {what} is not a value cuda-agent "
                           "can read from the file without running it; write it as a string literal "
                           "or a top-level name bound to one")


def _changing_names(tree: ast.AST):
    """Names whose value one top-level binding does not fix: (rebound, mutated), each mapping a
    name to a line that changes it. Rebound: bound more than once anywhere (a second assignment,
    a loop target, `+=`, inside a function, `global`). Mutated: a method called on it or an item
    or attribute assigned (harmless for a string, which cannot change in place)."""
    stores: Dict[str, List[int]] = {}
    mutated: Dict[str, int] = {}
    rebound: Dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            stores.setdefault(node.id, []).append(node.lineno)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name)):
            mutated.setdefault(node.func.value.id, node.lineno)
        elif (isinstance(node, (ast.Subscript, ast.Attribute)) and isinstance(node.ctx, ast.Store)
              and isinstance(node.value, ast.Name)):
            mutated.setdefault(node.value.id, node.lineno)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                rebound.setdefault(name, node.lineno)
    for name, lines in stores.items():
        if len(lines) > 1:
            rebound.setdefault(name, lines[1])
    return rebound, mutated


class _StaticValues:
    """Evaluates the small expression language sources are written in, against the file's
    top-level names that are bound once and never changed."""

    def __init__(self, changing=({}, {})):
        self.names: Dict[str, object] = {}
        self.rebound, self.mutated = changing

    def bind(self, statement: ast.stmt) -> None:
        targets, value = [], None
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    self.names[target.id] = self.value(value)
                except ConversionError:
                    self.names.pop(target.id, None)  # not a source; an error only if a call uses it

    def value(self, node: ast.AST):
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, bool, type(None), int)):
            return node.value
        if isinstance(node, ast.Name):
            line = self.rebound.get(node.id)
            if line is None and not isinstance(self.names.get(node.id), str):
                line = self.mutated.get(node.id)
            if line is not None:
                raise ConversionError(f"line {node.lineno}: the value of '{node.id}' changes after it "
                                      f"is bound (line {line}), so cuda-agent cannot read it from "
                                      "the file; bind the sources once, as literals")
            if node.id in self.names:
                return self.names[node.id]
            raise _unsupported(node, f"the name '{node.id}'")
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.value(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise _unsupported(node, "a dict with ** unpacking")
            return {self.value(k): self.value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            left, right = self.value(node.left), self.value(node.right)
            if type(left) is not type(right) or not isinstance(left, (str, list)):
                raise _unsupported(node, "this '+'")
            return left + right
        if isinstance(node, ast.JoinedStr):
            parts = []
            for part in node.values:
                if isinstance(part, ast.Constant):
                    parts.append(str(part.value))
                elif isinstance(part, ast.FormattedValue) and part.conversion == -1 and part.format_spec is None:
                    parts.append(str(self.value(part.value)))
                else:
                    raise _unsupported(part, "this f-string field")
            return "".join(parts)
        if isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1:
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "join"
                    and isinstance(func.value, ast.Constant) and isinstance(func.value.value, str)):
                items = self.value(node.args[0])
                if isinstance(items, list) and all(isinstance(i, str) for i in items):
                    return func.value.value.join(items)
            if _dotted(func) in ("textwrap.dedent", "dedent"):
                text = self.value(node.args[0])
                if isinstance(text, str):
                    return textwrap.dedent(text)
        raise _unsupported(node, "this expression")


def _dotted(node: ast.AST) -> str:
    """The attribute chain's names; unlike importers' dotted(), a chain that starts at a call or a
    subscript keeps its tail (`get_ext().load_inline` -> "load_inline"), so that such a call is
    still seen as a load_inline call (and converted or refused like any other) rather than missed."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _is_call_to(node: ast.AST, function: str) -> bool:
    return isinstance(node, ast.Call) and _dotted(node.func).split(".")[-1] == function


def _as_sources(value, what: str, node: ast.AST) -> List[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ConversionError(f"line {node.lineno}: load_inline's {what} must be a string or a list of "
                          "strings")


def _functions(value, node: ast.AST) -> Optional[Dict[str, str]]:
    if value is None:
        return None
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        value = {v: "" for v in value}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                              for k, v in value.items()):
        raise ConversionError(f"line {node.lineno}: load_inline's functions must be a name, a list of "
                              "names or a dict of name to docstring")
    for name in value:
        if not _IDENTIFIER.match(name):
            raise ConversionError(f"line {node.lineno}: load_inline function '{name}' is not a C++ "
                                  "identifier")
    return value


def source_digest(name: str, cpp_sources: List[str], cuda_sources: List[str],
                  functions: Optional[Dict[str, str]]) -> str:
    """What a load_inline call compiles, as the prelude recomputes it from the call's arguments."""
    fields = [name, "\0".join(cpp_sources), "\0".join(cuda_sources),
              json.dumps(sorted(functions)) if functions is not None else "null"]
    return hashlib.sha256("\x1f".join(fields).encode()).hexdigest()


def find_inline_modules(code: str, filename: str = "model_new.py") -> List[dict]:
    """Every load_inline call of the program, with its sources; ConversionError where one cannot
    be read statically or the program is not a KernelBench-format candidate."""
    try:
        tree = ast.parse(code, filename)
    except SyntaxError as e:
        raise ConversionError(f"does not parse: {e.msg} at line {e.lineno}; fix the program text") from e
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        raise ConversionError("defines no top-level class ModelNew; a KernelBench-format candidate "
                              "defines ModelNew")
    for node in ast.walk(tree):
        if _is_call_to(node, "load") and "cpp_extension" in _dotted(node.func) or (
                isinstance(node, ast.ImportFrom) and node.module == "torch.utils.cpp_extension"
                and any(a.name == "load" for a in node.names)):
            raise ConversionError(f"line {node.lineno}: uses torch.utils.cpp_extension.load (sources in "
                                  "other files); give the sources inline with load_inline")

    values = _StaticValues(_changing_names(tree))
    modules: List[dict] = []

    def visit(statements):
        for statement in statements:
            for node in ast.walk(statement):
                if _is_call_to(node, "load_inline"):
                    modules.append(_read_call(node, values))
            values.bind(statement)

    visit(tree.body)
    if not modules:
        raise ConversionError("calls load_inline nowhere; a KernelBench-format candidate builds its "
                              "kernels with torch.utils.cpp_extension.load_inline")
    names, defined = set(), {}
    for m in modules:
        if m["name"] in names:
            raise ConversionError(f"two load_inline calls are named '{m['name']}'; give each module "
                                  "its own name")
        names.add(m["name"])
        for function in m["functions"] or {}:
            if function in defined:
                raise ConversionError(f"function '{function}' is defined by load_inline modules "
                                      f"'{defined[function]}' and '{m['name']}'; cuda-agent builds "
                                      "them into one module, so give them different names")
            defined[function] = m["name"]
    return modules


def _read_call(node: ast.Call, values: _StaticValues) -> dict:
    args: Dict[str, ast.AST] = {}
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred) or i >= len(_POSITIONAL):
            raise _unsupported(arg, "a load_inline argument beyond name, cpp_sources, cuda_sources "
                                    "and functions given by position")
        args[_POSITIONAL[i]] = arg
    for kw in node.keywords:
        if kw.arg is None:
            raise _unsupported(kw.value, "**kwargs to load_inline")
        args[kw.arg] = kw.value
    if "name" not in args or "cpp_sources" not in args:
        raise ConversionError(f"line {node.lineno}: load_inline needs name and cpp_sources")
    read = {key: values.value(args[key]) if key in args else None for key in _SOURCE_KEYS}
    if not isinstance(read["name"], str) or not _IDENTIFIER.match(read["name"]):
        raise ConversionError(f"line {node.lineno}: load_inline's name must be an identifier, got "
                              f"{read['name']!r}")
    # Compiler and linker flags are cuda-agent's own (build.kernel_flags and the module's link
    # line), the same for every candidate; what the call asked for is kept in the record.
    flags = {}
    for key in ("extra_cflags", "extra_cuda_cflags", "extra_ldflags", "extra_include_paths"):
        if key in args:
            try:
                flags[key] = values.value(args[key])
            except ConversionError:
                flags[key] = "(not a constant)"
    module = {"name": read["name"], "line": node.lineno,
              "cpp_sources": _as_sources(read["cpp_sources"], "cpp_sources", node),
              "cuda_sources": _as_sources(read["cuda_sources"], "cuda_sources", node),
              "functions": _functions(read["functions"], node), "ignored_flags": flags}
    module["digest"] = source_digest(module["name"], module["cpp_sources"], module["cuda_sources"],
                                     module["functions"])
    return module


def _binding_source(module: dict) -> str:
    """The call's C++ with its functions registered into cuda_extension (binding_registry.h)."""
    tag = f"kernelbench_{module['name']}"
    cpp = "\n".join(module["cpp_sources"])
    registration = ""
    if module["functions"] is None:
        # The program defines its own module body; it becomes this module's registration.
        if not _PYBIND_MODULE.search(cpp):
            raise ConversionError(f"load_inline module '{module['name']}' gives no functions and its "
                                  "cpp_sources define no PYBIND11_MODULE; list its functions")
        cpp = _PYBIND_MODULE.sub(
            lambda m: f"static void {tag}_module(pybind11::module& {m.group(1)});\n"
                      f"REGISTER_BINDING({tag}, {tag}_module);\n"
                      f"static void {tag}_module(pybind11::module& {m.group(1)})", cpp, count=1)
    else:
        defs = "\n".join(f'  m.def("{name}", &{name}, {json.dumps(doc)});'
                         for name, doc in module["functions"].items())
        registration = (f"\n\nstatic void {tag}_module(pybind11::module& m) {{\n{defs}\n}}\n"
                        f"REGISTER_BINDING({tag}, {tag}_module);\n")
    return (f"// {module['name']}: load_inline's cpp_sources (line {module['line']} of the candidate)\n"
            f"{_CPP_PRELUDE}#include \"binding_registry.h\"\n\n{cpp}{registration}")


def _prelude(modules: List[dict]) -> str:
    built = {m["name"]: m["digest"] for m in modules}
    return f'''# cuda-agent: a KernelBench-format candidate. Its load_inline modules were built ahead by
# cuda-agent's build into cuda_extension (kernels/); here load_inline returns that module once the
# sources the program passes match those built. The candidate's own program follows unchanged.
import hashlib as _cuda_agent_hashlib
import json as _cuda_agent_json
import torch.utils.cpp_extension as _cuda_agent_cpp_extension
import cuda_extension as _cuda_agent_built

_CUDA_AGENT_BUILT = {json.dumps(built, indent=1)}


def _cuda_agent_sources(value):
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _cuda_agent_load_inline(name, cpp_sources, cuda_sources=None, functions=None, *args, **kwargs):
    if isinstance(functions, str):
        functions = [functions]
    fields = [name, "\\0".join(_cuda_agent_sources(cpp_sources)),
              "\\0".join(_cuda_agent_sources(cuda_sources)),
              _cuda_agent_json.dumps(sorted(functions)) if functions is not None else "null"]
    digest = _cuda_agent_hashlib.sha256("\\x1f".join(fields).encode()).hexdigest()
    if _CUDA_AGENT_BUILT.get(name) != digest:
        raise RuntimeError("load_inline module %r: its sources at run time are not those cuda-agent "
                           "built from the program text" % (name,))
    return _cuda_agent_built


_cuda_agent_cpp_extension.load_inline = _cuda_agent_load_inline
# --- the candidate's program ---------------------------------------------------------------------
'''


def _with_prelude(code: str, prelude: str) -> str:
    """The prelude before the program; `from __future__` imports, which must come first, move
    above it (their lines stay behind, commented out)."""
    lines = code.splitlines(keepends=True)
    hoisted = []
    for node in ast.parse(code).body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for i in range(node.lineno - 1, node.end_lineno):
                hoisted.append(lines[i] if lines[i].endswith("\n") else lines[i] + "\n")
                lines[i] = "# (moved above the prelude) " + lines[i]
    return "".join(hoisted) + prelude + "".join(lines)


def convert(code: str, out_dir, filename: str = "model_new.py") -> dict:
    """Writes the solution workdir for `code` into out_dir (model_new.py, kernels/); returns what
    was written and how, for the record. ConversionError when the program cannot be laid out."""
    modules = find_inline_modules(code, filename)
    out = Path(out_dir)
    kernels = out / "kernels"
    kernels.mkdir(parents=True, exist_ok=True)
    files: List[str] = []
    for m in modules:
        if m["cuda_sources"]:
            cu = f"kernels/{m['name']}.cu"
            (out / cu).write_text(f"// {m['name']}: load_inline's cuda_sources (line {m['line']} of the "
                                  f"candidate)\n{_CUDA_PRELUDE}" + "\n".join(m["cuda_sources"]) + "\n")
            files.append(cu)
            cpp = f"kernels/{m['name']}_binding.cpp"
        else:
            cpp = f"kernels/{m['name']}.cpp"  # the C++ is the kernel: kernel flags, OpenMP
        (out / cpp).write_text(_binding_source(m))
        files.append(cpp)
    (out / "model_new.py").write_text(_with_prelude(code, _prelude(modules)))
    files.append("model_new.py")
    return {"format": "kernelbench",
            "built_with": "cuda-agent build (load_inline replaced by the module built ahead)",
            "modules": [{"name": m["name"], "line": m["line"], "functions": sorted(m["functions"] or []),
                         "cuda": bool(m["cuda_sources"]), "ignored_flags": m["ignored_flags"]}
                        for m in modules],
            "files": files}


def convert_file(path, out_dir) -> dict:
    path = Path(path)
    try:
        code = path.read_text()
    except OSError as e:
        raise ConversionError(f"{path}: cannot read ({e.strerror}); check the path") from e
    try:
        return convert(code, out_dir, str(path))
    except ConversionError as e:
        raise ConversionError(f"{path}: {e}") from e


def generation_path(generations, task_id: str) -> Optional[Path]:
    """A task's generation: <dir>/<task>.py, else <dir>/<task>/model_new.py."""
    root = Path(generations)
    for candidate in (root / f"{task_id}.py", root / task_id / "model_new.py"):
        if candidate.is_file():
            return candidate
    return None


def _demo_steps(files: List[str]) -> List[dict]:
    steps = [{"thought": f"Write {rel}, converted from the KernelBench-format candidate.",
              "tool": "Write", "arguments": {"file_path": rel, "content": {"$file": rel}}}
             for rel in files]
    for command, why in (("build", "Build the inline modules with cuda-agent's build."),
                         ("verify", "Check correctness against the reference."),
                         ("profile", "Measure against eager and torch.compile.")):
        steps.append({"thought": why, "tool": "Bash", "arguments": {"command": command}})
    return steps


def write_demonstrations(generations, task_ids: List[str], out_root, device: str,
                         progress=None) -> Dict[str, dict]:
    """For each task, a demonstration under out_root/<task>/ that writes the converted candidate
    into the episode's workdir and builds, verifies and profiles it, so `cuda-agent eval` judges
    a directory of generations through the whole pipeline. A generation that cannot be converted
    is still judged: its demonstration writes a kernel whose build fails with the reason, so it
    counts as a candidate that did not compile, as it would in KernelBench. A task without a
    generation is a usage error (TaskError): nothing is left out silently."""
    from .task import TaskError
    say = progress or (lambda _m: None)
    missing = [t for t in task_ids if generation_path(generations, t) is None]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise TaskError(f"--kernelbench-dir {generations}: no generation for {shown} (looked for "
                        "<dir>/<task>.py and <dir>/<task>/model_new.py); pass --tasks to evaluate a subset")
    results: Dict[str, dict] = {}
    for task_id in task_ids:
        source = generation_path(generations, task_id)
        demo_dir = Path(out_root) / task_id
        if demo_dir.exists():
            import shutil
            shutil.rmtree(demo_dir)
        try:
            record = convert_file(source, demo_dir)
            results[task_id] = {"ok": True, "source": str(source), **record}
            final = f"KernelBench-format candidate {source.name}, built by cuda-agent."
        except ConversionError as e:
            demo_dir.mkdir(parents=True, exist_ok=True)
            (demo_dir / "kernels").mkdir(exist_ok=True)
            rel = "kernels/kernelbench_not_converted." + ("cu" if device == "cuda" else "cpp")
            reason = str(e).replace("\\", "/").replace('"', "'")
            (demo_dir / rel).write_text(f'#error "cuda-agent: the KernelBench-format candidate was not '
                                        f'converted: {reason}"\n')
            results[task_id] = {"ok": False, "source": str(source), "error": str(e), "files": [rel]}
            final = f"KernelBench-format candidate {source.name} could not be converted: {e}"
            say(f"not converted: {task_id}: {e}")
        demo = {"task_id": task_id, "device": device, "steps": _demo_steps(results[task_id]["files"]),
                "final": final}
        (demo_dir / "demo.json").write_text(json.dumps(demo, indent=1) + "\n")
    return results
