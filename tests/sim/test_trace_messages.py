"""Each trace-reading message of docs/errors.md, triggered by the smallest file that earns it, with the
file and line it names (``tests/test_errors_doc.py`` checks every message has such a test)."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import ConfigError, TraceFormatError, TraceRowsSkipped
from rlsched.sim import load_scenario
from rlsched.sim import workload as wl

CSV = "arrival_s,height,width,num_frames,num_inference_steps,priority\n"
HETU = "Request(request_id=0, timestamp=0.5, height=512, width=512, num_frames=1, num_inference_steps=8)\n"


@pytest.fixture(scope="module")
def sc():
    return load_scenario("default")


def _replay(sc, path: Path) -> None:
    wl._azure_cached.cache_clear()
    wl._hetudit_cached.cache_clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TraceRowsSkipped)
        sc.requests(seed=0, duration_s=60.0, trace=path)


@pytest.mark.parametrize("name, body, line, message", [
    ("t.csv", CSV, 1, "header only: the trace has no requests"),
    ("t.csv", "arrival_s,height\n0,512\n", 1, "header missing ['width', 'num_frames'"),
    ("t.csv", CSV + "0,512,512,1,8\n", 2, "5 fields, header has 6"),
    ("t.csv", CSV + "0,512,512,1,8,batch\n\xff\n".encode("latin-1").decode("latin-1"), 3, "not UTF-8 text"),
    ("t.csv", "\n0,1\n", 1, "empty first line (expected a trace header or a Request(...) line)"),
    ("t.csv", "hello,world\n", 1, "unknown trace format (Azure CSV 'TIMESTAMP,...', Hetu-DiT 'Request(...)' text "
                                  "or rlsched CSV 'arrival_s,...'), first line"),
    ("t.csv", "TIMESTAMP,x\nyesterday,1\n", 2, "bad TIMESTAMP ['yesterday']"),
    ("t.txt", HETU + "Request(request_id=1, timestamp=1.0)\n", 2, "missing field(s) ['height'"),
])
def test_a_malformed_trace_names_its_line_and_what_is_wrong(tmp_path: Path, sc, name: str, body: str, line: int,
                                                            message: str) -> None:
    path = tmp_path / name
    path.write_bytes(body.encode("latin-1") if "\xff" in body else body.encode())
    with pytest.raises(TraceFormatError) as err:
        _replay(sc, path)
    assert err.value.line == line and str(err.value).startswith(f"{path}:{line}: "), err.value
    assert message in str(err.value)


def test_an_empty_file_is_refused_by_each_reader(tmp_path: Path) -> None:
    path = tmp_path / "e.csv"
    path.write_text("")
    for read, message in [(wl.azure_arrivals, "empty file (expected a TIMESTAMP header)"),
                          (wl.hetudit_rows, "empty file: the trace has no requests"),
                          (wl.rlsched_csv_rows, "empty file (expected a header with arrival_s,...)"),
                          (wl.detect_trace_format, "empty file (expected a trace header or a Request(...) line)")]:
        wl._azure_cached.cache_clear()
        wl._hetudit_cached.cache_clear()
        with pytest.raises(TraceFormatError, match=r"e\.csv:1: ") as err:
            read(path)
        assert message in str(err.value), (read, err.value)


def test_an_azure_trace_needs_its_timestamp_header(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    path.write_text("time,x\n2024-01-01 00:00:00,1\n")
    wl._azure_cached.cache_clear()
    with pytest.raises(TraceFormatError, match="expected header starting with TIMESTAMP"):
        wl.azure_arrivals(path)


def test_a_hetudit_line_that_is_not_a_request(tmp_path: Path) -> None:
    path = tmp_path / "h.txt"
    path.write_text(HETU + "garbage\n")
    wl._hetudit_cached.cache_clear()
    with pytest.raises(TraceFormatError, match=r"h\.txt:2: ") as err:
        wl.hetudit_rows(path)
    assert "expected 'Request(field=value, ...)'" in str(err.value)


@pytest.mark.parametrize("row, message", [
    ("0,x,1,gamma", "expected start_s,rate,cv,dist,... got ['0', 'x', '1', 'gamma']"),
    ("0,-1,1,gamma", "start_s, rate and cv must be finite numbers >= 0"),
    ("0,1,1,lognormal", "unknown distribution 'lognormal'"),
])
def test_a_servegen_window_row_names_its_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "sg.csv"
    path.write_text("0,1,1,gamma\n" + row + "\n")
    with pytest.raises(TraceFormatError, match=r"sg\.csv:2: ") as err:
        wl.servegen(np.random.default_rng(0), path, 60.0)
    assert message in str(err.value)


def test_arrival_process_settings_are_checked_in_the_library_too() -> None:
    """The schema refuses these first; the library functions check them again for code that calls them."""
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="arrival.dist") as err:
        wl.renewal(rng, 1.0, 10.0, cv=1.0, dist="lognormal")
    assert "gamma, weibull, exponential" in str(err.value)
    with pytest.raises(ConfigError) as err:
        wl.check_periods(10.0, 0.0, 1.0)
    assert "on_s and off_s must be > 0, not" in str(err.value)
    with pytest.raises(ConfigError) as err:
        wl.sample_index(rng, [0.0, 0.0], 3)
    assert "must be finite numbers >= 0, one of them > 0, not" in str(err.value)
