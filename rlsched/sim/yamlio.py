"""Reading YAML config files with errors that name the file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlsched.errors import ConfigError


def read_yaml(path: Path) -> Any:
    """Parsed YAML; a syntax error becomes ``ConfigError('FILE:LINE', why)``."""
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(where, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
