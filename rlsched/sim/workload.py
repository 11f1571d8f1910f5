"""Arrival processes, request mixes and trace readers.

Every generator takes an explicit ``numpy.random.Generator``; nothing here touches
global random state. Times are seconds from the start of the run.
"""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from rlsched import bounds
from rlsched.atomic import input_file
from rlsched.bounds import MAX_CV, MAX_TRACE_BYTES, MAX_TRACE_ROWS, MIN_CV
from rlsched.errors import ConfigError, InvalidRequest, TraceFormatError

# ------------------------------------------------------------------ arrivals

MAX_ARRIVALS = bounds.MAX_ARRIVALS
"""More arrivals than this in one run is a typo in the rate or window, not a workload (and would
exhaust memory): a scenario refuses it from rate x duration before anything is allocated."""
MAX_DRAWN = 2 * MAX_ARRIVALS
"""Most arrival times a renewal process may draw while covering its window (a very bursty process
can need several draws); past it the process is refused instead of growing without bound."""
MAX_PERIODS = 100_000
"""Most on/off sojourns an ``onoff`` process may alternate through in one window."""


def poisson(rng: np.random.Generator, rate_rps: float, duration_s: float) -> np.ndarray:
    """Poisson arrivals at ``rate_rps`` over ``[0, duration_s)``."""
    return renewal(rng, rate_rps, duration_s, cv=1.0, dist="exponential")


def renewal(rng: np.random.Generator, rate_rps: float, duration_s: float,
            cv: float = 1.0, dist: str = "gamma") -> np.ndarray:
    """Renewal process with mean gap ``1/rate`` and coefficient of variation ``cv``.

    ``gamma`` or ``weibull`` gaps (bursty when cv > 1); ``exponential`` ignores cv.
    """
    if rate_rps <= 0 or duration_s <= 0:
        return np.empty(0)
    expected = rate_rps * duration_s
    if not expected <= MAX_ARRIVALS:
        raise ConfigError("arrival.rate_rps", f"rate {rate_rps:g}/s over {duration_s:g} s expects {expected:.3g} "
                          f"requests (more than {MAX_ARRIVALS:,})")
    n = int(expected * 1.5 + 10 * math.sqrt(expected) + 20)
    with np.errstate(over="ignore"):  # a rate of 1e-320/s: gaps past float's range are past any window
        gaps = _gaps(rng, dist, cv, n) / rate_rps
    times = np.cumsum(gaps)
    if times[-1] >= duration_s:
        return times[times < duration_s]
    chunks, drawn = [times], n  # rare: extend until the window is covered (one concatenation, at the end)
    while chunks[-1][-1] < duration_s:
        drawn += n
        if drawn > MAX_DRAWN:
            raise ConfigError("arrival.cv", f"a {dist} process with cv {cv:g} drew {drawn:,} gaps without covering "
                              f"{duration_s:g} s (more than {MAX_DRAWN:,})")
        chunks.append(np.cumsum(_gaps(rng, dist, cv, n) / rate_rps) + chunks[-1][-1])
    times = np.concatenate(chunks)
    return times[times < duration_s]


def _gaps(rng: np.random.Generator, dist: str, cv: float, n: int) -> np.ndarray:
    """Unit-mean gaps with the given cv."""
    if dist == "exponential":
        return rng.exponential(1.0, n)
    if dist == "gamma":
        k = 1.0 / cv**2
        return rng.gamma(k, 1.0 / k, n)
    if dist == "weibull":
        k = _weibull_shape(cv)
        return rng.weibull(k, n) / math.gamma(1 + 1 / k)
    raise ConfigError("arrival.dist", f"unknown distribution {dist!r} (gamma, weibull, exponential)")


def _weibull_shape(cv: float) -> float:
    """Solve cv(k) = sqrt(Γ(1+2/k)/Γ(1+1/k)² − 1) by bisection (cv falls as k grows)."""
    lo, hi = 0.05, 50.0
    for _ in range(80):
        k = (lo + hi) / 2
        c = math.sqrt(math.gamma(1 + 2 / k) / math.gamma(1 + 1 / k) ** 2 - 1)
        lo, hi = (k, hi) if c > cv else (lo, k)
    return (lo + hi) / 2


