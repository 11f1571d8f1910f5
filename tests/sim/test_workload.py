"""Arrival processes, trace readers (typed errors name file and line), scenarios."""

from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import ConfigError, InvalidRequest, TraceFormatError
from rlsched.sim import load_scenario, scenario_names
from rlsched.sim import workload as wl
from rlsched.sim.scenario import ENVS_DIR

TRACES = ENVS_DIR / "traces"


def test_poisson_rate_and_renewal_cv() -> None:
    rng = np.random.default_rng(0)
    t = wl.poisson(rng, 2.0, 5000.0)
    assert t.size / 5000.0 == pytest.approx(2.0, rel=0.05)
    for dist in ("gamma", "weibull"):
        gaps = np.diff(wl.renewal(rng, 1.0, 50000.0, cv=3.0, dist=dist))
        assert gaps.mean() == pytest.approx(1.0, rel=0.1)
        assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.15)


def test_onoff_and_diurnal_keep_mean_rate() -> None:
    rng = np.random.default_rng(1)
    assert wl.on_off(rng, 1.0, 40000.0).size / 40000.0 == pytest.approx(1.0, rel=0.1)
    d = wl.diurnal(rng, 1.0, 86400.0, period_s=86400.0, amplitude=0.8)
    assert d.size / 86400.0 == pytest.approx(1.0, rel=0.05)
    assert (d < 43200).sum() > 1.5 * (d >= 43200).sum()  # sin peak in the first half-day


def test_shipped_traces_parse() -> None:
    az = wl.azure_arrivals(TRACES / "azure_llm_2023_code.csv")
    assert az.size == 8819 and az[0] == 0 and 3000 < az[-1] < 4000
    rows = wl.hetudit_rows(TRACES / "hetudit_hunyuanvideo_trace.txt")
    assert len(rows) == 1800 and {r["num_inference_steps"] for r in rows} == {50}
    sg = wl.servegen(np.random.default_rng(0), TRACES / "servegen_mm_image_chunk-11-trace.csv", 3600)
    assert sg.size > 100 and np.all(np.diff(sg) >= 0)


def test_malformed_hetudit_line_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "t.txt"
    bad.write_text("Request(request_id=0, timestamp=0.0, height=512, width=512, num_frames=1, "
                   "num_inference_steps=28)\nRequest(request_id=1, timestamp=oops)\n")
    with pytest.raises(TraceFormatError) as err:
        wl.hetudit_rows(bad)
    assert err.value.line == 2 and str(bad) in str(err.value)


def test_rlsched_csv_replay_and_errors(tmp_path: Path) -> None:
    sc = load_scenario("default")
    good = tmp_path / "w.csv"
    good.write_text("arrival_s,height,width,num_frames,num_inference_steps,priority,slo_s\n"
                    "0.0,512,512,1,50,realtime,20\n1.5,1024,1024,1,30,background,\n")
    reqs = sc.requests(seed=0, trace=good)
    assert [(r.arrival_s, r.height, r.priority) for r in reqs] == [(0.0, 512, "realtime"), (1.5, 1024, "background")]
    assert reqs[0].slo_s == 20 and reqs[1].slo_s > 0
    bad = tmp_path / "b.csv"
    bad.write_text("arrival_s,height,width,num_frames,num_inference_steps,priority\n0,512,512,1,50,batch\n"
                   "1,512,-5,1,50,batch\n")
    with pytest.raises(TraceFormatError, match=r"b.csv:3.*width"):
        sc.requests(seed=0, trace=bad)
    header = tmp_path / "h.csv"
    header.write_text("arrival,height\n")
    with pytest.raises(TraceFormatError, match=r"h.csv:1"):
        sc.requests(seed=0, trace=header)


def test_rate_scale_multiplies_rate_and_compresses_traces() -> None:
    sc = load_scenario("default")
    n1, n2 = len(sc.requests(0, 1.0)), len(sc.requests(0, 2.0))
    assert n2 / n1 == pytest.approx(2.0, rel=0.15)
    az = load_scenario("trace-azure")
    t1 = [r.arrival_s for r in az.requests(0, 1.0, duration_s=1e4)]
    t2 = [r.arrival_s for r in az.requests(0, 2.0, duration_s=5e3)]
    assert t2 == pytest.approx([t / 2 for t in t1])
    with pytest.raises(InvalidRequest, match="rate_scale"):
        sc.requests(0, -1.0)


@pytest.mark.parametrize("name", scenario_names())
def test_shipped_scenarios_generate(name: str) -> None:
    sc = load_scenario(name)
    reqs = sc.requests(seed=0, duration_s=min(sc.duration_s, 20000))
    assert reqs and all(r.slo_s > 0 for r in reqs)
    assert sc.serving.max_num_seqs >= 2
    assert {r.priority for r in reqs} <= set(sc.classes)


def test_slo_is_class_scale_times_standalone() -> None:
    sc = load_scenario("default")
    cost = sc.cost()
    for r in sc.requests(0, duration_s=3600)[:50]:
        assert r.slo_s == pytest.approx(sc.classes[r.priority].slo_scale * cost.standalone_s(r))


def test_unknown_scenario_and_bad_profile(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_scenario("nope")
    bad = tmp_path / "s.yaml"
    bad.write_text("name: x\nprofile: qwen-image-h200\nduration_s: 10\narrival: {process: poisson, rate_rps: 1}\n"
                   "classes: {v.i.p: {share: 1, slo_scale: 2}}\nmix: [{model: qwen-image, modality: image, "
                   "height: 512, width: 512}]\n")
    with pytest.raises(ConfigError, match="v.i.p"):
        load_scenario(bad)
