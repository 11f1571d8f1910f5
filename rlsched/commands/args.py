"""What every subcommand module shares: the registry decorator and argument types.

Subcommands register with ``command``; ``rlsched.cli`` builds the parser from the
registry, so the command modules never import the CLI (no import circle).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlsched.atomic import atomic_open, check_output, check_output_folder, file_mode, kind, stream_open, write_atomic  # noqa: F401 (re-exported)
from rlsched.errors import ConfigError, OutputPathError

Handler = Callable[[argparse.Namespace], int]
COMMANDS: dict[str, tuple[Callable[[argparse.ArgumentParser], None], str]] = {}
"""Subcommand name -> (its argument builder, its help line), in registration order."""


def command(name: str, help: str) -> Callable[[Callable[[argparse.ArgumentParser], None]], Any]:
    def deco(add_args: Callable[[argparse.ArgumentParser], None]) -> Callable[[argparse.ArgumentParser], None]:
        COMMANDS[name] = (add_args, help)
        return add_args
    return deco


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """argparse's defaults in the help, each said once: not where the help text already says its
    default, not for a default of nothing (None, an empty string) or an on/off flag's False; the
    examples epilog kept one command per line."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if "(default" in text or action.default in (None, "", argparse.SUPPRESS) or action.nargs == 0:
            return text
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


class _Renamed(argparse.Action):
    """A flag's old spelling: still accepted (for one release), with a note on stderr naming the new one."""

    def __init__(self, option_strings: list[str], dest: str, new: str = "", **kwargs: Any) -> None:
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"rlsched: note: {option_string} is renamed {self.new} (the old name goes in the next release)",
              file=sys.stderr)
        setattr(namespace, self.dest, values)


def renamed(p: argparse.ArgumentParser, new: argparse.Action, *old: str) -> argparse.Action:
    """Accept ``old`` spellings of the flag ``new`` (returned by ``add_argument``): one name per concept
    across the subcommands (docs/cli.md), the old names kept hidden from ``--help`` for one release."""
    for name in old:
        p.add_argument(name, dest=new.dest, type=new.type, action=_Renamed, new=new.option_strings[0],
                       default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    return new


def add_json(p: argparse.ArgumentParser) -> None:
    """``--json``: every command that reports prints its report as one JSON object when asked, and as
    lines for a person otherwise (``report``)."""
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def report(args: argparse.Namespace, obj: dict[str, Any], text: str) -> None:
    """``obj`` as JSON with ``--json``, else ``text``."""
    if args.json:
        print_json(obj)
    else:
        print(text)


def print_json(obj: Any) -> None:
    from rlsched.sim.metrics import json_safe

    print(json.dumps(json_safe(obj), default=_jsonable))


def _jsonable(obj: Any) -> Any:
    return str(obj)


# ------------------------------------------------------------------ output paths
# Every output of every command is checked here before the work starts (a typo in --out must
# not cost a finished run) and written through rlsched.atomic, whose check_output refuses a
# path that is not a regular file (a folder, a named pipe, a device, a socket, a symbolic link).


def _probe_writable(folder: Path, flag: str) -> None:
    try:
        fd, name = tempfile.mkstemp(prefix=".rlsched-probe-", dir=folder)
    except OSError as exc:
        raise ConfigError(flag, f"cannot write in folder {folder}: {exc.strerror or exc}") from None
    os.close(fd)
    os.unlink(name)


def _existing_ancestor(path: Path, flag: str) -> Path:
    """The nearest folder above ``path`` that exists; a file met on the way is an error."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise ConfigError(flag, f"{parent} is a file, not a folder")
            return parent
    return Path("/")


def check_out_file(path: str | Path, flag: str, make_parents: bool = False) -> Path:
    """``path`` as a file rlsched may write: absent or a regular file (``rlsched.atomic.check_output``),
    its folder writable. The folder must exist unless ``make_parents`` (then it is created now,
    before the work)."""
    out = check_output(path, flag)
    parent = out.parent
    if not parent.is_dir():
        if parent.exists():
            raise ConfigError(flag, f"{parent} is a file, not a folder")
        if not make_parents:
            raise ConfigError(flag, f"folder {parent} does not exist")
        _existing_ancestor(out, flag)
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(flag, f"cannot create folder {parent}: {exc.strerror or exc}") from None
    _probe_writable(parent, flag)
    return out


def check_out_dir(path: str | Path, flag: str, files: tuple[str, ...] = (), whole: bool = False) -> Path:
    """``path`` as a folder rlsched may create or write into: a folder (a symbolic link to one
    too, unless ``whole``: a folder replaced whole, ``rlsched.atomic.replace_folder``) or absent,
    writable (or creatable under a writable folder), and each of ``files`` in it absent or a
    regular file (``check_output``). Nothing is created here."""
    out = check_output_folder(path, flag) if whole else Path(path)
    if out.exists() and not out.is_dir():
        what = "a file" if out.is_file() else kind(out.stat().st_mode)
        raise OutputPathError(flag, out, f"is {what}; name a folder")
    if not out.exists() and out.is_symlink():
        raise OutputPathError(flag, out, f"is a symbolic link to {os.readlink(out)}, which does not exist")
    _probe_writable(out if out.is_dir() else _existing_ancestor(out, flag), flag)
    for name in files:
        check_output(out / name, flag)
    return out


def existing_outputs(folder: Path, files: tuple[str, ...]) -> list[Path]:
    """The files of ``files`` already in ``folder``: what a command is about to replace."""
    return [folder / name for name in files if (folder / name).exists()]
