"""Issue 18, input side: malformed scenarios, profiles and config files are a ``ConfigError`` naming
the file, line and field, or load into bounded behaviour — never a silent wrong result, a hang or
a traceback. Each test's docstring names the bug it pins (all failed before the fix)."""

from __future__ import annotations

import copy
import dataclasses
import math
import typing
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from rlsched.agents.config import load_agent_config
from rlsched.errors import ConfigError, TraceFormatError
from rlsched.policies import make_policy
from rlsched.resources import data_dir
from rlsched.sim import scenario as scenario_module
from rlsched.sim import schema, yamlio
from rlsched.sim import workload as wl
from rlsched.sim.cost import PROFILE_DIR, load_profile
from rlsched.sim.scenario import MAX_EXPECTED_ARRIVALS, ClassSpec, load_scenario, scenario_from_dict
from rlsched.sim.simulator import Simulator
from rlsched.sim.yamlio import read_yaml

GOOD: dict[str, Any] = {
    "name": "x", "profile": "qwen-image-h200", "duration_s": 60,
    "arrival": {"process": "poisson", "rate_rps": 0.5},
    "classes": {"batch": {"share": 1, "slo_scale": 3}},
    "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512}],
}
SCENARIO_TEXT = """\
name: x
profile: qwen-image-h200
duration_s: 60
arrival:
  process: poisson
  rate_rps: 0.5
  rate_rps: 50
classes:
  batch: {share: 1, slo_scale: 3}
mix:
  - {model: qwen-image, modality: image, height: 512, width: 512}
"""


# ------------------------------------------------------------------ 1. duplicate keys


def test_duplicate_key_in_a_scenario_is_refused_naming_line_and_key(tmp_path: Path) -> None:
    """Bug: ``rate_rps`` given twice was accepted and the last (50, not 0.5) silently won."""
    path = tmp_path / "dup.yaml"
    path.write_text(SCENARIO_TEXT)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.where == f"{path}:7: arrival.rate_rps"
    assert "duplicate key (first on line 6" in str(err.value)


def test_duplicate_key_in_a_flow_mapping_and_a_list_item(tmp_path: Path) -> None:
    """Bug: duplicates inside ``{...}`` and list items were accepted too (last wins)."""
    path = tmp_path / "dup.yaml"
    text = SCENARIO_TEXT.replace("  rate_rps: 50\n", "")
    text = text.replace("height: 512, width", "height: 512, height: 4096, width")
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert err.value.where == f"{path}:10: mix[0].height"


def test_duplicate_key_in_a_profile_is_refused(tmp_path: Path) -> None:
    """Bug: a profile's coefficient given twice (``a_s``) silently took the last value."""
    text = (PROFILE_DIR / "qwen-image-h200.yaml").read_text()
    text = text.replace("    encode_s: 0.0355\n", "    encode_s: 0.0355\n    encode_s: 9\n")
    path = tmp_path / "p.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"models\.qwen-image\.encode_s: duplicate key") as err:
        load_profile(path)
    assert err.value.where.startswith(f"{path}:")


def test_duplicate_key_in_an_agent_preset_is_refused(tmp_path: Path) -> None:
    """Bug: every YAML reader (agent presets too) let a duplicate key's last value win."""
    text = (data_dir("agents") / "ppo.yaml").read_text()
    path = tmp_path / "a.yaml"
    path.write_text(text + "\n" + text.splitlines()[_first_key_line(text)] + "\n")
    with pytest.raises(ConfigError, match="duplicate key"):
        load_agent_config(path)


def _first_key_line(text: str) -> int:
    return next(i for i, line in enumerate(text.splitlines()) if line and line[0].isalpha() and ":" in line)


def test_merge_keys_still_override_and_anchors_still_work(tmp_path: Path) -> None:
    """Not a bug: ``<<: *base`` followed by a key overrides it by design, and is not a duplicate."""
    path = tmp_path / "m.yaml"
    path.write_text("base: &b {x: 1, y: 2}\nd:\n  <<: *b\n  x: 3\ne: *b\n")
    assert read_yaml(path) == {"base": {"x": 1, "y": 2}, "d": {"x": 3, "y": 2}, "e": {"x": 1, "y": 2}}


# ------------------------------------------------------------------ 6. bounded YAML


