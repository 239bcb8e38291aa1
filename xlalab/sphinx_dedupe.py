"""Sphinx extension: remove repeated inline ``<script>`` blocks from the built HTML pages.

With Sphinx 7.4 and the Jupyter Book 1.x theme stack, the inline configuration scripts of sphinx-thebe and
sphinx-togglebutton reach every page twice. sphinx-thebe's declares ``const THEBE_JS_URL``, so the second
copy throws ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared`` on every page, which the
browser test (tests/test_book.py) counts as a JavaScript error. After the build, this extension keeps the
first copy of each identical attribute-less inline script of a page and drops the later ones.

Enable it in ``_config.yml``: ``sphinx: extra_extensions: [xlalab.sphinx_dedupe]``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

_INLINE_SCRIPT = re.compile(r"[ \t]*<script>(?P<body>.*?)</script>\n?", re.S)


def dedupe_inline_scripts(html: str) -> str:
    """``html`` with every repeated, identical ``<script>BODY</script>`` after the first removed."""
    seen: set[str] = set()

    def keep_first(match: re.Match) -> str:
        body = match.group("body")
        if body in seen:
            return ""
        seen.add(body)
        return match.group(0)

    return _INLINE_SCRIPT.sub(keep_first, html)


def dedupe_tree(outdir: str | Path) -> int:
    """Apply :func:`dedupe_inline_scripts` to every ``.html`` file under ``outdir``; return files changed."""
    changed = 0
    for page in Path(outdir).rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        new = dedupe_inline_scripts(text)
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed += 1
    return changed


def _on_build_finished(app: Any, exception: Exception | None) -> None:
    if exception is None and getattr(app.builder, "format", "") == "html":
        dedupe_tree(app.outdir)


def setup(app: Any) -> dict[str, Any]:
    """Register the post-build pass."""
    app.connect("build-finished", _on_build_finished)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
