"""A long trace replays in bounded memory: rows are read one at a time, and requests and records
of one shape share their values. Sharing must be invisible: same values, types and signs."""

import io
import math
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from rlsched.sim import load_scenario
from rlsched.sim import workload as wl
from rlsched.sim.request import RequestRecord

HEADER = "arrival_s,height,width,num_frames,num_inference_steps,priority\n"
TEXT = st.lists(st.sampled_from(["a", ",", "\"", " ", "\r", "\n", "\r\n", "\v", "\f", "\x1c", "\x85", "\u2028"]),
                max_size=30).map("".join)


@given(TEXT)
def test_lines_split_as_stringio_and_splitlines_do(text: str) -> None:
    assert list(wl._lines(text)) == list(io.StringIO(text, newline=""))
    assert list(wl._splitlines(text)) == text.splitlines()
    assert wl._first_line(text) == (text.splitlines() or [""])[0]


def test_requests_and_records_of_one_shape_share_their_values(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text(HEADER + "".join(f"{t},1024,1024,1,50,batch\n" for t in range(4)))
    sc = load_scenario("default")
    cost = sc.cost()
    a, b = sc.requests(seed=0, trace=path, cost=cost)[1:3]
    assert a.height is b.height and a.priority is b.priority and a.slo_s is b.slo_s
    assert a.key() is b.key() and a.key(step_mode=True) is b.key(step_mode=True)
    ra, rb = cost.record(a), cost.record(b)
    assert (ra.work_s, ra.step_s, ra.mem_gb) == (rb.work_s, rb.step_s, rb.mem_gb)
    assert ra.work_s is rb.work_s and ra.mem_gb is rb.mem_gb


def test_shared_figures_keep_type_and_sign() -> None:
    req = load_scenario("default").requests(seed=0, duration_s=600)[0]

    def record(encode: float, decode: float) -> RequestRecord:
        return RequestRecord(req, 1.5, 2.5, encode, decode, 3.0, 0.25, 4.0, math.inf)

    assert record(1.0, 0.5).tokens is record(1.0, 0.5).tokens
    assert type(record(1, 0.5).encode_s) is int  # 1 == 1.0, but an int stays an int
    assert math.copysign(1.0, record(1.0, -0.0).decode_s) == -1.0
    assert math.isnan(record(1.0, math.nan).decode_s)
