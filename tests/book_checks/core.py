"""Shared machinery of the book audit: the inventory of glue roles, comparing sentences, audited entries, page checks.

One verdict rule: a ratio's outcome comes from :func:`xlalab.bench.ratio_verdict` on the printed interval (no verdict
from fewer than :data:`xlalab.bench.MIN_VERDICT_SAMPLES` samples); counts and sizes from exact comparison of the
printed values. Entries encode no threshold of a chapter's own.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Literal

from xlalab.bench import ratio_verdict
from xlalab.book import GLUE_HELPERS, INTERVAL_SUFFIXES

REPO = Path(__file__).resolve().parents[2]
BOOK = REPO / "book"
ROLE = re.compile(r"\{glue(?::\w*)?\}`([^`]+)`|```\{glue(?::\w*)?\}\s+([\w-]+)")
#: A glued name in code: myst_nb's ``glue("name", ...)`` or xlalab.book's ``book.glue("name", ...)`` and
#: ``book.glue_interval("name", ...)`` (which glues the name with each of book.INTERVAL_SUFFIXES).
GLUE_CALL = re.compile(r"\b(glue|glue_interval)\(\s*(f?)\"([^\"]+)\"")
GLUE_VALUES = re.compile(r"\bglue_values\(")
NUM = r"(-?\d[\d,]*\.?\d*)"
CI3 = r"\[" + NUM + ", " + NUM + r"\]"
assert set(GLUE_HELPERS) == {"glue", "glue_values", "glue_interval"}, "teach GLUE_CALL the new helper"


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _f(*names: str) -> Callable[[re.Match], dict]:
    return lambda m: {k: _num(m.group(i + 1)) for i, k in enumerate(names)}


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


def _call_text(src: str, start: int) -> str:
    """The text of the call whose opening parenthesis is the first one at or after ``start``."""
    depth, j = 0, src.index("(", start)
    k = j
    while k < len(src):
        depth += src[k] == "("
        depth -= src[k] == ")"
        k += 1
        if depth == 0:
            break
    return src[start:k]


def glue_calls(src: str) -> list[tuple[str, str, bool]]:
    """Every glued name in a code cell's source: ``(name pattern, the call's text, is an f-string)``."""
    out = []
    for m in GLUE_CALL.finditer(src):
        call = _call_text(src, m.start())
        names = [m.group(3)] if m.group(1) == "glue" else [m.group(3) + s for s in INTERVAL_SUFFIXES]
        out += [(n, call, bool(m.group(2))) for n in names]
    for m in GLUE_VALUES.finditer(src):
        call = _call_text(src, m.start())
        out += [(n, call, False) for n in re.findall(r"[(,]\s*([a-z][a-z0-9_]*)\s*=(?!=)", call)]
        out += [(n, call, False) for n in re.findall(r"\*\*\{\s*\"([a-z][a-z0-9_]*)\"", call)]
    return out


def glued_names(path: Path) -> list[re.Pattern]:
    """Every name a chapter's code glues, as a pattern (an f-string's ``{...}`` parts match any text)."""
    out = []
    for c in cells(path):
        if c["cell_type"] == "code":
            src = "".join(c["source"])
            for name, _call, is_f in glue_calls(src):
                parts = re.split(r"\{[^}]*\}", name) if is_f else [name]
                out.append(re.compile("^" + ".+".join(map(re.escape, parts)) + "$"))
            if re.search(r"glue\(\s*[a-z_]+\s*,", src):      # glue(k, v) over a dict of quoted names
                out += [re.compile("^" + re.escape(n) + "$") for n in re.findall(r"\"([a-z][a-z0-9_]*)\"", src)]
    return out


def sentences(markdown: str) -> list[str]:
    text = re.sub(r"\s+", " ", markdown)
    return re.split(r"(?<=[.!?])\s+(?=[A-Z*#\-])", text)


@dataclass
class Use:
    """One glued value where the prose uses it."""

    chapter: str
    name: str
    sentence: str


def inventory() -> list[Use]:
    """Every glue role of the book's chapters: chapter, glue name, the sentence that uses it."""
    uses = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for c in cells(path):
            if c["cell_type"] != "markdown":
                continue
            for sentence in sentences("".join(c["source"])):
                for a, b in ROLE.findall(sentence):
                    uses.append(Use(path.stem, (a or b).split(":")[0], sentence))
    return uses


