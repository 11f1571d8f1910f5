"""Messages of docs/errors.md from modules without a test file of their own here (episode options,
the router's ``extras.rlsched_router``, ``profile measure``'s flags, tuned action files, stages and the
trace-size bounds), each triggered by the input that earns it (``tests/test_errors_doc.py`` checks
every message has such a test)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from rlsched.errors import ConfigError, InvalidDecision, TraceFormatError
from rlsched.sim import ServingConfig, load_profile, load_scenario
from rlsched.sim import workload as wl
from rlsched.sim.stage import ReplicaSpec, Stage, simulated
from tests.conftest import make_request


# ------------------------------------------------------------------ episode options
@pytest.mark.parametrize("kwargs, message", [
    ({"scenarios": ()}, "env.scenario: needs at least one scenario"),
    ({"modes": ("batchwise",)}, "modes must be among"),
    ({"rate_scale": (2.0, 1.0)}, "needs 0 < low <= high < inf, not (2.0, 1.0)"),
])
def test_episode_options_are_checked(kwargs: dict, message: str) -> None:
    from rlsched.envs.episodes import EpisodeOptions

    with pytest.raises(ConfigError) as err:
        EpisodeOptions(**kwargs)
    assert message in str(err.value)


def test_an_episode_range_that_is_not_a_range() -> None:
    from rlsched.envs.episodes import _range

    with pytest.raises(ConfigError, match=r"expected a number or \(low, high\), not 'x'"):
        _range("env.rate_scale", "x")  # type: ignore[arg-type]


# ------------------------------------------------------------------ the router's settings
@pytest.mark.parametrize("kwargs, message", [
    ({"router": ""}, "must be a router spec, not ''"),
    ({"router": "central:3"}, "central takes no arguments (the central policy is extras.rlsched_router.policy"),
    ({"router": "rlsched", "policy": "edf"}, "only with router: central (late binding), not with 'rlsched'"),
    ({"router": "rlsched;view=replica"}, "view= and delay_ms= are simulator options; in the engine the router always "
                                         "decides on its ledger and the replicas' published states (view=engine"),
])
def test_router_settings_are_checked(kwargs: dict, message: str) -> None:
    from rlsched.integrations.vllm_omni.routing import RouterConfig

    with pytest.raises(ConfigError, match="extras.rlsched_router") as err:
        RouterConfig(**kwargs)
    assert message in str(err.value)


# ------------------------------------------------------------------ profile measure's flags
@pytest.mark.parametrize("text, message", [
    ("512", "'512' is not WIDTHxHEIGHT or WIDTHxHEIGHTxFRAMES"),
    ("500x512", "'500x512': width and height must be multiples of 16"),
])
def test_measure_resolutions(text: str, message: str) -> None:
    from rlsched.profiling.measure import parse_resolutions

    with pytest.raises(ConfigError, match="--resolutions") as err:
        parse_resolutions(text)
    assert message in str(err.value)


def test_measure_dtype() -> None:
    pytest.importorskip("torch")
    from rlsched.profiling.measure import _dtype

    with pytest.raises(ConfigError, match="--dtype: 'int4' is not auto, bf16, fp16 or fp32"):
        _dtype("int4", "cpu")


# ------------------------------------------------------------------ tuned action files
def test_a_tuned_action_file_with_a_bad_action_or_settings(tmp_path: Path) -> None:
    from rlsched.policies.static import load_static

    path = tmp_path / "t.json"
    path.write_text(json.dumps({"action": [0.0, 1.0]}))
    with pytest.raises(ConfigError, match="t.json") as err:
        load_static(str(path))
    assert "'action' must hold 9 numbers, not (2,)" in str(err.value)
    path.write_text(json.dumps({"action": [0.0] * 9, "shed_lost": True}))
    with pytest.raises(ConfigError) as err:
        load_static(str(path))
    assert "projection settings are shared by every projection policy and cannot be set per action file" in str(
        err.value)


def test_shedding_on_an_engine_that_cannot_reject() -> None:
    from rlsched.integrations.vllm_omni.config import PluginConfig
    from rlsched.integrations.vllm_omni.state import PluginState
    from rlsched.policies import make_policy

    state = PluginState(load_profile("qwen-image-h200"), ServingConfig("request", 4), PluginConfig(telemetry=False),
                        lambda: 0.0)
    with pytest.raises(ConfigError, match="projection.shed_lost") as err:
        make_policy("static;shed_lost=true").reset(state)
    assert ("this engine cannot reject requests (the simulator can; the vLLM-Omni plugin serves lost requests "
            "late instead") in str(err.value)


# ------------------------------------------------------------------ stages
def _stage() -> Stage:
    cost = load_profile("qwen-image-h200")
    return Stage([make_request(i, 0.0) for i in range(3)], [ReplicaSpec(f"r{i}", cost, ServingConfig("request", 4))
                                                            for i in range(2)])


def test_a_router_that_chooses_no_replica() -> None:
    from rlsched.policies import make_policy

    class Bad:
        name = "bad"

        def reset(self, stage):  # type: ignore[no-untyped-def]
            pass

        def route(self, request, stage):  # type: ignore[no-untyped-def]
            return 7

    with pytest.raises(InvalidDecision, match="router 'bad' chose replica 7 of 2"):
        _stage().run([make_policy("fifo"), make_policy("fifo")], router=Bad())  # type: ignore[arg-type]


def test_stage_only_refusals() -> None:
    with pytest.raises(ConfigError, match="runs on the simulator's stage only \\(it reads the replicas' true state\\), "
                                          "not on object"):
        simulated(object(), "lookahead")  # type: ignore[arg-type]


# ------------------------------------------------------------------ trace size bounds
def test_a_trace_past_its_size_bounds_is_refused_unparsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,height,width,num_frames,num_inference_steps,priority\n" + "0,512,512,1,4,batch\n" * 5)
    monkeypatch.setattr(wl, "MAX_TRACE_ROWS", 3)
    with pytest.raises(TraceFormatError) as err:
        wl.read_text(path)
    assert "rows are replayed (rlsched.bounds.MAX_TRACE_ROWS, about a minute of reading); cut the trace to a window " \
           "first (head -n" in str(err.value)
    monkeypatch.setattr(wl, "MAX_TRACE_BYTES", 10)
    with pytest.raises(ConfigError) as err:
        wl.read_text(path)
    assert "are read (rlsched.bounds.MAX_TRACE_BYTES): cut it to a window first" in str(err.value)


def test_planning_refuses_a_heterogeneous_pool() -> None:
    from rlsched.planning import plan

    assert load_scenario("qwen-image-hetero").replicas
    with pytest.raises(ConfigError, match="--scenario") as err:
        plan("qwen-image-hetero", None, "fifo", [0], [1.0])
    assert ("declares a heterogeneous pool; plan enumerates layouts of one profile (evaluate the pool as it is "
            "with rlsched eval") in str(err.value)


@pytest.mark.parametrize("load", ["policy", "scenario", "trace"])
def test_an_input_name_with_a_nul_is_refused_not_a_traceback(load: str) -> None:
    """Caught by tests/property/test_spec_surface.py: ``hindsight:\\x00`` (a YAML ``"\\0"`` escape in
    ``extras.rlsched.policy``) ended in ``ValueError: embedded null byte`` from ``os.stat``."""
    from rlsched.policies import make_policy

    calls = {"policy": lambda: make_policy("static:a\x00b.json"), "scenario": lambda: load_scenario("a\x00.yaml"),
             "trace": lambda: load_scenario("default").requests(seed=0, trace="t\x00.csv")}
    with pytest.raises(ConfigError) as err:
        calls[load]()
    assert "name holds a NUL character (\\0)" in str(err.value) and "\x00" not in str(err.value)


# ------------------------------------------------------------------ bench plugin and episodes
def test_bench_plugin_flags_name_unknown_values() -> None:
    import argparse

    from rlsched.bench.plugin import parse

    base = dict(policies="", queues="", modes="", calls=None, rounds=1, decision_threads="")
    with pytest.raises(ConfigError, match=r"--modes: unknown modes \['sideways'\]"):
        parse(argparse.Namespace(**base | {"modes": "sideways"}))
    with pytest.raises(ConfigError, match=r"--decision-threads: unknown values \['gpu'\]"):
        parse(argparse.Namespace(**base | {"decision_threads": "gpu"}))
    with pytest.raises(ConfigError, match="--calibrate: on or off, not 'maybe'"):
        parse(argparse.Namespace(**base | {"calibrate": "maybe"}))


def test_episodes_with_no_arrivals_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import numpy as np

    from rlsched.envs import episodes

    sampler = episodes.EpisodeSampler()
    monkeypatch.setattr(sampler, "_draw", lambda opts, rng: SimpleNamespace(requests=[]))  # every window empty
    with pytest.raises(ConfigError, match="env: no arrivals in") as err:
        sampler.sample(episodes.EpisodeOptions(), np.random.default_rng(0))
    assert "drawn windows of ['default']" in str(err.value)


def test_training_names_a_file_where_its_run_dir_belongs(tmp_path: Path) -> None:
    pytest.importorskip("stable_baselines3")
    from rlsched.agents.config import load_agent_config
    from rlsched.agents.train import train

    (tmp_path / "run").write_text("x")
    with pytest.raises(ConfigError, match="--run-dir: .* is a file; name a folder"):
        train(load_agent_config("agents/ppo.yaml"), tmp_path / "run")
