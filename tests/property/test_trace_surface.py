"""Trace CSV, property-tested at the table of bounds (issue 34): each column of an rlsched trace
(required and optional) drawn just inside, at and just outside its range and of the wrong kind,
with columns missing, extra or repeated. Each trace is refused with a ``TraceFormatError`` naming
the file and the line of the first bad row (the header: line 1), or replayed with every row a
request or a counted skip, and the replay ends with every request finished exactly once."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rlsched import bounds
from rlsched.errors import ConfigError, InvalidRequest, TraceFormatError, TraceRowsSkipped
from rlsched.policies import make_policy
from rlsched.sim import load_scenario
from rlsched.sim import workload as wl
from rlsched.sim.simulator import Simulator
from tests.outcomes import FinishLog, check_outcomes
from tests.property.hostile import edges

WINDOW_S = 30.0
GOOD = {"arrival_s": "1.5", "height": "512", "width": "512", "num_frames": "1", "num_inference_steps": "4",
        "priority": "batch", "model": "qwen-image", "modality": "image", "cfg": "true", "slo_s": "60"}
BOUNDS = {"arrival_s": bounds.floats(0), "height": bounds.SIDE_PX, "width": bounds.SIDE_PX,
          "num_frames": bounds.FRAMES, "num_inference_steps": bounds.STEPS, "slo_s": bounds.POSITIVE}
JUNK_TEXT = st.sampled_from(["", "nan", "inf", "-inf", "-0", "1e400", "10" * 200, "true", "[1, 2]", "0x10",
                             " 512", "512.5", "1_000", "\u0661\u0662", "None", "batch", "video", "qwen-image"])


def text(value: Any) -> str:
    return repr(value) if isinstance(value, float) else str(value)


def cell(column: str) -> st.SearchStrategy[str]:
    """A column's value as a trace writes it: mostly good (so that some traces replay), else at a bound's
    edges or of the wrong kind."""
    bound = BOUNDS.get(column)
    near = st.sampled_from([text(v) for v in edges(bound)]) if bound else st.sampled_from(
        ["batch", "realtime", "background", "vip", "image", "video", "qwen-image", "nope", "yes", "0", "maybe"])
    return st.integers(0, 15).flatmap(lambda k: st.just(GOOD[column]) if k > 1 else near if k else JUNK_TEXT)


@st.composite
def traces(draw: st.DrawFn) -> tuple[list[str], list[list[str]]]:
    optional = draw(st.lists(st.sampled_from(list(wl.RLSCHED_CSV_OPTIONAL)), unique=True, max_size=4))
    header = [*wl.RLSCHED_CSV_REQUIRED, *optional]
    if draw(st.integers(0, 19)) == 0:  # now and then a column missing, unknown or repeated
        header = draw(st.sampled_from([header[1:], [*header, "stray"], [*header, header[0]]]))
    rows = draw(st.lists(st.tuples(*(cell(c) if c in GOOD else st.just("x") for c in header)), min_size=1, max_size=5))
    return header, [list(r) for r in rows]


@pytest.fixture(scope="module")
def sc():
    return load_scenario("default")


def replay(sc: Any, path: Path, rows: int) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reqs = sc.requests(seed=0, duration_s=WINDOW_S, trace=path)
    skipped = sum(w.message.skipped for w in caught if isinstance(w.message, TraceRowsSkipped))
    assert len(reqs) + skipped == rows, "a row was neither replayed, nor counted as skipped, nor refused"
    sim = Simulator(reqs, sc.cost(), sc.serving)
    log = FinishLog(sim)
    sim.run(make_policy("edf"))
    m = check_outcomes(sim, log)
    assert m["requests_unfinished"] == 0 and len(log.calls) == len(reqs)
    event("replayed")


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(traces())
def test_hostile_trace_cells_are_refused_at_their_line_or_replayed_to_the_end(
        tmp_path: Path, sc: Any, trace: tuple[list[str], list[list[str]]]) -> None:
    header, rows = trace
    path = tmp_path / "hostile.csv"
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n")
    try:
        replay(sc, path, len(rows))
    except TraceFormatError as exc:
        assert str(exc).startswith(f"{path}:{exc.line}:"), exc
        assert 1 <= exc.line <= len(rows) + 1
        if exc.line > 1:  # a row's refusal names a column of that row, its shape, or its field count
            names = [*header, "shape", "fields"]
            assert any(re.search(rf"\b{re.escape(c)}\b", str(exc)) for c in names), exc
        event("refused")
    except ConfigError as exc:  # a whole-trace refusal (e.g. a shape no GPU holds) names the file
        assert str(path) in str(exc) or "hostile.csv" in str(exc), exc
        event("refused")


@pytest.mark.parametrize("column", sorted(BOUNDS))
def test_one_past_each_bound_is_refused_at_its_line(tmp_path: Path, sc: Any, column: str) -> None:
    """Deterministic: just past each end of each column's range is refused at that row (line 3)."""
    bound = BOUNDS[column]
    past = [int(bound.high) + 1] if bound.integer else [math.nextafter(bound.high, math.inf)]
    past = past if math.isfinite(bound.high) else []  # arrival_s: any time >= 0 (later ones: skipped, counted)
    past += [int(bound.low) - 1] if bound.integer else [-1.0]
    for value in past:
        if not math.isfinite(value):
            continue
        row = GOOD | {column: text(value)}
        path = tmp_path / "past.csv"
        path.write_text(",".join(GOOD) + "\n" + ",".join(GOOD.values()) + "\n" + ",".join(row.values()) + "\n")
        with pytest.raises((TraceFormatError, InvalidRequest), match=rf"past.csv:3: .*{column}"):
            sc.requests(seed=0, duration_s=WINDOW_S, trace=path)
