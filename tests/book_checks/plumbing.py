"""How much of a chapter's visible code is the book's plumbing rather than teaching (issue 39, item 5).

A chapter's visible code is its code cells not tagged ``remove-cell``, ``remove-input``, ``hide-input`` or
``hide-cell`` (collapsed cells stay above their numbers, one click away, but are not what a reader scrolls past).
Each simple statement is classified by its source lines:

- *glue*: a call of ``glue``, ``glue_values``, ``glue_interval`` (``myst_nb`` or ``xlalab.book``);
- *format*: ``display(...)``, ``Markdown(...)``, ``book.md_table(...)``, a table built from ``"|"`` strings;
- *prose*: a statement whose characters are mostly string literals (sentences chosen in code), or ``Text(...)``;
- *setup*: imports, ``plot.use_style()``, logger and warning settings, ``os.environ`` changes;
- *teaching*: everything else (TensorFlow, HLO, measurement, arithmetic, plots).

A compound statement's header line counts with its body's majority. The share is plumbing lines over all lines.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

HIDDEN_TAGS = {"remove-cell", "remove-input", "hide-input", "hide-cell"}
GLUE_FUNCS = {"glue", "glue_values", "glue_interval"}
FORMAT_FUNCS = {"display", "Markdown", "md_table", "HTML"}
SETUP_CALLS = re.compile(r"use_style|setLevel|filterwarnings|simplefilter|set_printoptions|chapter_setup")


@dataclass
class Share:
    """Visible code lines of one chapter by kind."""

    chapter: str
    lines: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("teaching", "glue", "format", "prose", "setup"), 0))

    @property
    def total(self) -> int:
        return sum(self.lines.values())

    @property
    def plumbing(self) -> int:
        return self.total - self.lines["teaching"]

    @property
    def share(self) -> float:
        return self.plumbing / self.total if self.total else 0.0


def _called(node: ast.AST) -> set[str]:
    names = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            names.add(f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else "")
    return names


def _string_chars(node: ast.AST) -> int:
    return sum(len(n.value) for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str))


def classify(stmt: ast.stmt, source: str) -> str:
    """The kind of one simple statement (see the module docstring)."""
    if isinstance(stmt, (ast.Import, ast.ImportFrom)):
        return "setup"
    text = ast.get_source_segment(source, stmt) or ""
    called = _called(stmt)
    top = stmt.value if isinstance(stmt, ast.Expr) else None
    if isinstance(top, ast.Call):
        f = top.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in GLUE_FUNCS:
            return "glue"
        if name in FORMAT_FUNCS:
            return "format"
        if SETUP_CALLS.search(name):
            return "setup"
    if called & GLUE_FUNCS:
        return "glue"
    if "os.environ" in text:
        return "setup"
    if called & FORMAT_FUNCS or re.search(r"[\"']\|", text) or "---|" in text:
        return "format"
    code_chars = len(re.sub(r"\s+", "", text))
    if "Text" in called or (code_chars and _string_chars(stmt) > 0.5 * code_chars):
        return "prose"
    return "teaching"


def _walk(body: list[ast.stmt], source: str, counts: dict[str, int]) -> None:
    for stmt in body:
        children = [b for b in (getattr(stmt, "body", None), getattr(stmt, "orelse", None),
                                getattr(stmt, "finalbody", None)) if isinstance(b, list) and b]
        handlers = getattr(stmt, "handlers", None) or []
        children += [h.body for h in handlers]
        if children and not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            inner: dict[str, int] = dict.fromkeys(counts, 0)
            for b in children:
                _walk(b, source, inner)
            for k, v in inner.items():
                counts[k] += v
            body_lines = sum(inner.values())
            own = (stmt.end_lineno or stmt.lineno) - stmt.lineno + 1 - body_lines
            counts[max(inner, key=lambda k: inner[k])] += max(own, 1)
        else:
            kind = classify(stmt, source)
            if isinstance(stmt, ast.ClassDef) and stmt.name == "Text":
                kind = "prose"
            counts[kind] += (stmt.end_lineno or stmt.lineno) - stmt.lineno + 1


def visible_cells(path: Path) -> list[str]:
    """The source of each visible code cell of a notebook."""
    out = []
    for c in json.loads(path.read_text())["cells"]:
        if c["cell_type"] == "code" and not HIDDEN_TAGS & set(c.get("metadata", {}).get("tags", [])):
            out.append("".join(c["source"]))
    return out


def share(path: Path) -> Share:
    """The plumbing share of a chapter's visible code."""
    result = Share(path.stem)
    for src in visible_cells(path):
        src = "\n".join("pass" if re.match(r"\s*[%!]", ln) else ln for ln in src.splitlines())
        _walk(ast.parse(src).body, src, result.lines)
    return result
