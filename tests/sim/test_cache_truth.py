"""``truth: {cache: ...}``: a cache backend skips a hidden per-request share of each request's denoise steps
(issue 46). The share is reproducible per seed, the same whichever policy runs the request, unseen by the
records policies read and by the calibrator, and shortens true durations by its mean."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest

from rlsched.errors import ConfigError
from rlsched.evaluation import RunSpec, prepare, prepare_stage
from rlsched.policies import make_policy
from rlsched.sim import ServingConfig, Simulator, load_scenario
from rlsched.sim.cache_backend import PRESETS, CacheSkip, beta_shape
from rlsched.sim.cost import load_profile
from rlsched.sim.layout import at_layout
from rlsched.sim.scenario import scenario_from_dict
from rlsched.sim.truth import Truth, decided_on
from tests.conftest import make_request

COST = load_profile("qwen-image-h200")
TEA = Truth(cache={**PRESETS["teacache"], "preset": "teacache"})
COST_OF_DEFAULT = load_profile("qwen-image-h200-vllm-omni")
REPO = Path(__file__).resolve().parents[2]


def _requests(n: int = 400) -> list:
    return [make_request(i, t=0.37 * i, size=1024) for i in range(n)]


def _factors(true, reqs) -> np.ndarray:
    return np.array([true.record(r).step_s / COST.record(r).step_s for r in reqs])


def test_each_request_skips_its_own_share_and_the_mean_is_the_backends() -> None:
    true = TEA.apply(COST)
    assert true is not None and true.cache is not None and COST.cache is None
    f = _factors(true, _requests(2000))
    assert f.std() > 0.1  # per request, not one scale
    assert f.mean() == pytest.approx(1 - 0.4, abs=0.01) and f.std() == pytest.approx(0.15, abs=0.01)
    r = make_request(0, size=1024)
    rec, believed = true.record(r), COST.record(r)
    assert rec.encode_s == believed.encode_s and rec.decode_s == believed.decode_s and rec.mem_gb == believed.mem_gb
    assert rec.work_s == pytest.approx(rec.encode_s + 50 * believed.step_s * true.cache.factor(r) + rec.decode_s)


def test_a_skipped_step_pays_its_check() -> None:
    plain, checked = CacheSkip(0.5, 0.0, "fixed"), CacheSkip(0.5, 0.0, "fixed", check_share=0.2)
    r = make_request(0)
    assert plain.factor(r) == 0.5 and checked.factor(r) == pytest.approx(1 - 0.5 * 0.8)


def test_shares_are_reproducible_per_seed_and_differ_across_seeds_and_workloads() -> None:
    reqs = _requests(50)
    a, b = _factors(TEA.apply(COST), reqs), _factors(TEA.apply(COST), reqs)
    assert np.array_equal(a, b)
    other = dataclasses.replace(TEA, cache=dataclasses.replace(TEA.cache, seed=7))
    assert not np.allclose(a, _factors(other.apply(COST), reqs))
    moved = [dataclasses.replace(r, arrival_s=r.arrival_s + 1.0) for r in reqs]  # another workload's request i
    assert not np.allclose(a, _factors(TEA.apply(COST), moved))


def test_a_batch_skips_its_members_mean() -> None:
    true = TEA.apply(COST)
    recs = [true.record(r) for r in _requests(3)]
    base = COST.batch_step_time([COST.record(r.request) for r in recs])
    want = base * np.mean([true.cache.factor(r.request) for r in recs])
    assert true.batch_step_time(recs) == pytest.approx(want, rel=1e-12)
    sp = load_profile("qwen-image-h200-vllm-omni")
    wide, r = at_layout(TEA.apply(sp), 2), recs[0].request  # an SP replica's truth keeps the cache
    assert wide.cache is not None
    assert wide.record(r).step_s == pytest.approx(at_layout(sp, 2).record(r).step_s * wide.cache.factor(r))


def _played(policy: str, scenario_truth: Truth = TEA, calibrate: bool = True) -> Simulator:
    sc = dataclasses.replace(load_scenario("default"), truth=scenario_truth)
    sim = prepare(RunSpec("default", policy if calibrate else f"{policy};calibrate=off", seed=1000), sc)
    return sim.run(make_policy(policy))


def test_the_share_is_the_same_whichever_policy_runs_the_request() -> None:
    a, b = _played("sjf"), _played("edf")  # each draws the shares of the requests it runs, in its own order
    drawn_a, drawn_b = a.truth.cache._memo, b.truth.cache._memo
    common = set(drawn_a) & set(drawn_b)
    assert len(common) > 50 and a.truth.cache is not b.truth.cache
    assert all(drawn_a[k] == drawn_b[k] for k in common)
    assert len(set(drawn_a.values())) == len(drawn_a)  # per request


def test_the_share_is_unseen_by_what_decisions_and_the_calibrator_read() -> None:
    sim = _played("sjf")
    assert sim.truth is not None and sim.truth.cache is not None
    assert sim.cost.cache is None and sim.calibrator is not None and sim.calibrator.cost.cache is None
    steps: dict[tuple, set] = {}
    for r in sim.records.values():
        steps.setdefault(r.request.key(), set()).add(r.step_s)
    assert len(steps) >= 4 and sum(map(len, steps.values())) > len(steps)  # re-costed as the calibration moved
    assert all(len(s) <= sim.calibrator.version + 1 for s in steps.values())  # one figure per version, not per request
    assert not any(hasattr(r.request, "skip") or hasattr(r.request, "cache") for r in sim.records.values())


def test_the_calibrator_learns_about_the_mean() -> None:
    sc = dataclasses.replace(load_scenario("default"), truth=TEA)
    sim = prepare(RunSpec("default", "edf", seed=1000), sc).run(make_policy("edf"))
    shapes = {(r.request.height, r.request.width): r.request for r in sim.records.values()}
    learned = [sim.calibrator.cost.record(q).step_s / COST_OF_DEFAULT.record(q).step_s for q in shapes.values()]
    assert len(learned) >= 4 and np.mean(learned) == pytest.approx(TEA.cache.mean_factor(), abs=0.05)


def test_true_durations_shrink_by_the_mean_share() -> None:
    reqs = [make_request(i, t=float(i), size=1024) for i in range(300)]  # one at a time: no batching, no queue
    sims = {}
    for name, truth in (("none", None), ("cache", TEA.apply(COST))):
        sim = Simulator(reqs, COST, ServingConfig("request", 1, 0.0), truth=truth, calibrate=False)
        sims[name] = sim.run(make_policy("fifo"))
    service = {k: np.array([r.finish_s - r.first_scheduled_s for r in s.records.values()]) for k, s in sims.items()}
    rec = COST.record(reqs[0])
    denoise = rec.work_s - rec.encode_s - rec.decode_s
    saved = (service["none"] - service["cache"]) / denoise
    assert saved.mean() == pytest.approx(0.4, abs=0.03) and saved.std() > 0.1


def test_the_oracle_decides_on_each_requests_true_cost() -> None:
    true = TEA.apply(COST)
    cost, runs_at = decided_on("truth", COST, true)
    assert cost is runs_at is true
    works = {round(cost.record(r).work_s, 9) for r in _requests(20)}
    assert len(works) == 20  # one shape, twenty true costs


def test_no_cache_changes_nothing() -> None:
    assert Truth().exact and not TEA.exact and Truth().apply(COST) is None
    assert _played("sjf", Truth(), calibrate=False).truth is None


def test_the_cache_key_reads_presets_and_overrides() -> None:
    base = {"name": "t", "profile": "qwen-image-h200", "duration_s": 60, "arrival": {"rate_rps": 0.1},
            "classes": {"batch": {"share": 1, "slo_scale": 3}},
            "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512}]}
    sc = scenario_from_dict({**base, "truth": {"cache": "cache-dit"}}, "t.yaml")
    assert sc.truth.cache == CacheSkip(**PRESETS["cache-dit"], preset="cache-dit")
    sc = scenario_from_dict({**base, "truth": {"cache": {"preset": "teacache", "seed": 3, "skip_mean": 0.3}}}, "t.yaml")
    assert (sc.truth.cache.skip_mean, sc.truth.cache.seed, sc.truth.cache.skip_spread) == (0.3, 3, 0.15)
    assert sc.true_cost().cache is not None and sc.truth.label() == "cache=teacache"
    with pytest.raises(ConfigError, match=r"truth\.cache\.preset"):
        scenario_from_dict({**base, "truth": {"cache": "tea"}}, "t.yaml")
    with pytest.raises(ConfigError, match=r"needs skip_spread below"):
        scenario_from_dict({**base, "truth": {"cache": {"skip_mean": 0.5, "skip_spread": 0.5}}}, "t.yaml")
    with pytest.raises(ConfigError, match=r"truth\.cache\.skip_mean"):
        scenario_from_dict({**base, "truth": {"cache": {"skip_mean": 0.95}}}, "t.yaml")
    assert Truth.parse("cache=fbcache", "--truth").cache == CacheSkip(**PRESETS["fbcache"], preset="fbcache")


def test_the_beta_has_the_asked_mean_and_spread() -> None:
    a, b = beta_shape(0.4, 0.15)
    assert a / (a + b) == pytest.approx(0.4) and np.sqrt(a * b / ((a + b) ** 2 * (a + b + 1))) == pytest.approx(0.15)


def test_every_replica_of_a_stage_draws_the_same_share() -> None:
    sc = dataclasses.replace(load_scenario("qwen-image-8gpu"), truth=TEA)
    stage = prepare_stage(RunSpec("qwen-image-8gpu", "edf@least-work", seed=1000, duration_s=60), sc)
    r = make_request(5, t=1.5, size=1024)
    shares = {sim.truth.cache.share(r) for sim in stage.replicas}
    assert len(shares) == 1 and all(sim.cost.cache is None for sim in stage.replicas)


@pytest.mark.skipif(not (REPO / "results" / "cache-truth" / "ceiling.json").exists(), reason="no shipped results")
def test_the_shipped_ceiling_table_reproduces_a_small_cell() -> None:
    spec = importlib.util.spec_from_file_location("cache_ceiling", REPO / "scripts" / "cache_ceiling.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    assert mod.check(REPO / "results" / "cache-truth") == 0
