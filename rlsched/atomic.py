"""The one way rlsched writes a file (results, records, studies, checkpoints, plots, deploy configs),
and what a path on disk is, said the same way for every file it reads or writes.

An input that exists but is not a regular file is named for what it is (``input_file``): "not
found" for a named pipe that exists sent users looking for a typo.

Every output path is checked first (``check_output``): it must be absent or a regular file.
A folder, a named pipe, a device node or a socket is refused with ``OutputPathError`` naming
the flag and the path; ``os.replace`` used to put a regular file in its place (as root, in a
container, ``--records /dev/sda`` replaced the device node).

A symbolic link is refused too, deliberately, rather than written through to its target:
output folders such as ``/tmp`` are shared, and a link planted there by another user would
make rlsched (often root in a container) replace whatever file it points to. Refusing costs a
user who meant the link one retyped path (the message names the target); writing through
would cost nothing only when every link is trusted. A symbolic link to a *folder* above the
file is followed as usual (``results -> /big/disk/results``): only the last name is checked.

``atomic_open`` writes whole files (a temporary file beside the target, ``os.replace``), and
``replace_folder`` whole folders (checkpoints: a folder, or nothing, at the path; never a link);
``stream_open`` writes a file row by row for outputs that must keep what they have on Ctrl-C
(loadgen's records) or that append (logs). Both run the same check; ``stream_open`` also opens
with ``O_NOFOLLOW`` and checks what it opened, so nothing put there in between is written to.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from rlsched.errors import ConfigError, OutputPathError

_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISLNK, "a symbolic link"))


def kind(mode: int) -> str:
    """``st_mode`` in words: ``a regular file``, ``a folder``, ``a named pipe (FIFO)``, ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def input_file(path: str | Path, what: str, where: str | None = None, hint: str = "") -> Path:
    """``path`` when it is a regular file (through symbolic links: reading through one is harmless);
    else a ``ConfigError`` naming ``where`` (default: the path) that says ``WHAT not found`` (``hint``
    appended) when nothing is there, and what is there otherwise."""
    p = Path(path)
    where = str(path) if where is None else where
    subject = what if where == str(p) else f"{what} {p}"
    if "\0" in str(p):  # os.stat raises ValueError on it: a path no file system holds (a YAML "\0" escape)
        raise ConfigError(where.replace("\0", "\\0"), f"{what} name holds a NUL character (\\0)")
    try:
        mode = p.stat().st_mode
    except OSError:
        if p.is_symlink():
            raise ConfigError(where, f"{subject} is a symbolic link to {os.readlink(p)}, which does not "
                                     "exist") from None
        raise ConfigError(where, f"{what} not found{hint}") from None
    if not stat.S_ISREG(mode):
        raise ConfigError(where, f"{subject} is {kind(mode)}, not a regular file")
    return p


def check_output(path: str | Path, flag: str | None = None) -> Path:
    """``path`` as a file rlsched may replace: absent, or a regular file that is not a symbolic
    link; else ``OutputPathError`` naming ``flag`` (``output`` when None: a library call) and the
    path (see the module docstring)."""
    out = Path(path)
    try:
        mode = os.lstat(out).st_mode
    except (FileNotFoundError, NotADirectoryError):  # nothing there (a folder above it missing: the caller's check)
        return out
    except OSError as exc:
        raise OutputPathError(flag, out, f"cannot be examined ({exc.strerror or exc})") from None
    if stat.S_ISREG(mode):
        return out
    if stat.S_ISLNK(mode):
        raise OutputPathError(flag, out, f"is a symbolic link (to {os.readlink(out)}); rlsched does not write "
                                         "through links: name the file itself")
    if stat.S_ISDIR(mode):
        raise OutputPathError(flag, out, "is a folder; name the file to write")
    raise OutputPathError(flag, out, f"is {kind(mode)}, not a regular file; rlsched writes only regular files")


