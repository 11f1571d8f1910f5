"""Trace replay: every row becomes a request, a typed error naming file and line, or a counted skip."""

import math
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.errors import ConfigError, TraceFormatError, TraceRowsSkipped
from rlsched.sim import load_scenario
from rlsched.sim import workload as wl

HEADER = "arrival_s,height,width,num_frames,num_inference_steps,priority\n"


@pytest.fixture(scope="module")
def sc():
    return load_scenario("default")


def hetu(t: str = "0.0", h: str = "512", w: str = "512") -> str:
    return f"Request(request_id=0, timestamp={t}, height={h}, width={w}, num_frames=1, num_inference_steps=28)\n"


def write(tmp_path: Path, text: str | bytes, name: str = "t.csv") -> Path:
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def test_rows_past_the_window_are_counted_not_silently_cut(tmp_path: Path, sc) -> None:
    rows = "".join(f"{t},512,512,1,50,batch\n" for t in (0, 10, 7199, 7200, 9000))
    with pytest.warns(TraceRowsSkipped, match=r"2 of 5 rows .*window \[0, 7200\).*--duration 9001") as rec:
        reqs = sc.requests(seed=0, trace=write(tmp_path, HEADER + rows))
    assert len(reqs) == 3 and rec[0].message.skipped == 2 and rec[0].message.total == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the suggested window replays all of them, no warning
        assert len(sc.requests(seed=0, duration_s=9001, trace=write(tmp_path, HEADER + rows))) == 5


def test_hetudit_rows_past_the_window_are_counted(tmp_path: Path, sc) -> None:
    path = write(tmp_path, hetu("0.0") + hetu("8000.5"), "t.txt")
    with pytest.warns(TraceRowsSkipped, match="1 of 2 rows"):
        assert len(sc.requests(seed=0, trace=path)) == 1


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1", "soon"])
def test_non_finite_or_negative_arrivals_are_errors(tmp_path: Path, sc, value: str) -> None:
    path = write(tmp_path, HEADER + "0,512,512,1,50,batch\n" + f"{value},512,512,1,50,batch\n")
    with pytest.raises(TraceFormatError, match=r"t.csv:3.*arrival_s") as err:
        sc.requests(seed=0, trace=path)
    assert err.value.line == 3
    with pytest.raises(TraceFormatError, match=r":2: .*timestamp"):
        wl.hetudit_rows(write(tmp_path, hetu() + hetu(value), f"h{value}.txt"))


def test_hetudit_fields_inside_the_prompt_do_not_override(tmp_path: Path) -> None:
    line = ("Request(request_id=0, timestamp=1.5, height=512, width=768, num_frames=1, "
            "prompt='a poster, height=9 width=9', num_inference_steps=28)\n")
    row = wl.hetudit_rows(write(tmp_path, line, "p.txt"))[0]
    assert (row["timestamp"], row["height"], row["width"], row["num_inference_steps"]) == (1.5, 512, 768, 28)


def test_fractional_shapes_are_errors_not_truncated(tmp_path: Path, sc) -> None:
    with pytest.raises(TraceFormatError, match=r":1: .*'height'='512.9'"):
        wl.hetudit_rows(write(tmp_path, hetu(h="512.9"), "t.txt"))
    assert wl.hetudit_rows(write(tmp_path, hetu(h="512.0"), "u.txt"))[0]["height"] == 512
    with pytest.raises(TraceFormatError, match=r"t.csv:2.*width"):
        sc.requests(seed=0, trace=write(tmp_path, HEADER + "0,512,512.9,1,50,batch\n"))


@pytest.mark.parametrize(("name", "text"), [
    ("a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"),
    ("r.csv", HEADER),
    ("r2.csv", HEADER + "\n\n"),
])
def test_header_only_is_a_clear_error(tmp_path: Path, sc, name: str, text: str) -> None:
    with pytest.raises(TraceFormatError, match=f"{name}:1: header only"):
        sc.requests(seed=0, trace=write(tmp_path, text, name))


