"""Reading YAML config files with errors that name the file and line.

Every scenario, profile and agent file goes through ``read_yaml``, a bounded reader:
a file over ``MAX_YAML_BYTES``, nested deeper than ``MAX_YAML_DEPTH``, expanding
(aliases counted at every use) to more than ``MAX_YAML_NODES`` nodes, holding a
recursive alias, or naming a key twice in one mapping is a ``ConfigError`` naming the
file and line. A duplicate key is refused because YAML keeps only the last value: a
second ``rate_rps`` would otherwise silently replace the first.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rlsched.errors import ConfigError

MAX_YAML_BYTES = 16 << 20
"""Largest config file read (16 MiB; the shipped ones are a few KiB)."""
MAX_YAML_DEPTH = 64
"""Deepest nesting of mappings and lists (the shipped files nest 4 levels)."""
MAX_YAML_NODES = 100_000
"""Most nodes a file may expand to, an alias counting its whole anchored node at each use
(YAML "billion laughs": nine nested aliases expand 100 bytes to 10^9 nodes)."""
MAX_JSON_BYTES = 16 << 20
"""Largest JSON metadata file read (checkpoint ``policy.json``, tuned action files)."""
MAX_JSON_DEPTH = 64
"""Deepest nesting of JSON objects and arrays."""

_MERGE = "tag:yaml.org,2002:merge"


class _Refused(yaml.MarkedYAMLError):
    """What the bounded loader will not build: ``why``, at ``problem_mark``, about ``key`` (a key path)."""

    def __init__(self, mark: Any, why: str, key: str = "") -> None:
        super().__init__(problem=why, problem_mark=mark)
        self.why, self.key = why, key


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` with bounded depth and expansion, no recursive aliases, no duplicate keys."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self._depth = 0
        self._nodes = 0
        self._size: dict[int, int] = {}  # id(node) -> expanded size, for nodes fully composed

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            node = super().compose_node(parent, index)
            size = self._size.get(id(node))
            if size is None:
                raise _Refused(mark, "recursive alias (an anchor used inside its own node)")
            self._count(size, mark)
            return node
        mark = self.peek_event().start_mark
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                raise _Refused(mark, f"nested deeper than {MAX_YAML_DEPTH} levels")
            before = self._nodes
            self._count(1, mark)
            node = super().compose_node(parent, index)
            self._size[id(node)] = self._nodes - before
            return node
        finally:
            self._depth -= 1

    def _count(self, n: int, mark: Any) -> None:
        self._nodes += n
        if self._nodes > MAX_YAML_NODES:
            raise _Refused(mark, f"expands to more than {MAX_YAML_NODES:,} nodes (aliases counted at each use)")

    def get_single_node(self) -> Any:
        node = super().get_single_node()
        if node is not None:
            self._check_keys(node)
        return node

    def _check_keys(self, root: Any) -> None:
        """No mapping names a key twice (merge keys ``<<`` aside: their values are meant to be overridden)."""
        seen: set[int] = set()
        stack: list[tuple[Any, tuple[Any, ...]]] = [(root, ())]
        while stack:
            node, path = stack.pop()
            if id(node) in seen:
                continue
            seen.add(id(node))
            if isinstance(node, yaml.SequenceNode):
                stack.extend((child, (*path, i)) for i, child in enumerate(node.value))
            elif isinstance(node, yaml.MappingNode):
                first: dict[Any, Any] = {}
                for key_node, value_node in node.value:
                    if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE:
                        stack.append((value_node, path))
                        continue
                    key = self.construct_object(key_node)
                    try:
                        earlier = first.setdefault(key, key_node)
                    except TypeError:  # unhashable: the constructor reports it
                        continue
                    if earlier is not key_node:
                        raise _Refused(key_node.start_mark, f"duplicate key (first on line "
                                       f"{earlier.start_mark.line + 1}; YAML would keep only the last value)",
                                       key_path((*path, key)))
                    stack.append((value_node, (*path, key)))

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, OverflowError) as exc:  # e.g. an integer of 5000 digits, a 13th month
            raise _Refused(node.start_mark, f"cannot read value: {str(exc).split(';')[0]}") from None


def key_path(loc: tuple[Any, ...]) -> str:
    """``("mix", 0, "height")`` as ``mix[0].height`` (the form the schema's errors use)."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) and not isinstance(part, bool) else (
            f".{part}" if out else str(part))
    return out