def test_yaml_over_the_size_cap_is_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: a config file of any size was read and parsed whole (16 MiB cap now)."""
    assert yamlio.MAX_YAML_BYTES == 16 << 20
    monkeypatch.setattr(yamlio, "MAX_YAML_BYTES", 1024)
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump(GOOD) + "#" * 2000 + "\n")
    with pytest.raises(ConfigError, match="larger than"):
        load_scenario(path)


def test_billion_laughs_is_refused(tmp_path: Path) -> None:
    """Bug: aliases expanded without bound (nine levels of ten: 10^9 nodes from 300 bytes)."""
    lines = ["l0: &l0 [a, a, a, a, a, a, a, a, a, a]"]
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)]
    path = tmp_path / "lol.yaml"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigError, match=r"lol.yaml:\d+: expands to more than 100,000 nodes"):
        read_yaml(path)


@pytest.mark.parametrize(("text", "message"), [
    ("a: &a [1, *a]\n", "recursive alias"),
    ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
    ("a: " + "{b: " * 65 + "1" + "}" * 65 + "\n", "nested deeper than 64 levels"),
    ("a: " + "9" * 5000 + "\n", "cannot read value: Exceeds the limit"),
    ("a: 2001-13-45\n", "cannot read value: month must be in 1..12"),
])
def test_recursive_deep_or_unreadable_yaml_is_a_config_error(tmp_path: Path, text: str, message: str) -> None:
    """Bug: a recursive alias loaded as a self-containing list; deep nesting raised RecursionError;
    a 5000-digit integer or a 13th month raised ValueError (tracebacks, not ConfigError)."""
    path = tmp_path / "f.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as err:
        read_yaml(path)
    assert err.value.where == f"{path}:1"


# ------------------------------------------------------------------ 2. profiles


def _profile(tmp_path: Path, edit: Any) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "qwen-image-h200.yaml").read_text())
    edit(data)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _set(path: str, value: Any) -> Any:
    def edit(data: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = data
        for key in parents:
            node = node[key]
        node[last] = value
    return edit


M = "models.qwen-image"


@pytest.mark.parametrize(("key", "value", "reason"), [
    (f"{M}.act_gb_per_ktok", -0.25, "greater than or equal to 0"),
    (f"{M}.step.a_s", -10, "greater than or equal to 0"),
    (f"{M}.step.c_s_per_gtok2", -50, "greater than or equal to 0"),
    (f"{M}.decode_s_per_mpx", -1, "greater than or equal to 0"),
    (f"{M}.vae_gb_per_mpx", float("nan"), "finite"),
    (f"{M}.step.b_s_per_mtok", float("inf"), "finite"),
    (f"{M}.step.b_s_per_mtok", 1e308, "less than or equal to"),
    (f"{M}.encode_s", "fast", "valid number"),
    (f"{M}.patch_px", 0, "greater than or equal to 1"),
    (f"{M}.temporal_stride", 0, "greater than or equal to 1"),
    (f"{M}.cfg_passes", 0, "greater than or equal to 1"),
    (f"{M}.weights_gb", -66, "greater than or equal to 0"),
    ("gpu.memory_gb", 0, "greater than 0"),
    ("gpu.peak_bf16_tflops", -1, "greater than or equal to 0"),
    (f"{M}.flops.attn_flop_per_token2", -1, "greater than or equal to 0"),
    (f"{M}.memory_form", "peak", "'sum' or 'max'"),
    (f"{M}.token_rule", "pixels", "'latent' or 'sequence'"),
    (f"{M}.modality", "hologram", "'image'"),
    (f"{M}.act_gb_per_ktk", 0.25, "unknown key"),
    (f"{M}.step.d_s", 1.0, "unknown key"),
    ("gpu.memroy_gb", 141, "unknown key"),
    ("vendor", "x", "unknown key"),
])
def test_bad_profile_values_name_file_line_and_field(tmp_path: Path, key: str, value: Any, reason: str) -> None:
    """Bug: profiles took negative coefficients and memory (``act_gb_per_ktok: -0.25`` let a 299 GB
    shape run; ``a_s: -10, c_s_per_gtok2: -50`` made default x1.5 look 95 % good), zero patch sizes
    (ZeroDivisionError later), non-finite numbers and unknown keys (silently ignored)."""
    path = _profile(tmp_path, _set(key, value))
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert err.value.where.startswith(f"{path}:") and err.value.where.endswith(f": {key}"), err.value.where
    assert reason in str(err.value)


def test_negative_decode_term_names_the_profile_coefficient(tmp_path: Path) -> None:
    """Bug: a negative decode term surfaced at run time as "invalid request field 'slo_s'"."""
    path = _profile(tmp_path, _set(f"{M}.decode_s_per_mpx", -100))
    lines = path.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if "decode_s_per_mpx" in text)
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({**GOOD, "profile": str(path)}, "s.yaml").requests(seed=0)
    assert err.value.where == f"{path}:{line}: {M}.decode_s_per_mpx"


def test_a_step_that_takes_no_time_and_weights_past_the_gpu_are_refused(tmp_path: Path) -> None:
    """Bug: all-zero step coefficients loaded (every request took 0 s: an SLO of 0 s failed later)."""
    zero = {"floor_s": 0, "a_s": 0, "b_s_per_mtok": 0, "c_s_per_gtok2": 0}
    with pytest.raises(ConfigError, match=rf"{M}\.step: a step must take time"):
        load_profile(_profile(tmp_path, _set(f"{M}.step", zero)))
    with pytest.raises(ConfigError, match="do not fit in GPU memory"):
        load_profile(_profile(tmp_path, _set(f"{M}.weights_gb", 141)))


@pytest.mark.parametrize("edit, key", [
    (lambda d: d.pop("sources"), "sources"), (lambda d: d.__setitem__("sources", []), "sources"),
    (lambda d: d.pop("stack"), "stack"), (lambda d: d["stack"].__setitem__("kernel", "fa3"), "stack.kernel"),
    (lambda d: d.__setitem__("models", {}), "models"), (lambda d: d["models"]["qwen-image"].pop("step"), f"{M}.step"),
])
def test_missing_sources_stack_or_models(tmp_path: Path, edit: Any, key: str) -> None:
    """Bug (smaller): these were refused as "missing or malformed field", naming neither key nor line."""
    path = _profile(tmp_path, edit)
    with pytest.raises(ConfigError) as err:
        load_profile(path)
    assert err.value.where.endswith(f": {key}")


def test_every_shipped_profile_loads_with_its_file_values() -> None:
    """Regression guard: the strict schema accepts every shipped profile and changes no number."""
    paths = sorted(PROFILE_DIR.glob("*.yaml"))
    assert paths
    for path in paths:
        raw = yaml.safe_load(path.read_text())
        cost = load_profile(path)
        assert cost.gpu_memory_gb == raw["gpu"]["memory_gb"] and cost.sources == tuple(raw["sources"])
        for name, spec in raw["models"].items():
            m = cost.model(name)
            flat = {**spec["step"], **(spec.get("flops") or {}),
                    **{k: v for k, v in spec.items() if k not in ("step", "flops", "sp", "cfg_parallel")}}
            assert {k: getattr(m, k) for k in flat} == flat, (path, name)
            if "sp" in spec:  # sequence-parallel coefficients
                assert {k: getattr(m.sp, k) for k in spec["sp"]} == spec["sp"], (path, name)
            if "cfg_parallel" in spec:  # CFG-parallel coefficients (derived)
                block = spec["cfg_parallel"]
                assert {k: getattr(m.cfg_parallel, k) for k in block} == block, (path, name)


# ------------------------------------------------------------------ 3. request and period caps


@pytest.mark.timeout(60)
def test_onoff_with_tiny_sojourns_is_refused_not_run_forever() -> None:
    """Bug: ``onoff`` with ``on_s: 1e-7, off_s: 1e-7`` alternated through ~1e11 sojourns (never ended)."""
    data = {**GOOD, "duration_s": 7200, "arrival": {"process": "onoff", "rate_rps": 0.5, "on_s": 1e-7, "off_s": 1e-7}}
    with pytest.raises(ConfigError, match=r"arrival.on_s: Input should be greater than or equal to 0.001"):
        scenario_from_dict(data, "s.yaml")
    data["arrival"].update(on_s=1e-3, off_s=1e-3)  # in range, but 7.2 million sojourns in the window
    with pytest.raises(ConfigError, match=r"s.yaml: arrival.on_s: .*7.2e\+06 on/off sojourns"):
        scenario_from_dict(data, "s.yaml").requests(seed=0)


def test_servegen_rate_scale_is_capped_before_allocating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: the 20-million-request cap skipped ``servegen``: ``bursty --rate-scale 1e9`` tried to
    allocate 151 GiB. Now the expected count (Σ rate × scale × window) is refused before any draw."""
    drawn = []
    real = wl.renewal
    monkeypatch.setattr(wl, "renewal", lambda rng, rate, span, **kw: drawn.append(rate * span) or real(
        rng, rate, span, **kw) if rate * span < 1e6 else pytest.fail(f"drew {rate * span:.3g} arrivals"))
    sc = load_scenario("bursty")
    with pytest.raises(ConfigError, match=r"bursty.yaml: arrival.rate_scale: .* expects 1.17e\+11 requests "
                                          r"\(more than 20,000,000\)"):
        sc.requests(seed=0, rate_scale=1e9)
    assert not drawn
    assert len(sc.requests(seed=0)) > 0 and drawn  # an ordinary scale still draws