@pytest.mark.parametrize("text", [b"", b"\n", b"\xef\xbb\xbf"])
def test_empty_file_names_the_file(tmp_path: Path, sc, text: bytes) -> None:
    with pytest.raises(TraceFormatError, match=r"e.csv:1: empty"):
        sc.requests(seed=0, trace=write(tmp_path, text, "e.csv"))


def test_bom_and_header_case_are_accepted(tmp_path: Path, sc) -> None:
    text = "\ufeffArrival_S,Height,WIDTH,num_frames,num_inference_steps,Priority\n0,512,512,1,50,batch\n"
    assert wl.detect_trace_format(write(tmp_path, text)) == "rlsched"
    assert [r.height for r in sc.requests(seed=0, trace=write(tmp_path, text))] == [512]
    azure = write(tmp_path, "\ufefftimestamp,ContextTokens\n2023-11-16 18:17:03.9799600,1\n", "a.csv")
    assert wl.detect_trace_format(azure) == "azure" and wl.azure_arrivals(azure).tolist() == [0.0]
    assert wl.detect_trace_format(write(tmp_path, "\ufeff" + hetu(), "h.txt")) == "hetudit"


def test_not_utf8_names_file_and_line(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"b.csv:2: not UTF-8"):
        wl.detect_trace_format(write(tmp_path, HEADER.encode() + b"\xff\xfe,1\n", "b.csv"))


def test_unknown_format_quotes_the_first_line(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match=r"x.csv:1: unknown trace format.*'when,what'"):
        wl.detect_trace_format(write(tmp_path, "when,what\n1,2\n", "x.csv"))


def test_a_shape_no_gpu_can_hold_names_the_row(tmp_path: Path, sc) -> None:
    path = write(tmp_path, HEADER + "0,512,512,1,50,batch\n1,100000,100000,1,50,batch\n")
    with pytest.raises(TraceFormatError, match=r"t.csv:3: .*'shape'='100000x100000x1'.*GB"):
        sc.requests(seed=0, trace=path)
    with pytest.raises(TraceFormatError, match=r":2: .*shape"):
        sc.requests(seed=0, trace=write(tmp_path, hetu() + hetu(h="100000", w="100000"), "h.txt"))


# ------------------------------------------------------------------ fuzzing

NUMBERS = st.one_of(st.integers(-5, 3000).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["", "nan", "inf", "512.9", "1e400", "abc", " 7 ", "0x10"]))
PRIORITY = st.sampled_from(["batch", "realtime", "background", "vip", ""])
ROW = st.tuples(NUMBERS, NUMBERS, NUMBERS, NUMBERS, NUMBERS, PRIORITY)


def _valid(row: tuple[str, ...]) -> bool:
    try:
        wl.arrival_time(row[0])
        for v in row[1:5]:
            wl.count(v, "f")
    except ValueError:
        return False
    return row[5] in ("batch", "realtime", "background")


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(ROW, min_size=0, max_size=6), st.floats(1, 1e4))
def test_fuzzed_rlsched_csv_never_silently_drops(tmp_path: Path, sc, rows: list, duration: float) -> None:
    path = write(tmp_path, HEADER + "".join(",".join(r) + "\n" for r in rows), "f.csv")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            reqs = sc.requests(seed=0, duration_s=duration, trace=path)
        except (TraceFormatError, ConfigError) as exc:
            assert "f.csv" in str(exc)
            return
    assert all(_valid(r) for r in rows), "a bad row was replayed instead of refused"
    skipped = sum(w.message.skipped for w in caught if isinstance(w.message, TraceRowsSkipped))
    assert len(reqs) + skipped == len(rows)
    assert all(math.isfinite(r.arrival_s) and r.arrival_s < duration for r in reqs)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(NUMBERS, NUMBERS, NUMBERS), min_size=0, max_size=6))
