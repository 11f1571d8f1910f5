"""Reading YAML config files with errors that name the file and line."""

from __future__ import annotations

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
