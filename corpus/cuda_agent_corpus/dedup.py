"""AST-similarity deduplication against a reference set (KernelBench for Ops-6K: a candidate
more than 0.9 similar to a benchmark task is dropped).

A program becomes a sequence of tokens by a pre-order walk of its AST: node kinds, and the
attribute and function names called (the operators), but not variable names, docstrings or
constant values, so renaming or resizing does not make a task new. Similarity is
difflib's ratio of two sequences (2 * matches / total length), in [0, 1].
"""
from __future__ import annotations

import ast
import difflib
from collections import Counter
from pathlib import Path
from typing import Iterable, List, Optional, Tuple


def ast_tokens(code: str) -> List[str]:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return []
    tokens: List[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None), ast.Constant) \
                and isinstance(node.value.value, str):
            continue  # docstrings
        if isinstance(node, (ast.Load, ast.Store, ast.Del)):
            continue
        kind = type(node).__name__
        if isinstance(node, ast.Attribute):
            tokens.append(f"{kind}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in ("torch", "nn", "F"):
            tokens.append(f"{kind}.{node.id}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            continue
        else:
            tokens.append(kind)
    return tokens


def similarity(a: List[str], b: List[str]) -> float:
    if not a and not b:
        return 1.0
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


class Reference:
    """Token sequences of reference programs, with a cheap upper bound to skip most pairs."""

    def __init__(self):
        self.items: List[Tuple[str, List[str], Counter]] = []

    def add(self, name: str, code: str) -> None:
        tokens = ast_tokens(code)
        self.items.append((name, tokens, Counter(tokens)))

    def add_dir(self, directory) -> int:
        count = 0
        for path in sorted(Path(directory).rglob("*.py")):
            self.add(str(path), path.read_text(errors="replace"))
            count += 1
        return count

    def most_similar(self, code: str, threshold: float = 0.0) -> Tuple[Optional[str], float]:
        """(name, similarity) of the closest reference whose similarity may reach threshold."""
        tokens = ast_tokens(code)
        counts = Counter(tokens)
        best_name, best = None, 0.0
        for name, ref_tokens, ref_counts in self.items:
            total = len(tokens) + len(ref_tokens)
            if total == 0:
                continue
            bound = 2.0 * sum((counts & ref_counts).values()) / total  # >= the real ratio
            if bound < max(threshold, best):
                continue
            s = similarity(tokens, ref_tokens)
            if s > best:
                best_name, best = name, s
        return best_name, best

    def __len__(self) -> int:
        return len(self.items)


def is_duplicate(reference: Reference, code: str, threshold: float) -> Tuple[bool, Optional[str], float]:
    name, score = reference.most_similar(code, threshold)
    return score > threshold, name, score


def read_references(paths: Iterable) -> Reference:
    ref = Reference()
    for p in paths:
        p = Path(p)
        if p.is_dir():
            ref.add_dir(p)
        elif p.is_file():
            ref.add(str(p), p.read_text(errors="replace"))
    return ref