@pytest.mark.parametrize("process", ["poisson", "gamma", "weibull", "onoff", "diurnal"])
def test_every_rate_process_is_capped(process: str) -> None:
    """Bug: the cap was checked on the mean rate only; diurnal thins candidates drawn at its peak."""
    sc = scenario_from_dict({**GOOD, "arrival": {"process": process, "rate_rps": 1e12}}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s.yaml: arrival.rate_rps: .*duration_s 60 s expects"):
        sc.requests(seed=0)
    rate = MAX_EXPECTED_ARRIVALS / 60 / 1.2  # under the cap on average, over it at the diurnal peak (x1.5)
    sc = scenario_from_dict({**GOOD, "arrival": {"process": "diurnal", "rate_rps": rate}}, "s.yaml")
    with pytest.raises(ConfigError, match="arrival.rate_rps"):
        sc.requests(seed=0)


def test_a_renewal_that_never_covers_its_window_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bug: a very bursty renewal extended its draw in a loop without bound (and quadratic copying)."""
    monkeypatch.setattr(wl, "MAX_DRAWN", 2000)
    with pytest.raises(ConfigError, match=r"arrival.cv: a gamma process with cv 100 drew"):
        for seed in range(50):  # with cv 100 most gaps are ~0: a draw rarely covers the window
            wl.renewal(np.random.default_rng(seed), 1.0, 1e4, cv=100.0, dist="gamma")


def test_servegen_cv_past_the_bound_is_a_trace_error(tmp_path: Path) -> None:
    """Bug: a ServeGen window with cv 1e300 raised OverflowError (cv**2) while drawing."""
    path = tmp_path / "sg.csv"
    path.write_text("0,0.5,2,gamma\n600,0.5,1e300,gamma\n")
    with pytest.raises(TraceFormatError, match=r"sg.csv:2: cv 1e\+300 is past 100"):
        wl.servegen(np.random.default_rng(0), path, 1200)


# ------------------------------------------------------------------ 4. shares


@pytest.mark.parametrize("big", [1e308, 1.7e308])
def test_huge_class_shares_and_mix_weights_are_normalised(big: float) -> None:
    """Bug: two classes of ``share: 1e308`` summed to inf and numpy raised "probabilities do not sum to 1"."""
    data = copy.deepcopy(GOOD)
    data["duration_s"] = 2000
    data["classes"] = {"batch": {"share": big, "slo_scale": 3}, "realtime": {"share": big, "slo_scale": 2}}
    data["mix"].append({**data["mix"][0], "height": 1024, "width": 1024, "weight": big})
    data["mix"][0]["weight"] = big
    reqs = scenario_from_dict(data, "s.yaml").requests(seed=0)
    batch = sum(r.priority == "batch" for r in reqs) / len(reqs)
    small = sum(r.height == 512 for r in reqs) / len(reqs)
    assert 0.4 < batch < 0.6 and 0.4 < small < 0.6, (batch, small)


def test_sample_index_keeps_proportions_of_any_finite_weights() -> None:
    """Bug: weights overflowing their sum (or subnormal ones) broke numpy's choice."""
    for weights in ([1e308, 1e308, 1e308], [5e-324, 5e-324], [1e-320, 3e-320], [1e308, 0.0]):
        idx = wl.sample_index(np.random.default_rng(0), weights, 40_000)
        p = np.asarray(weights) / max(weights)
        share = np.bincount(idx, minlength=len(weights)) / idx.size
        assert np.allclose(share, p / p.sum(), atol=0.02), (weights, share)
    for bad in ([], [0.0, 0.0], [1.0, float("nan")], [1.0, -1.0], [float("inf")]):
        with pytest.raises(ConfigError, match="weights"):
            wl.sample_index(np.random.default_rng(0), bad, 3)


def test_an_slo_past_float_range_names_the_class() -> None:
    """Bug: ``slo_scale`` x standalone time overflowing to inf became an SLO of "none" (always met)."""
    sc = scenario_from_dict(GOOD, "s.yaml")
    sc = dataclasses.replace(sc, classes={"batch": ClassSpec(1.0, 1e308)})  # past the schema, as a library user
    with pytest.raises(ConfigError, match=r"s.yaml: classes.batch.slo_scale: .*SLO of inf s"):
        sc.requests(seed=0)


# ------------------------------------------------------------------ 6. every numeric field at its extremes

SERVEGEN = "traces/servegen_mm_image_chunk-11-trace.csv"
ARRIVALS = {
    "poisson": {"process": "poisson", "rate_rps": 0.5},
    "gamma": {"process": "gamma", "rate_rps": 0.5, "cv": 2.0},
    "weibull": {"process": "weibull", "rate_rps": 0.5, "cv": 2.0},
    "onoff": {"process": "onoff", "rate_rps": 0.5},
    "diurnal": {"process": "diurnal", "rate_rps": 0.5, "period_s": 120},
    "servegen": {"process": "servegen", "path": SERVEGEN},
    "trace": {"process": "trace", "path": "traces/azure_llm_2023_code.csv", "time_scale": 0.0065},
}
FIELDS: list[tuple[str, str]] = [  # (arrival process, key path); every int or float field of the schema
    ("poisson", "duration_s"),
    ("poisson", "serving.max_num_seqs"), ("poisson", "serving.request_batch_max_wait_ms"),
    ("poisson", "serving.engine_overhead_ms"), ("poisson", "serving.engine_overhead_ms_per_mpx"),
    ("poisson", "serving.quota_window_s"),
    ("poisson", "arrival.rate_rps"), ("gamma", "arrival.rate_rps"), ("gamma", "arrival.cv"),
    ("weibull", "arrival.cv"), ("onoff", "arrival.rate_rps"), ("onoff", "arrival.on_s"), ("onoff", "arrival.off_s"),
    ("onoff", "arrival.burst_factor"), ("diurnal", "arrival.rate_rps"), ("diurnal", "arrival.period_s"),
    ("diurnal", "arrival.amplitude"), ("diurnal", "arrival.phase_s"), ("servegen", "arrival.rate_scale"),
    ("servegen", "duration_s"), ("trace", "arrival.time_scale"),
    ("poisson", "classes.batch.share"), ("poisson", "classes.batch.slo_scale"),
    ("poisson", "classes.batch.weight"), ("poisson", "classes.batch.quota"),
    ("poisson", "mix.0.height"), ("poisson", "mix.0.width"), ("poisson", "mix.0.num_frames"),
    ("poisson", "mix.0.steps"), ("poisson", "mix.0.weight"), ("poisson", "mix.0.prefix_groups"),
    ("poisson", "replicas.0.count"),
    ("poisson", "truth.time_scale"), ("poisson", "truth.quadratic_scale"), ("poisson", "truth.memory_scale"),
    ("poisson", "truth.encode_scale"), ("poisson", "truth.decode_scale"), ("poisson", "truth.comm_scale"),
    ("poisson", "truth.cache.skip_mean"), ("poisson", "truth.cache.skip_spread"),
    ("poisson", "truth.cache.check_share"),
    ("poisson", "truth.cache.seed"),
]
EXTREMES: list[Any] = [0, -0.0, 5e-324, 1e-300, 1e-7, 1e-3, 0.5, 1, 3, 1e6, 1e9, 1e12, 1e308, -1e308, -1,
                       math.nan, math.inf, -math.inf, 10**30, 2**63, 10**400, "1e999", "nan"]


def _numeric_fields(model: type[BaseModel], prefix: str, out: set[str]) -> set[str]:
    """Key paths of every int/float field reachable from ``model`` (lists as ``.0``, dict values as ``.batch``)."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        todo = [info.annotation]
        while todo:
            tp = todo.pop()
            if tp in (int, float):
                out.add(path)
            elif isinstance(tp, type) and issubclass(tp, BaseModel):
                _numeric_fields(tp, f"{path}.", out)
            else:
                args = typing.get_args(tp)
                origin = typing.get_origin(tp)
                if origin is dict:
                    _numeric_fields(args[1], f"{path}.batch.", out)
                elif origin is tuple:
                    _numeric_fields(args[0], f"{path}.0.", out)
                else:
                    todo.extend(a for a in args if a is not type(None))
    return out


def test_the_extremes_test_covers_every_numeric_scenario_field() -> None:
    """A numeric field added to the scenario schema must be added to FIELDS (and get bounds)."""
    found = _numeric_fields(schema.ScenarioFile, "", set())
    assert found == {path for _, path in FIELDS}


def _with(process: str, path: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(GOOD)
    data["arrival"] = copy.deepcopy(ARRIVALS[process])
    if path.startswith("replicas."):
        data["replicas"] = [{"count": 1}]
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    node[last] = value
    return data


def _names(path: str) -> tuple[str, ...]:
    """What an error about ``path`` may name: its key (``mix[0].height``), its leaf, or its mix entry."""
    parts = path.split(".")
    key = ".".join(parts).replace(".0.", "[0].")
    return (key, parts[-1]) + (("mix[0]",) if parts[0] == "mix" else ())


SMALL_CAP = 20_000
"""The request cap while fuzzing (the real one, 20 million, would make a legal case take minutes)."""


def _check_extreme(process: str, path: str, value: Any) -> None:
    """Either a ConfigError naming the field, or a bounded load: requests inside the window, SLOs
    finite and positive, a FIFO run that ends — never another exception."""
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(scenario_module, "MAX_EXPECTED_ARRIVALS", SMALL_CAP)
            sc = scenario_from_dict(_with(process, path, value), "x.yaml")
            reqs = sc.requests(seed=0)
    except ConfigError as exc:
        assert str(exc).startswith("x.yaml") or SERVEGEN in str(exc), str(exc)
        assert any(name in str(exc) for name in _names(path)), (path, value, str(exc))
        return
    assert len(reqs) <= (wl.MAX_DRAWN if path == "arrival.cv" else max(SMALL_CAP, 8818))  # 8818: the trace's rows
    assert all(0 <= r.arrival_s < sc.duration_s and 0 < r.slo_s < math.inf for r in reqs), (path, value)
    if path.startswith("serving") and reqs:
        sim = Simulator(reqs[:20], sc.cost(), sc.serving).run(make_policy("fifo"))
        assert math.isfinite(sim.now) and len(sim.records) == len(reqs[:20])
    if path.startswith("replicas"):
        assert 1 <= len(sc.replica_specs()) <= schema.MAX_REPLICAS
    if path.startswith("truth") and reqs:  # a legal truth runs to the end (OOM failures are outcomes too)
        sim = Simulator(reqs[:20], sc.cost(), sc.serving, truth=sc.true_cost()).run(make_policy("fifo"))
        assert math.isfinite(sim.now) and all(r.status in ("completed", "failed_oom") for r in sim.records.values())


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("process", "path"), FIELDS, ids=[f"{p}:{k}" for p, k in FIELDS])
def test_extreme_values_in_every_numeric_scenario_field(process: str, path: str) -> None:
    """Bug: many fields had no upper bound or a lower bound of "> 0" only: ``cv: 1e300`` raised
    OverflowError, ``cv: 1e-300`` ZeroDivisionError, ``prefix_groups: 10**30`` OverflowError,
    ``slo_scale: 1e308`` an SLO of inf, ``on_s: 1e-7`` never finished."""
    for value in EXTREMES:
        _check_extreme(process, path, value)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FIELDS), st.one_of(st.floats(allow_nan=True, allow_infinity=True),
                                          st.integers(-2**70, 2**70),
                                          st.floats(min_value=1e-12, max_value=1e12)))
def test_fuzzed_numbers_in_numeric_scenario_fields(field: tuple[str, str], value: Any) -> None:
    """Property: any number in any numeric field is a ConfigError naming it or a bounded load."""
    _check_extreme(*field, value)
