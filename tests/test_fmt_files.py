"""xlalab.fmt (numbers as the course prints them) and xlalab.files (writes in one step): pure unit tests."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from xlalab import files, fmt


@pytest.mark.parametrize("x, text", [(6.0, "6"), (6, "6"), (2.5, "2.5"), (0.0, "0"), (1 / 3, "0.333333"),
                                     (1234567.0, "1.23457e+06"), (-1.5, "-1.5")])
def test_points(x, text):
    assert fmt.points(x) == text


@pytest.mark.parametrize("n, text", [(None, "? B"), (0, "0 B"), (512, "512 B"), (1023, "1023 B"), (1024, "1 KiB"),
                                     (1536, "1.5 KiB"), (4 * 2**20, "4 MiB"), (123456789, "118 MiB"),
                                     (3 * 2**30, "3 GiB"), (5000 * 2**30, "5e+03 GiB")])
def test_byte_size(n, text):
    assert fmt.byte_size(n) == text


def test_a_drawn_graph_prints_each_kernels_bytes_as_byte_size():
    """The HLO graph's labels use this one format (review s5: an import alias was all this test checked)."""
    from html import unescape

    from xlalab import hlo

    from helpers.hlo import load

    text = load("tf_cpu_step_after_optimizations.txt")
    kernels = hlo.summary(text)["kernel_list"]
    source = unescape(hlo.draw(text, format="dot").source)
    assert any(k["bytes"] % 1024 for k in kernels if k["bytes"] > 1024), "no kernel whose size shows decimals"
    for k in kernels:
        assert f"moves {fmt.byte_size(k['bytes'])}" in source, (k["name"], k["bytes"])


@pytest.mark.parametrize("n, text", [(2**29, "512 MiB"), (64 * 2**20, "64 MiB"), (2**30, "1 GiB"),
                                     (3 * 2**30, "3 GiB"), (3 * 2**29, "1.5 GiB")])
def test_limit_size(n, text):
    assert fmt.limit_size(n) == text


@pytest.mark.parametrize("s, text", [(1.5, "1.5 s"), (1.0, "1 s"), (123.4, "123 s"), (0.0123, "12.3 ms"),
                                     (1e-3, "1 ms"), (2.5e-5, "25 us"), (0.0, "0 us")])
def test_duration(s, text):
    assert fmt.duration(s) == text


def test_atomic_write_bytes_and_text(tmp_path):
    path = tmp_path / "a.json"
    files.atomic_write(path, b"one")
    assert path.read_bytes() == b"one"
    files.atomic_write(path, "twö")
    assert path.read_bytes() == "twö".encode()
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"], "a temporary file was left behind"


def test_atomic_write_mode_less_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        files.atomic_write(tmp_path / "private", b"x", 0o600)
        files.atomic_write(tmp_path / "shared", b"x", 0o644)
        files.atomic_write(tmp_path / "default", b"x")
    finally:
        os.umask(old)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"private": 0o600, "shared": 0o644, "default": 0o644}


def test_atomic_write_replaces_a_planted_link_not_its_target(tmp_path):
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "out.csv"
    link.symlink_to(target)
    files.atomic_write(link, "new")
    assert not link.is_symlink() and link.read_text() == "new"
    assert target.read_text() == "keep"


def test_atomic_write_keeps_the_old_file_when_the_write_fails(tmp_path, monkeypatch):
    path = tmp_path / "book.csv"
    path.write_text("old")

    def refuse(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(OSError, match="disk full"):
        files.atomic_write(path, "new")
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book.csv"], "the temporary file was not removed"


def test_atomic_write_accepts_a_str_path(tmp_path: Path):
    files.atomic_write(str(tmp_path / "s.txt"), "s")
    assert (tmp_path / "s.txt").read_text() == "s"
