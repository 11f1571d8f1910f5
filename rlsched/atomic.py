"""Files written whole or not at all: results, studies, checkpoints' metadata, deploy configs."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` on a temporary file in ``path``'s folder that replaces ``path`` only
    when the block ends without an error (``os.replace``): a failure, a full disk or Ctrl-C
    leaves the previous file whole, never a part of the new one."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        os.chmod(tmp, file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | Path, data: str | bytes) -> None:
    """``data`` written to ``path`` through ``atomic_open``: readers see the old file or the new one."""
    with atomic_open(path, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def file_mode(path: Path) -> int:
    """The mode a new file gets (the existing file's, else 0o666 less the umask): ``mkstemp``
    creates its files 0o600, which a plain ``open`` would not."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


__all__ = ["atomic_open", "file_mode", "write_atomic"]