@contextlib.contextmanager
def atomic_open(path: str | Path, mode: str = "w", flag: str | None = None, **kwargs: Any) -> Iterator[IO[Any]]:
    """``open(path, mode)`` on a temporary file in ``path``'s folder that replaces ``path`` only
    when the block ends without an error (``os.replace``): a failure, a full disk or Ctrl-C
    leaves the previous file whole, never a part of the new one. ``path`` is checked
    (``check_output``) before the temporary file is made and again before it replaces ``path``."""
    path = check_output(path, flag)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, mode, **kwargs) as fh:
            yield fh
        check_output(path, flag)  # something else may have been put there meanwhile
        os.chmod(tmp, file_mode(path))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_atomic(path: str | Path, data: str | bytes, flag: str | None = None) -> None:
    """``data`` written to ``path`` through ``atomic_open``: readers see the old file or the new one."""
    with atomic_open(path, "wb", flag) as fh:
        fh.write(data.encode() if isinstance(data, str) else data)


def stream_open(path: str | Path, mode: str = "w", flag: str | None = None, **kwargs: Any) -> IO[Any]:
    """``open(path, mode)`` in place (``mode`` ``w``/``a``, text or binary), for a file written
    as it goes; ``path`` is checked like ``atomic_open``'s and opened without following a link
    and without blocking on a pipe, then checked again by what was opened."""
    path = check_output(path, flag)
    if mode.strip("bt") not in ("w", "a"):
        raise ValueError(f"stream_open writes ('w' or 'a', text or binary), not mode {mode!r}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags | (os.O_APPEND if "a" in mode else 0), 0o666)
    except OSError as exc:  # ELOOP: a link put there since the check; ENXIO: a pipe without a reader
        check_output(path, flag)
        raise OutputPathError(flag, path, f"cannot be opened for writing ({exc.strerror or exc})") from None
    try:
        found = os.fstat(fd).st_mode
        if not stat.S_ISREG(found):
            raise OutputPathError(flag, path, f"is {kind(found)}, not a regular file; rlsched writes only "
                                              "regular files")
        os.set_blocking(fd, True)
        if "w" in mode:
            os.ftruncate(fd, 0)  # only now: a truncating open would have emptied whatever was there
        return os.fdopen(fd, mode, **kwargs)
    except BaseException:
        os.close(fd)
        raise


def check_output_folder(path: str | Path, flag: str | None = None) -> Path:
    """``path`` as a folder rlsched may replace whole (``replace_folder``): absent, or a folder
    that is not a symbolic link (a link would be swapped for a folder, its target left as it
    was); else ``OutputPathError``."""
    out = Path(path)
    try:
        mode = os.lstat(out).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return out
    if stat.S_ISDIR(mode):
        return out
    if stat.S_ISLNK(mode):
        raise OutputPathError(flag, out, f"is a symbolic link (to {os.readlink(out)}); rlsched replaces this folder "
                                         "whole and does not replace links: name the folder itself")
    raise OutputPathError(flag, out, f"is {'a file' if stat.S_ISREG(mode) else kind(mode)}; name a folder")


def replace_folder(src: Path, dst: Path, copy: bool = False, flag: str | None = None) -> None:
    """Put folder ``src`` at ``dst`` (``copy``: a copy of it), replacing what was there
    (``check_output_folder``: a folder or nothing).

    ``os.replace`` cannot replace a non-empty folder, so the old one is first renamed aside:
    at every instant ``dst`` is the old folder, the new one, or (between two renames) absent,
    never a half-written mix."""
    check_output_folder(dst, flag)
    if copy:
        tmp = Path(tempfile.mkdtemp(prefix=f".{dst.name}.", dir=dst.parent))
        tmp.rmdir()
        try:
            shutil.copytree(src, tmp)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        src = tmp
    old = None
    if dst.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{dst.name}.old.", dir=dst.parent))
        old.rmdir()
        os.replace(dst, old)
    os.replace(src, dst)
    if old is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(old)


def file_mode(path: Path) -> int:
    """The mode a new file gets (the existing file's, else 0o666 less the umask): ``mkstemp``
    creates its files 0o600, which a plain ``open`` would not."""
    with contextlib.suppress(OSError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


__all__ = ["atomic_open", "check_output", "check_output_folder", "file_mode", "input_file", "kind", "replace_folder",
           "stream_open", "write_atomic"]