def read_text(path: Path, limit: int | None = None, what: str = "config") -> str:
    """The file as text (UTF-8, BOM dropped), at most ``limit`` (``MAX_YAML_BYTES``) bytes, else a ``ConfigError``."""
    limit = MAX_YAML_BYTES if limit is None else limit
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise ConfigError(str(path), f"cannot read ({exc.strerror})") from None
    if len(data) > limit:
        raise ConfigError(str(path), f"larger than {limit >> 20} MiB: not a {what} file")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(str(path), "not UTF-8 text") from None


def parse_yaml(text: str, where: str) -> Any:
    """``text`` parsed by the bounded loader; any problem a ``ConfigError('WHERE:LINE[: KEY]', why)``."""
    try:
        return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 (a SafeLoader)
    except _Refused as exc:
        head = f"{where}:{exc.problem_mark.line + 1}"
        raise ConfigError(f"{head}: {exc.key}" if exc.key else head, exc.why) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        head = f"{where}:{mark.line + 1}" if mark is not None else where
        raise ConfigError(head, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:  # not expected (depth is bounded): still never a traceback
        raise ConfigError(where, f"nested deeper than {MAX_YAML_DEPTH} levels") from None


def read_yaml(path: Path) -> Any:
    """Parsed YAML (UTF-8, BOM allowed, bounded: see the module); problems are ``ConfigError('FILE:LINE', why)``."""
    return parse_yaml(read_text(Path(path)), str(path))


def read_yaml_lines(path: Path) -> tuple[Any, Callable[[tuple[Any, ...]], int | None]]:
    """``read_yaml`` and ``key_lines`` of one reading of the file."""
    text = read_text(Path(path))
    return parse_yaml(text, str(path)), key_lines(text)


def key_lines(text: str) -> Callable[[tuple[Any, ...]], int | None]:
    """``loc -> line``: the 1-based line of a key path (``("mix", 0, "height")``) in YAML ``text``,
    or of its deepest existing parent; None when the text does not compose."""
    try:
        root = yaml.compose(text, Loader=BoundedLoader)  # noqa: S506 (a SafeLoader)
    except (yaml.YAMLError, RecursionError):
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


# ------------------------------------------------------------------ JSON


def parse_json(text: str | bytes, where: str, error: type[Exception] = ConfigError,
               max_depth: int | None = None) -> Any:
    """``json.loads`` with bounded nesting: invalid JSON or nesting deeper than ``max_depth`` is
    ``error(where: why)`` (``error`` takes one message, or ``(where, why)`` for ``ConfigError``)."""
    max_depth = MAX_JSON_DEPTH if max_depth is None else max_depth
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, an integer of 5000 digits
        raise _json_error(error, where, f"invalid JSON ({str(exc).split(';')[0]})") from None
    except RecursionError:
        raise _json_error(error, where, f"nested deeper than {max_depth} levels") from None
    stack = [(data, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            if depth > max_depth:
                raise _json_error(error, where, f"nested deeper than {max_depth} levels")
            stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node))
    return data


def read_json(path: Path, error: type[Exception] = ConfigError, limit: int | None = None,
              max_depth: int | None = None) -> Any:
    """A JSON file of at most ``limit`` (``MAX_JSON_BYTES``) bytes and ``max_depth`` (``MAX_JSON_DEPTH``)
    levels, else ``error`` naming the file."""
    limit = MAX_JSON_BYTES if limit is None else limit
    try:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as exc:
        raise _json_error(error, str(path), f"cannot read ({exc.strerror})") from None
    if len(data) > limit:
        raise _json_error(error, str(path), f"larger than {limit >> 20} MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise _json_error(error, str(path), "not UTF-8 text") from None
    return parse_json(text, str(path), error, max_depth)


def _json_error(error: type[Exception], where: str, why: str) -> Exception:
    return error(where, why) if issubclass(error, ConfigError) else error(f"{where}: {why}")