def on_off(rng: np.random.Generator, rate_rps: float, duration_s: float,
           on_s: float = 60.0, off_s: float = 120.0, burst_factor: float = 4.0) -> np.ndarray:
    """Two-state MMPP: exponential sojourns, rate ×``burst_factor`` while on.

    The off-state rate is set so the long-run mean stays ``rate_rps``. More than about
    ``MAX_PERIODS`` sojourns in the window (``on_s: 1e-7`` over hours) is refused.
    """
    check_periods(duration_s, on_s, off_s)
    p_on = on_s / (on_s + off_s)
    low = rate_rps / (p_on * burst_factor + (1 - p_on))
    t, on, out = 0.0, False, []
    while t < duration_s:
        stay = rng.exponential(on_s if on else off_s)
        end = min(t + stay, duration_s)
        out.append(t + poisson(rng, low * (burst_factor if on else 1.0), end - t))
        t, on = end, not on
    return np.concatenate(out) if out else np.empty(0)


def check_periods(duration_s: float, on_s: float, off_s: float) -> None:
    """``ConfigError('arrival.on_s', ...)`` unless the sojourns are > 0 and about ``MAX_PERIODS`` of them
    at most fit in ``duration_s``."""
    if not (on_s > 0 and off_s > 0):
        raise ConfigError("arrival.on_s", f"on_s and off_s must be > 0, not {on_s!r} and {off_s!r}")
    periods = 2 * duration_s / (on_s + off_s)
    if not periods <= MAX_PERIODS:
        raise ConfigError("arrival.on_s", f"on_s {on_s:g} s and off_s {off_s:g} s make about {periods:.3g} "
                          f"on/off sojourns in {duration_s:g} s (more than {MAX_PERIODS:,}); lengthen them")


def diurnal(rng: np.random.Generator, rate_rps: float, duration_s: float,
            period_s: float = 86400.0, amplitude: float = 0.5, phase_s: float = 0.0) -> np.ndarray:
    """Poisson with rate ``rate·(1 + amplitude·sin(2π(t+phase)/period))`` by thinning."""
    if not 0 <= amplitude <= 1:
        raise ConfigError("arrival.amplitude", "must be in [0, 1]")
    peak = rate_rps * (1 + amplitude)
    cand = poisson(rng, peak, duration_s)
    rate = rate_rps * (1 + amplitude * np.sin(2 * np.pi * (cand + phase_s) / period_s))
    return cand[rng.random(cand.size) * peak < rate]


def servegen(rng: np.random.Generator, path: str | Path, duration_s: float,
             rate_scale: float = 1.0) -> np.ndarray:
    """ServeGen per-window client process: each 600 s window draws its own renewal gaps.

    A rate scale that would draw more than ``MAX_ARRIVALS`` is refused before anything is drawn."""
    expected = servegen_expected(path, duration_s, rate_scale)
    if not expected <= MAX_ARRIVALS:
        raise ConfigError("arrival.rate_scale", f"ServeGen rates x{rate_scale:g} over {duration_s:g} s expect "
                          f"{expected:.3g} requests (more than {MAX_ARRIVALS:,})")
    rows = _read_servegen(Path(path))
    out = []
    for i, span in _servegen_windows(rows, duration_s):
        start, rate, cv, dist = rows[i]
        if rate > 0 and dist:
            out.append(start + renewal(rng, rate * rate_scale, span, cv=max(cv, MIN_CV), dist=dist))
    return np.concatenate(out) if out else np.empty(0)


def _servegen_windows(rows: list[tuple[float, float, float, str]],
                      duration_s: float) -> Iterator[tuple[int, float]]:
    """``(row index, span)`` of each window that starts inside ``[0, duration_s)``."""
    for i, (start, _, _, _) in enumerate(rows):
        if start >= duration_s:
            break
        end = rows[i + 1][0] if i + 1 < len(rows) else start + 600.0
        yield i, min(end, duration_s) - start


def servegen_expected(path: str | Path, duration_s: float, rate_scale: float = 1.0) -> float:
    """Expected arrivals of ``servegen(path, duration_s, rate_scale)``: Σ rate·scale·span over its windows."""
    rows = _read_servegen(Path(path))
    return math.fsum(rows[i][1] * rate_scale * span for i, span in _servegen_windows(rows, duration_s)
                     if span > 0 and rows[i][3])


