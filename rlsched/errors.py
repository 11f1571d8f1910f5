"""Typed errors. Each names what was wrong (field, file, line) so a user can fix it."""

from __future__ import annotations


class RlschedError(Exception):
    """Base class of every error rlsched raises on purpose.

    Pickles through its constructor's own arguments (not the formatted message), so an error
    raised in a worker process or a Ray task comes back as the same typed error."""

    _init: tuple[tuple[object, ...], dict[str, object]]

    def __new__(cls, *args: object, **kwargs: object) -> RlschedError:
        self = super().__new__(cls, *args)
        self._init = (args, kwargs)
        return self

    def __reduce__(self) -> tuple[object, ...]:
        args, kwargs = self._init
        return _rebuild, (type(self), args, kwargs), self.__dict__


def _rebuild(cls: type[RlschedError], args: tuple, kwargs: dict) -> RlschedError:
    return cls(*args, **kwargs)


class InvalidRequest(RlschedError, ValueError):
    """A request field is out of range or of the wrong kind."""

    def __init__(self, field: str, value: object, why: str) -> None:
        self.field, self.value = field, value
        super().__init__(f"invalid request field {field!r}={value!r}: {why}")


class ConfigError(RlschedError, ValueError):
    """A scenario, profile or agent file is malformed."""

    def __init__(self, where: str, why: str) -> None:
        self.where, self.why = where, why
        super().__init__(f"{where}: {why}")


class OutputPathError(ConfigError):
    """An output path rlsched will not write: a folder, a named pipe, a device, a socket or a
    symbolic link where a regular file belongs (``rlsched.atomic``); names the flag and the path."""

    def __init__(self, flag: str | None, path: object, why: str) -> None:
        self.flag, self.path = flag or "output", str(path)
        super().__init__(self.flag, f"{path} {why}")


class TraceFormatError(ConfigError):
    """A trace line cannot be parsed; names the file and the 1-based line."""

    def __init__(self, path: str, line: int, why: str) -> None:
        self.path, self.line = path, line
        super().__init__(f"{path}:{line}", why)


class InvalidDecision(RlschedError, ValueError):
    """A policy returned a decision the simulator cannot carry out."""


class PolicyOutputError(InvalidDecision):
    """A policy network returned a non-finite action (NaN or inf); it is never turned into a decision."""


class CheckpointError(RlschedError, ValueError):
    """A frozen policy is missing, tampered with, or of another schema version."""


class MissingExtra(RlschedError, ImportError):
    """An option needs an optional dependency that is not installed; says which extra brings it."""

    def __init__(self, option: str, module: str, extra: str) -> None:
        self.option, self.module, self.extra = option, module, extra
        super().__init__(f"{option} needs the optional package {module!r}, which is not installed: "
                         f"pip install 'rlsched[{extra}]'")


class TraceRowsSkipped(UserWarning):
    """Trace rows that parsed but were not replayed (e.g. past the arrival window).

    A warning, not an error: cutting a long trace to a window is legitimate, but
    never silent. The CLI prints it and counts the rows in its JSON output.
    """

    def __init__(self, path: str, skipped: int, total: int, why: str) -> None:
        self.path, self.skipped, self.total = path, skipped, total
        super().__init__(f"{path}: {skipped} of {total} rows {why}")