def test_fuzzed_hetudit_rows_are_all_kept_exactly_or_refused(tmp_path: Path, rows: list) -> None:
    path = write(tmp_path, "".join(hetu(t, h, w) for t, h, w in rows), "f.txt")
    wl._hetudit_cached.cache_clear()  # same path, new content within one mtime tick
    try:
        parsed = wl.hetudit_rows(path)
    except TraceFormatError as exc:
        assert "f.txt" in str(exc)
        return
    assert len(parsed) == len(rows)
    for got, (t, h, w) in zip(parsed, rows):
        assert got["timestamp"] == float(t) and got["height"] == float(h) and got["width"] == float(w)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([b"", b"\xef\xbb\xbf", HEADER.encode(), b"TIMESTAMP,x\n", b"Request(", b"0,"]),
       st.binary(max_size=300))
def test_fuzzed_bytes_give_typed_errors_only(tmp_path: Path, sc, head: bytes, raw: bytes) -> None:
    path = write(tmp_path, head + raw, "raw.csv")
    wl._azure_cached.cache_clear()
    wl._hetudit_cached.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRowsSkipped)
        try:
            sc.requests(seed=0, trace=path)
        except ConfigError as exc:  # TraceFormatError is one
            assert "raw.csv" in str(exc)


# ------------------------------------------------------------------ bounds (issue 34)
@pytest.mark.parametrize("name, body", [
    ("t.csv", "".join(f"{i},512,512,1,20,batch\n" for i in range(6))),
    ("t.txt", "".join(hetu(str(i)) for i in range(6))),
    ("a.csv", "TIMESTAMP,x\n" + "".join(f"2023-11-16 18:15:{i:02d}.0,1\n" for i in range(6))),
])
def test_a_trace_past_the_row_bound_is_refused_before_parsing(tmp_path: Path, sc, monkeypatch, name: str,
                                                              body: str) -> None:
    """Bug: a 10-million-row trace was read and replayed for minutes without a word. The bound
    (``bounds.MAX_TRACE_ROWS``, 2 million rows) is checked from the file's line breaks first."""
    monkeypatch.setattr(wl, "MAX_TRACE_ROWS", 4)
    text = (HEADER if name == "t.csv" else "") + body
    path = write(tmp_path, text, name)
    with pytest.raises(TraceFormatError, match=r":6: past the trace row bound: \d lines, at most 4 rows are replayed"):
        sc.requests(seed=0, trace=path) if name != "a.csv" else wl.azure_arrivals(path)
    monkeypatch.setattr(wl, "MAX_TRACE_BYTES", 10)
    with pytest.raises(ConfigError, match=r"trace of \d+ bytes; at most 10 are read"):
        sc.requests(seed=0, trace=path)


@pytest.mark.parametrize(("field", "value"), [("height", "1000001"), ("num_frames", "10000000"),
                                              ("num_inference_steps", "100001")])
def test_trace_shapes_have_the_schemas_bounds(tmp_path: Path, sc, field: str, value: str) -> None:
    row = {"height": "512", "width": "512", "num_frames": "1", "num_inference_steps": "20"} | {field: value}
    path = write(tmp_path, HEADER + f"0,{row['height']},{row['width']},{row['num_frames']},"
                                    f"{row['num_inference_steps']},batch\n")
    with pytest.raises(TraceFormatError, match=rf"t.csv:2: invalid request field '{field}'='{value}': must be an "
                                               r"integer >= 1 and <= \d+"):
        sc.requests(seed=0, trace=path)


def test_a_multi_frame_row_for_an_image_model_is_refused(tmp_path: Path, sc) -> None:
    path = write(tmp_path, HEADER + "0,512,512,1,20,batch\n1,512,512,16,20,batch\n")
    with pytest.raises(TraceFormatError, match=r"t.csv:3: invalid request field 'num_frames'=16: model 'qwen-image' "
                                               r"generates images"):
        sc.requests(seed=0, trace=path)