def _read_servegen(path: Path) -> list[tuple[float, float, float, str]]:
    rows = []
    for lineno, row in enumerate(_csv_rows(path), start=1):
        if not row:
            continue
        try:
            start, rate, cv = float(row[0]), float(row[1] or 0), float(row[2] or 0)
        except (ValueError, IndexError):
            raise TraceFormatError(str(path), lineno, f"expected start_s,rate,cv,dist,... got {row!r}") from None
        if not all(math.isfinite(x) and x >= 0 for x in (start, rate, cv)):
            raise TraceFormatError(str(path), lineno, f"start_s, rate and cv must be finite numbers >= 0: {row!r}")
        if cv > MAX_CV:
            raise TraceFormatError(str(path), lineno, f"cv {cv:g} is past {MAX_CV:g}: {row!r}")
        dist = row[3].strip().lower() if len(row) > 3 else ""
        if dist not in ("", "gamma", "weibull"):
            raise TraceFormatError(str(path), lineno, f"unknown distribution {row[3]!r}")
        rows.append((start, rate, cv, dist))
    return rows


def read_text(path: Path) -> str:
    """The file as text (UTF-8, a byte-order mark dropped); errors name the file and line.

    A trace is bounded before it is parsed: at most ``MAX_TRACE_BYTES`` read, at most ``MAX_TRACE_ROWS``
    rows (a header and blank lines aside; counted from its line breaks, in one pass at C speed). A
    10-million-row trace was read and replayed for minutes with no word."""
    input_file(path, "trace file")
    size = path.stat().st_size
    if size > MAX_TRACE_BYTES:
        raise ConfigError(str(path), f"trace of {size:,} bytes; at most {MAX_TRACE_BYTES:,} are read "
                                     f"(rlsched.bounds.MAX_TRACE_BYTES): cut it to a window first")
    data = path.read_bytes()
    lines = max(data.count(b"\n"), data.count(b"\r"))
    if lines > MAX_TRACE_ROWS + 1:  # the header
        raise TraceFormatError(str(path), MAX_TRACE_ROWS + 2,
                               f"past the trace row bound: {lines:,} lines, at most {MAX_TRACE_ROWS:,} rows are "
                               "replayed (rlsched.bounds.MAX_TRACE_ROWS, about a minute of reading); cut the trace "
                               "to a window first (head -n)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[:exc.start].count(b"\n") + 1
        raise TraceFormatError(str(path), line, "not UTF-8 text") from None


_LINE = re.compile(r"[^\r\n]*(?:\r\n?|\n)|[^\r\n]+")


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text``, ends kept, split as ``io.StringIO(text, newline="")`` splits them
    (``\\n``, ``\\r\\n`` or ``\\r``) but one at a time: StringIO holds a 4-byte-per-character copy
    of the whole text, csv.reader reads only a line ahead."""
    return (m.group() for m in _LINE.finditer(text))


_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_SPLIT = re.compile(f"([^{_BREAKS}]*)(?:\r\n|[{_BREAKS}])|([^{_BREAKS}]+)")


def _splitlines(text: str) -> Iterator[str]:
    """``text.splitlines()`` one line at a time (a million lines are never one list)."""
    return (m.group(1) if m.group(2) is None else m.group(2) for m in _SPLIT.finditer(text))


def _first_line(text: str) -> str:
    """``text.splitlines()[0]`` without splitting the rest (``""`` for an empty text)."""
    return next(_splitlines(text), "")


def _csv_iter(path: Path) -> Iterator[list[str]]:
    """The file's CSV rows one by one (a million-row trace is never held as lists of strings)."""
    reader = csv.reader(_lines(read_text(path)))
    try:
        yield from reader
    except csv.Error as exc:  # e.g. a NUL byte
        raise TraceFormatError(str(path), reader.line_num, f"not CSV ({exc})") from None


def _csv_rows(path: Path) -> list[list[str]]:
    return list(_csv_iter(path))


def _data_rows(path: Path, rows: Iterable[list[str]]) -> Iterator[tuple[int, list[str]]]:
    """``(line, row)`` of the rows after the header (``rows``: the rest of the file once the header
    was read), blank lines skipped; no row left is a header-only error, raised at the end."""
    empty = True
    for lineno, row in enumerate(rows, start=2):
        if any(v.strip() for v in row):
            empty = False
            yield lineno, row
    if empty:
        raise TraceFormatError(str(path), 1, "header only: the trace has no requests")


# ------------------------------------------------------------- row values


def arrival_time(value: str, field: str = "arrival_s") -> float:
    """A trace arrival: a finite number >= 0 (``nan``/``inf`` would be dropped by any window)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(field, value, "must be a number") from None
    if not math.isfinite(out) or out < 0:
        raise InvalidRequest(field, value, "must be a finite number >= 0")
    return out


SHAPE_BOUNDS = {"height": bounds.SIDE_PX, "width": bounds.SIDE_PX, "num_frames": bounds.FRAMES,
                "num_inference_steps": bounds.STEPS}
"""A trace's shape fields have the scenario schema's ranges."""


def count(value: str | float, field: str) -> int:
    """A positive integer, in ``SHAPE_BOUNDS[field]`` for a shape field; ``512.0`` is accepted, ``512.9``
    is refused (never truncated)."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(field, value, "must be a positive integer") from None
    if not math.isfinite(out) or out < 1 or out != int(out):
        raise InvalidRequest(field, value, "must be a positive integer")
    bound = SHAPE_BOUNDS.get(field)
    if bound is not None and not bound.holds(int(out)):
        raise InvalidRequest(field, value, f"must be {bound.describe()}")
    return int(out)


# --------------------------------------------------------------- trace files


def azure_arrivals(path: str | Path) -> np.ndarray:
    """Arrival times (s from the first row) of an Azure LLM trace CSV (``TIMESTAMP,...``); read-only."""
    path = Path(path)
    return _azure_cached(str(path.resolve()), _mtime(path))


def _mtime(path: Path) -> float:
    input_file(path, "trace file")
    return path.stat().st_mtime


@functools.lru_cache(maxsize=8)
def _azure_cached(name: str, mtime: float) -> np.ndarray:
    """Parsed once per file version: environments reset often and traces are large."""
    path = Path(name)
    rows = _csv_iter(path)
    header = next(rows, None)
    if header is None:
        raise TraceFormatError(str(path), 1, "empty file (expected a TIMESTAMP header)")
    if header[:1] and header[0].strip().upper() != "TIMESTAMP":
        raise TraceFormatError(str(path), 1, "expected header starting with TIMESTAMP")
    times = []
    for lineno, row in _data_rows(path, rows):
        try:
            times.append(datetime.fromisoformat(row[0].strip()[:26]).timestamp())
        except (ValueError, IndexError):
            raise TraceFormatError(str(path), lineno, f"bad TIMESTAMP {row[:1]!r}") from None
    arr = np.sort(np.asarray(times))
    arr = arr - arr[0]
    arr.flags.writeable = False
    return arr


_HETU = re.compile(r"^Request\((.*)\)\s*$")
_HETU_FIELDS = ("timestamp", "height", "width", "num_frames", "num_inference_steps")


def hetudit_rows(path: str | Path) -> tuple[dict[str, float], ...]:
    """Parse the Hetu-DiT text format: dicts with ``timestamp``, the shape fields and the ``line``.

    Shape fields are positive integers and timestamps finite numbers >= 0, else a
    ``TraceFormatError`` (never truncated or dropped). Do not mutate the dicts (cached).
    """
    path = Path(path)
    return _hetudit_cached(str(path.resolve()), _mtime(path))


@functools.lru_cache(maxsize=8)
def _hetudit_cached(name: str, mtime: float) -> tuple[dict[str, float], ...]:
    path = Path(name)
    out = []
    ints: dict[int, int] = {}  # one object per distinct shape value: the rows stay cached
    for lineno, line in enumerate(_splitlines(read_text(path)), start=1):
        if line.strip():
            out.append(_hetudit_row(path, lineno, line.strip(), ints))
    if not out:
        raise TraceFormatError(str(path), 1, "empty file: the trace has no requests")
    return tuple(out)


def _hetudit_row(path: Path, lineno: int, line: str, ints: dict[int, int] | None = None) -> dict[str, float]:
    m = _HETU.match(line)
    if not m:
        raise TraceFormatError(str(path), lineno, "expected 'Request(field=value, ...)'")
    fields: dict[str, str] = {}
    for key, value in re.findall(r"(\w+)=([-+\w.]+)", m.group(1)):
        fields.setdefault(key, value)  # the first: a later "height=..." may sit inside the prompt text
    missing = [k for k in _HETU_FIELDS if k not in fields]
    if missing:
        raise TraceFormatError(str(path), lineno, f"missing field(s) {missing}")
    try:
        row: dict[str, float] = {"timestamp": arrival_time(fields["timestamp"], "timestamp")}
        row.update({k: count(fields[k], k) for k in _HETU_FIELDS[1:]})
    except InvalidRequest as exc:
        raise TraceFormatError(str(path), lineno, str(exc)) from None
    if ints is not None:
        for k in _HETU_FIELDS[1:]:
            row[k] = ints.setdefault(row[k], row[k])
    row["line"] = lineno
    return row


RLSCHED_CSV_REQUIRED = ("arrival_s", "height", "width", "num_frames", "num_inference_steps", "priority")
RLSCHED_CSV_OPTIONAL = ("model", "modality", "cfg", "slo_s")


def rlsched_csv_rows(path: str | Path) -> list[dict[str, str]]:
    """Rows of a generic rlsched CSV, header checked (case-insensitive); values still strings."""
    return list(iter_rlsched_csv_rows(path))


def iter_rlsched_csv_rows(path: str | Path) -> Iterator[dict[str, str]]:
    """``rlsched_csv_rows`` one row at a time: the header is checked at the first ``next``, every
    later error is raised at its row, in file order."""
    path = Path(path)
    rows = _csv_iter(path)
    first = next(rows, None)
    if first is None:
        raise TraceFormatError(str(path), 1, "empty file (expected a header with arrival_s,...)")
    header = [h.strip().lower() for h in first]
    missing = [h for h in RLSCHED_CSV_REQUIRED if h not in header]
    unknown = [h for h in header if h not in RLSCHED_CSV_REQUIRED + RLSCHED_CSV_OPTIONAL]
    if missing or unknown or len(set(header)) != len(header):
        raise TraceFormatError(str(path), 1, f"header missing {missing}, unknown {unknown}"
                               + ("" if len(set(header)) == len(header) else ", a column named twice"))
    for lineno, row in _data_rows(path, rows):
        if len(row) != len(header):
            raise TraceFormatError(str(path), lineno, f"{len(row)} fields, header has {len(header)}")
        yield {"_line": str(lineno), **dict(zip(header, (v.strip() for v in row)))}


def detect_trace_format(path: str | Path) -> str:
    """``azure``, ``hetudit`` or ``rlsched`` from the file's first line (BOM and case ignored)."""
    path = Path(path)
    text = read_text(path)
    if not text:
        raise TraceFormatError(str(path), 1, "empty file (expected a trace header or a Request(...) line)")
    first = _first_line(text).strip()
    if not first:
        raise TraceFormatError(str(path), 1, "empty first line (expected a trace header or a Request(...) line)")
    if first.upper().startswith("TIMESTAMP"):
        return "azure"
    if first.startswith("Request("):
        return "hetudit"
    if "arrival_s" in (h.strip().lower() for h in first.split(",")):
        return "rlsched"
    raise TraceFormatError(str(path), 1, f"unknown trace format (Azure CSV 'TIMESTAMP,...', Hetu-DiT "
                           f"'Request(...)' text or rlsched CSV 'arrival_s,...'), first line {first[:60]!r}")


ARRIVAL_PROCESSES: Mapping[str, Callable[..., np.ndarray]] = {
    "poisson": poisson, "gamma": renewal, "weibull": renewal, "onoff": on_off, "diurnal": diurnal,
}


def positive(value: Any, field: str) -> float:
    """``value`` as a float > 0, else an InvalidRequest naming ``field``."""
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise InvalidRequest(field, value, "must be a number") from None
    if not out > 0 or math.isinf(out):
        raise InvalidRequest(field, value, "must be a finite number > 0")
    return out


def sample_index(rng: np.random.Generator, weights: Sequence[float], n: int) -> np.ndarray:
    """``n`` indices drawn with probabilities proportional to ``weights`` (finite, >= 0, one > 0).

    Weights whose sum overflows (two shares of 1e308) or is subnormal are divided by their
    largest first, so any finite positive weights give the proportions they say."""
    p = np.asarray(weights, dtype=float)
    if p.size == 0 or not np.isfinite(p).all() or (p < 0).any() or not p.max() > 0:
        raise ConfigError("weights", f"must be finite numbers >= 0, one of them > 0, not {list(weights)!r}")
    with np.errstate(over="ignore"):
        total = p.sum()
    if not np.isfinite(total) or total < np.finfo(float).tiny:
        p = p / p.max()
        total = p.sum()
    return rng.choice(p.size, size=n, p=p / total)
