"""Files written in one step: a reader (or a crash) sees the old content or the new, never part of it."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | Path, data: bytes | str, mode: int = 0o666) -> None:
    """Replace ``path`` with ``data`` (a str is written as UTF-8) by renaming a finished file over it.

    The data goes to a new hidden file beside ``path`` (``.<name>.<pid>.<random>.tmp``, created exclusively, so
    never through an existing file or link, with ``mode`` less the umask, as :func:`open` does with 0o666),
    which then replaces ``path`` (:func:`os.replace`). The hidden file is removed when the write fails.
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
