"""Sphinx extension: drop duplicate ``<script>`` entries from each HTML page.

With Sphinx 7.4, an inline script that an extension adds with ``app.add_js_file(None, body=...)`` after
the builder has started (sphinx-thebe does so in ``env-before-read-docs``) can reach the page twice.
sphinx-thebe's body declares ``const THEBE_JS_URL``; the second copy throws
``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared`` in every page, which the browser
test counts as a JavaScript error. Enable with ``sphinx: extra_extensions: [xlalab.sphinx_dedupe]``.
"""

from __future__ import annotations

from typing import Any


def _dedupe_scripts(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen: list[tuple] = []
    kept = []
    for js in scripts:
        key = (str(getattr(js, "filename", js)), tuple(sorted(getattr(js, "attributes", {}).items())))
        if key in seen:
            continue
        seen.append(key)
        kept.append(js)
    scripts[:] = kept


def setup(app: Any) -> dict[str, Any]:
    """Register the page-context hook (runs after other extensions' hooks)."""
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
