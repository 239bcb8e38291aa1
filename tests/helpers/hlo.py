"""The recorded HLO modules of ``tests/data/hlo/`` (sources in its README), read by name."""

from __future__ import annotations

from pathlib import Path

CORPUS = Path(__file__).resolve().parent.parent / "data" / "hlo"


def load(name: str) -> str:
    """The text of the recorded module ``name`` (a file of :data:`CORPUS`)."""
    return (CORPUS / name).read_text()
