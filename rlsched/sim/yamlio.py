"""Reading YAML config files with errors that name the file and line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rlsched.errors import ConfigError


def read_yaml(path: Path) -> Any:
    """Parsed YAML (UTF-8, BOM allowed); a syntax error becomes ``ConfigError('FILE:LINE', why)``."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(str(path), "not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(where, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None


def key_lines(text: str) -> Callable[[tuple[Any, ...]], int | None]:
    """``loc -> line``: the 1-based line of a key path (``("mix", 0, "height")``) in YAML ``text``,
    or of its deepest existing parent; None when the text does not compose."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        root = None

    def line_of(loc: tuple[Any, ...]) -> int | None:
        node, line = root, None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = next((kv for kv in node.value if getattr(kv[0], "value", None) == str(part)), None)
                if match is None:
                    break
                line, node = match[0].start_mark.line + 1, match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                break
        return line if line is not None or root is None else root.start_mark.line + 1

    return line_of