# A comparison typed in a sentence that also holds a glued value. 'above'/'below' count only next to a bound, a roof,
# a ratio, a peak or 1 (elsewhere they point at a cell: "the table above"); 'larger', 'smaller', 'higher', 'lower'
# only with 'than'.
TYPED = re.compile(r"\b(faster|slower|exceeds?|beats?|(?:larger|smaller|higher|lower|wider|narrower|more|less|fewer)"
                   r" than|(?:above|below) (?:that |its |the |their )?(?:bound|roof|ratio|peak|range|target|1\b))")
#: Words that compare or state an outcome (a sentence with a glued value and one of these is a comparing sentence).
COMPARING = re.compile(r"\b(faster|slower|cannot tell|exceed\w*|beats?|outperform\w*|(?:larger|smaller|higher|lower|"
                       r"wider|narrower|more|less|fewer|greater) than|(?:above|below) (?:that |its |the |their )?"
                       r"(?:bound|roof|ratio|peak|range|target|floor|1\b)|as fast as|as long as|times as|×|"
                       r"not measurably|no measurable|indistinguishable|matche[sd]|agree[sd]?|the same as|"
                       r"equals?|speedup|slowdown)", re.I)
OUTCOME_NAME = re.compile(r"verdict|word|story|words")


def outcome_glues(path: Path) -> set[str]:
    """Names a chapter glues from a condition in code (an ``if`` in the call) or named as a verdict, word or story."""
    names = set()
    for c in cells(path):
        if c["cell_type"] == "code":
            for name, call, _ in glue_calls("".join(c["source"])):
                if re.search(r"\bif\b", call) or OUTCOME_NAME.search(name):
                    names.add(name)
    return names


@dataclass
class Comparing:
    """A sentence of a chapter's prose that compares, ranks or states an outcome beside a glued value."""

    chapter: str
    sentence: str
    names: set[str]
    why: str           # "word: <the comparison word>" or "glue: <the outcome glue>"


def _name_matches(pattern: str, name: str) -> bool:
    parts = re.split(r"\{[^}]*\}", pattern)
    return re.fullmatch(".+".join(map(re.escape, parts)), name) is not None


def comparing_sentences(chapter: str | None = None) -> list[Comparing]:
    """Every comparing sentence of the book (or of one chapter), generated from the chapters' Markdown."""
    out = []
    for path in sorted(BOOK.glob("*.ipynb")):
        if chapter is not None and path.stem != chapter:
            continue
        outcome = outcome_glues(path)
        for c in cells(path):
            if c["cell_type"] != "markdown":
                continue
            for s in sentences("".join(c["source"])):
                names = {(a or b).split(":")[0] for a, b in ROLE.findall(s)}
                if not names:
                    continue
                m = COMPARING.search(ROLE.sub(" GLUE ", s))
                hit = sorted(n for n in names if any(_name_matches(p, n) for p in outcome))
                if m or hit:
                    out.append(Comparing(path.stem, s, names, f"word: {m.group(0)}" if m else f"glue: {hit[0]}"))
    return out


def ci_word(lo: float, hi: float, n: int | None, above: str, below: str, neither: str) -> str:
    """The outcome an interval of a ratio allows, by the book's one rule (:func:`xlalab.bench.ratio_verdict`):
    ``above`` when it lies above 1 as printed, ``below`` under 1, else ``neither``; ``neither`` from fewer than
    ``MIN_VERDICT_SAMPLES`` samples."""
    return {"faster": above, "slower": below, "indistinguishable": neither}[ratio_verdict((lo, hi), n=n)]


@dataclass
class Entry:
    """An audited sentence: ``pattern`` finds it on the built chapter (prose only, or the whole page with
    ``whole_page``); ``values(m)`` reads its numbers; ``rule(values)`` is the outcome they give;
    ``said(m)`` is the outcome the page states; ``mutate(values)`` forces the values to the other side."""

    chapter: str
    glues: tuple[str, ...]
    pattern: str
    values: Callable[[re.Match], dict]
    rule: Callable[[dict], str]
    said: Callable[[re.Match], str]
    mutate: Callable[[dict], dict]
    whole_page: bool = False
    optional: str = ""          # why the sentence may be absent (another branch of the chapter), else required
    wrong_before: str = ""      # the review finding, where a reviewed build stated the wrong outcome
    sample: dict = field(default_factory=dict)   # values for the fast rule-flip test


def flip_ci(v: dict) -> dict:
    """The interval moved to the other side of 1 (above 1 when it was not, below 1 when it was), with enough samples."""
    lo, hi = (0.4, 0.8) if v["lo"] > 1 else (1.5, 2.5)
    return {**v, "lo": lo, "hi": hi, **({"n": 100} if "n" in v else {})}


@dataclass
class Page:
    """A built chapter as the checks read it: ``prose`` (text without code cells, glued values joined), ``text``
    (the whole page, outputs and tables included) and ``printed`` (each ``<pre>`` block, lines kept)."""

    prose: str
    text: str = ""
    printed: list[str] = field(default_factory=list)


@dataclass
class PageCheck:
    """A built-page check of one review finding: ``check(page)`` lists the problems it finds (empty: holds);
    ``reviewed`` is the page as the review read it (the quoted false text), on which the check must fail."""

    finding: str
    chapter: str
    check: Callable[[Page], list[str]]
    reviewed: Page


#: The part of a :class:`Page` a :class:`Rule` reads (``printed``: its blocks joined by newlines).
Field = Literal["prose", "text", "printed"]


@dataclass(frozen=True)
class Rule:
    """One plain text rule of a page check. ``require``: a problem (``message``) when ``pattern`` is not found in the
    page's ``field``; ``forbid``: a problem when it is. ``regex``: ``re.search(pattern, text, flags)``, else the plain
    substring test ``pattern in text`` (``flags`` then unused)."""

    kind: Literal["require", "forbid"]
    pattern: str
    message: str
    field: Field = "prose"
    regex: bool = True
    flags: int = 0

    def __post_init__(self) -> None:
        assert self.regex or not self.flags, "flags apply to a regex rule only"

    def found(self, page: Page) -> bool:
        """Whether the page's ``field`` holds ``pattern``."""
        text = "\n".join(page.printed) if self.field == "printed" else getattr(page, self.field)
        return re.search(self.pattern, text, self.flags) is not None if self.regex else self.pattern in text

    def problem(self, page: Page) -> str | None:
        """``message`` where the rule fails on the page, else None."""
        return self.message if self.found(page) == (self.kind == "forbid") else None


def require(pattern: str, message: str, field: Field = "prose", regex: bool = True, flags: int = 0) -> Rule:
    """A rule that fails (with ``message``) where ``pattern`` is missing from the page's ``field``."""
    return Rule("require", pattern, message, field, regex, flags)


def forbid(pattern: str, message: str, field: Field = "prose", regex: bool = True, flags: int = 0) -> Rule:
    """A rule that fails (with ``message``) where ``pattern`` is found in the page's ``field``."""
    return Rule("forbid", pattern, message, field, regex, flags)


@dataclass(frozen=True)
class TextRules:
    """A page check made only of text rules: calling it on a page lists the messages of the rules that fail, in
    order (empty: holds). ``doc`` says what the review finding asked for."""

    rules: tuple[Rule, ...]
    doc: str = ""

    def __call__(self, page: Page) -> list[str]:
        return [m for m in (r.problem(page) for r in self.rules) if m is not None]


def text_rules(*rules: Rule, doc: str = "") -> TextRules:
    """A :class:`PageCheck`'s ``check`` from plain text rules (:func:`require`, :func:`forbid`), checked in order."""
    return TextRules(rules, doc)


CHAPTER_MODULES = sorted(p.stem for p in BOOK.glob("*.ipynb"))
NOT_CHAPTERS = {"__init__", "core", "plumbing"}


def chapter_modules() -> list[ModuleType]:
    """Every audit module: ``tests/book_checks/<chapter>.py`` for each chapter, and any other module there with a
    ``CHAPTER`` (e.g. ``gpu_fusion.py`` for a chapter's GPU section), each holding the same four lists."""
    names = sorted(p.stem for p in Path(__file__).parent.glob("*.py") if p.stem not in NOT_CHAPTERS)
    missing = sorted(set(CHAPTER_MODULES) - set(names))
    assert not missing, f"chapters without an audit module in tests/book_checks/: {missing}"
    return [importlib.import_module(f"book_checks.{name}") for name in names]


def all_entries() -> list[Entry]:
    return [e for m in chapter_modules() for e in m.AUDIT]


def all_page_checks() -> list[PageCheck]:
    return [c for m in chapter_modules() for c in m.PAGE_CHECKS]
