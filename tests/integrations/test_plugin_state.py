"""The plugin's vLLM-free parts: settings, the policy-facing queue state, decision checks."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from types import SimpleNamespace

import pytest

from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import PluginConfig
from rlsched.integrations.vllm_omni.safety import FALLBACK_REASONS, check_decision
from rlsched.integrations.vllm_omni.state import PluginState, hashable, read_request
from rlsched.policies import make_policy
from rlsched.sim import Decision, Request, ServingConfig, Simulator, load_profile
from rlsched.sim.view import ENQUEUED


def sp(height=512, width=512, steps=50, **kw) -> SimpleNamespace:
    """Duck-typed vLLM sampling params (the fields the adapter reads)."""
    base = dict(height=height, width=width, num_frames=1, num_inference_steps=steps, timesteps=None, sigmas=None,
                do_classifier_free_guidance=False, guidance_scale=4.0, true_cfg_scale=None, extra_args={})
    return SimpleNamespace(**{**base, **kw})


@dataclasses.dataclass(frozen=True)
class Key:
    """Like vLLM's frozen key dataclasses, including an unhashable list field."""

    height: int
    sigmas: list | None = None


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make_state(mode: str = "request", **settings) -> tuple[PluginState, Clock]:
    clock = Clock()
    cfg = PluginConfig(telemetry=False, **settings)
    return PluginState(load_profile("qwen-image-h200"), ServingConfig(mode, 4), cfg, clock), clock


# ------------------------------------------------------------------ config
def test_config_from_extras_env_and_defaults() -> None:
    assert PluginConfig.from_extras(object(), {}) == PluginConfig()  # pydantic FieldInfo default
    env = {"RLSCHED_POLICY": "sjf", "RLSCHED_PROFILE": "flux1-dev-h100"}
    assert (PluginConfig.from_extras(None, env).policy, PluginConfig.from_extras(None, env).profile) \
        == ("sjf", "flux1-dev-h100")
    cfg = PluginConfig.from_extras({"rlsched": {"policy": "edf", "slo_scales": {"realtime": 1.5},
                                                "default_slo_scale": 4}}, env)
    assert cfg.policy == "edf" and cfg.profile == "flux1-dev-h100"  # extras win, env fills the rest
    assert (cfg.slo_scale("realtime"), cfg.slo_scale("batch"), cfg.slo_scale("background")) == (1.5, 4.0, 10.0)
    assert PluginConfig.from_extras(cfg.to_extras(), {}) == cfg


@pytest.mark.parametrize("extras, field", [
    ({"rlsched": {"polcy": "edf"}}, "extras.rlsched"),
    ({"rlsched": {"default_priority": "urgent"}}, "default_priority"),
    ({"rlsched": {"slo_scales": {"vip": 2}}}, "slo_scales"),
    ({"rlsched": {"decision_budget_ms": math.nan}}, "decision_budget_ms"),
    ({"rlsched": {"default_height": 0}}, "default_height"),
    ({"rlsched": {"decision_thread": "gpu"}}, "decision_thread"),
    ({"rlsched": ["edf"]}, "extras.rlsched"),
])
def test_config_errors_name_the_field(extras, field) -> None:
    with pytest.raises(ConfigError, match=field):
        PluginConfig.from_extras(extras, {})


def test_nvml_device_follows_cuda_visible_devices() -> None:
    assert PluginConfig().nvml_device({"CUDA_VISIBLE_DEVICES": "3,5"}) == 3
    assert PluginConfig().nvml_device({"CUDA_VISIBLE_DEVICES": "GPU-1f2e,GPU-3a4b"}) == "GPU-1f2e"  # by UUID
    assert PluginConfig().nvml_device({"CUDA_VISIBLE_DEVICES": "MIG-9c8d"}) == "MIG-9c8d"
    assert PluginConfig().nvml_device({"CUDA_VISIBLE_DEVICES": ""}) == 0
    assert PluginConfig(telemetry_device=2).nvml_device({"CUDA_VISIBLE_DEVICES": "3"}) == 2


# --------------------------------------------------------- reading requests
def test_read_request_fields_and_defaults() -> None:
    cfg = PluginConfig(default_height=768, default_steps=30)
    fields, bad = read_request(sp(height=None, width=None, steps=None, guidance_scale=None), cfg)
    assert (fields["height"], fields["width"], fields["steps"], fields["cfg"]) == (768, 1024, 30, False)
    assert (fields["priority"], fields["slo_s"], bad) == ("batch", None, [])
    assert read_request(sp(sigmas=[1.0, 0.5, 0.0]), cfg)[0]["steps"] == 3  # StepScheduler's count order
    assert read_request(sp(timesteps=[9, 5], sigmas=[1.0]), cfg)[0]["steps"] == 2
    for kw, cfg_on in (({"guidance_scale": 1.0}, False), ({"guidance_scale": 1.0, "true_cfg_scale": 4.0}, True),
                       ({"guidance_scale": None, "do_classifier_free_guidance": True}, True)):
        assert read_request(sp(**kw), cfg)[0]["cfg"] is cfg_on


@pytest.mark.parametrize("extra, priority, slo_s, bad", [
    ({"priority": "realtime", "slo_ms": 4000}, "realtime", 4.0, []),
    ({"priority": " Background "}, "background", None, []),
    ({"priority": "urgent", "slo_ms": math.nan}, "batch", None, ["priority", "slo_ms"]),
    ({"priority": 3, "slo_ms": -5}, "batch", None, ["priority", "slo_ms"]),
    ({"slo_ms": True}, "batch", None, ["slo_ms"]),
    ({"slo_ms": "4000"}, "batch", None, ["slo_ms"]),
    ({"slo_ms": math.inf}, "batch", None, ["slo_ms"]),
])
def test_priority_and_slo_from_extra_args(extra, priority, slo_s, bad) -> None:
    fields, got_bad = read_request(sp(extra_args=extra), PluginConfig())
    assert (fields["priority"], fields["slo_s"], got_bad) == (priority, slo_s, bad)


def test_bad_sizes_are_defaulted_not_raised() -> None:
    fields, bad = read_request(sp(height=0, width=512.0, steps=-1, num_frames="x"), PluginConfig())
    assert (fields["height"], fields["width"], fields["steps"], fields["num_frames"]) == (1024, 512, 50, 1)
    assert bad == ["height", "num_frames", "num_inference_steps"]


# ------------------------------------------------------------------ state
def test_records_match_the_simulator_cost_model() -> None:
    state, clock = make_state()
    clock.t = 103.0
    rec, bad = state.add("a", sp(1024, 1024, steps=20, extra_args={"priority": "realtime"}), Key(1024))
    ref = state.cost.record(Request(0, 3.0, "qwen-image", "image", 1024, 1024, 1, 20, True, "realtime", 1.0))
    assert (rec.work_s, rec.step_s, rec.mem_gb, rec.tokens) == (ref.work_s, ref.step_s, ref.mem_gb, ref.tokens)
    assert rec.request.arrival_s == 3.0 and rec.request.slo_s == pytest.approx(2.0 * rec.work_s)
    assert rec.deadline_s == pytest.approx(3.0 + 2.0 * rec.work_s)
    assert state.int_id("a") == 0 and state.name(0) == "a" and bad == []


def test_keys_interned_by_equality_even_when_unhashable() -> None:
    state, _ = make_state()
    a, _ = state.add("a", sp(), Key(512, [1.0, 0.5]))
    b, _ = state.add("b", sp(), Key(512, [1.0, 0.5]))
    c, _ = state.add("c", sp(), Key(512, [1.0, 0.4]))
    assert a.key == b.key != c.key
    assert hashable(Key(512, [1.0])) == hashable(Key(512, [1.0])) and hash(hashable(Key(512, [1.0])))


def test_sync_follows_vllm_queues_and_counts_untracked() -> None:
    state, clock = make_state("step")
    for name in "abc":
        state.add(name, sp(), Key(512))
    clock.t = 107.5
    untracked = state.sync(["c", "ghost", "a"], ["b"], {"b": SimpleNamespace(current_step=7)})
    assert untracked == 1 and state.now == 7.5
    assert list(state.waiting) == [2, 0] and [r.request.id for r in state.running] == [1]
    assert state.running[0].status == "running" and state.waiting[2].status == "waiting"
    assert state.running[0].steps_done == 7
    assert state.remove("b").request.id == 1 and state.remove("b") is None and 1 not in state.records


def test_policies_decide_on_the_plugin_state() -> None:
    state, _ = make_state(default_priority="background")
    state.add("late", sp(512, 512, extra_args={"slo_ms": 90_000}), Key(512))
    state.add("big", sp(1024, 1024, extra_args={"slo_ms": 60_000}), Key(1024))
    state.add("soon", sp(512, 512, extra_args={"slo_ms": 30_000}), Key(512))
    state.sync(["late", "big", "soon"], [])
    def decide(spec: str) -> Decision:
        policy = make_policy(spec)
        policy.reset(state)
        return policy.decide(state)

    assert decide("edf") == Decision((2, 0))
    assert decide("sjf") == Decision((0, 2))
    assert decide("fifo").batch == (0,)
    for spec in ("priority", "drr", "static", "seed-composite"):
        assert check_decision(decide(spec), state)[0] is None, spec


def test_memory_from_telemetry_when_known() -> None:
    reads = []

    class Source:
        def read(self):
            reads.append(1)
            return SimpleNamespace(known=len(reads) == 1, memory_used_gb=80.0)

    clock = Clock()
    state = PluginState(load_profile("qwen-image-h200"), ServingConfig(), PluginConfig(), clock, Source())
    state.sync([], [])
    assert state.memory_used_gb == 80.0
    state.sync([], [])  # within telemetry_interval_s: no second read
    assert len(reads) == 1
    clock.t += 1.0
    state.sync([], [])
    assert len(reads) == 2 and state.memory_used_gb == state.cost.weights_gb  # unknown -> model estimate


def test_vllm_free_modules_import_no_vllm() -> None:
    code = ("import sys, rlsched.integrations.vllm_omni as p, rlsched.commands.deploy\n"
            "from rlsched.integrations.vllm_omni import config, metrics, safety, state\n"
            "assert not {'vllm', 'vllm_omni', 'torch'} & set(sys.modules), sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# ----------------------------------------------------------------- safety
def test_check_decision_reasons() -> None:
    state, _ = make_state()
    for i, size in enumerate([512, 1024, 512, 512, 512, 512]):
        state.add(f"r{i}", sp(size, size), Key(size))
    state.sync([f"r{i}" for i in range(6)], [])
    cases = {
        Decision((0, 2)): None, Decision(()): None, Decision((), wait_until=math.inf): None,
        Decision((0, 1)): "mixed_keys", Decision((0, 0)): "duplicate", Decision((0, 2, 3, 4, 5)): "too_large",
        Decision((42,)): "unknown_id", Decision((math.nan,)): "nan", Decision((), wait_until=math.nan): "nan",
        Decision((True,)): "malformed", Decision((0.0,)): "malformed", "0": "malformed", None: "malformed",
        Decision((), wait_until="soon"): "malformed",
    }
    for decision, reason in cases.items():
        assert check_decision(decision, state)[0] == reason, decision
        assert reason is None or reason in FALLBACK_REASONS
    import numpy as np
    assert check_decision(Decision((np.int64(2),)), state) == (None, (2,))


def test_finish_sets_outcome_and_calls_hooks_like_the_simulator() -> None:
    state, clock = make_state()
    arrived, finished = [], []
    state.on_arrival += [arrived.append, lambda rec: 1 / 0]  # a raising hook is contained
    state.on_finish.append(finished.append)
    for name in "abc":
        state.add(name, sp(extra_args={"slo_ms": 1000}), Key(512))
    clock.t += 0.5
    a = state.finish("a", "completed")
    clock.t += 1.0
    b, c = state.finish("b", "completed"), state.finish("c", "aborted")
    assert [r.request.id for r in arrived] == [0, 1, 2] and finished == [a, b]
    assert (a.slo_met, b.slo_met, c.status, a.finish_s) == (True, False, "aborted", 0.5)
    assert state.finish("a", "completed") is None and not state.records


# ------------------------------------------------------------- one journal
def _replay_on_plugin_state(mode: str, policy: str) -> tuple[list, list, int]:
    """Run a simulator under ``policy``; drive a ``PluginState`` through the same arrivals,
    starts, preemptions and finishes as the plugin's scheduler would; return both journals
    (as (op, workload id)) and the number of decisions."""
    rng = __import__("numpy").random.default_rng(3)
    sizes = (512, 768, 1024)
    reqs = [Request(i, float(t), "qwen-image", "image", int(s), int(s), 1, int(n), True, str(c), 60.0)
            for i, (t, s, n, c) in enumerate(zip(sorted(rng.uniform(0, 30, 60)), rng.choice(sizes, 60),
                                                  rng.choice([4, 8], 60), rng.choice(["realtime", "batch"], 60)))]
    cost = load_profile("qwen-image-h200")
    sim = Simulator(reqs, cost, ServingConfig(mode, 3))
    state, _ = make_state(mode)
    sim_of: dict[int, int] = {}  # plugin id -> workload id

    def arrive(rec) -> None:
        q = rec.request
        plugin_rec, _ = state.add(str(q.id), sp(q.height, q.width, steps=q.num_inference_steps), Key(q.height))
        sim_of[plugin_rec.request.id] = q.id

    sim.on_arrival.append(arrive)
    sim.on_finish.append(lambda rec: state.finish(str(rec.request.id), "completed"))
    inner, decisions = make_policy(policy), 0
    inner.reset(sim)
    while sim.advance_to_next_decision():
        decision = inner.decide(sim)
        decisions += 1
        before = [str(r.request.id) for r in sim.running]
        sim.apply(decision)
        batch = [str(i) for i in decision.batch]
        for name in before:  # what the plugin's _arrange preempts (step mode)
            if name not in batch:
                state.note_preempted(name)
        # vLLM's _running after its own schedule(): the kept running requests, then the new ones
        state.follow([n for n in before if n in batch] + [n for n in batch if n not in before])
        assert [sim_of[i] for i in state.waiting] == list(sim.waiting), "queue order"
    return ([(op, r.request.id) for op, r in sim.journal],
            [(op, sim_of[r.request.id]) for op, r in state.journal], decisions)


@pytest.mark.parametrize("mode, policy", [("request", "edf"), ("step", "sjf"), ("step", "static")])
def test_plugin_state_journals_exactly_as_the_simulator(mode: str, policy: str) -> None:
    """The same arrival/start/preemption/finish sequence gives the same journal and queue order
    in the simulator and the plugin's engine state (step-mode SJF preempts)."""
    sim_journal, plugin_journal, decisions = _replay_on_plugin_state(mode, policy)
    enqueued = sum(op == ENQUEUED for op, _ in sim_journal)
    assert decisions > 20 and (enqueued > 60 if mode == "step" else enqueued == 60)  # step mode preempted
    assert plugin_journal == sim_journal


def test_engine_state_resyncs_when_vllm_queue_differs() -> None:
    """An id vLLM holds that the view did not follow (a missed event) is rebuilt, counted, journaled."""
    state, _ = make_state()
    for name in "abc":
        state.add(name, sp(), Key(512))
    assert state.sync(["a", "b", "c"], []) == 0 and state.resyncs == 0  # lengths agree: O(running)
    state.remove("b")
    end = state.journal.end
    assert state.sync(["a", "c"], []) == 0 and state.resyncs == 0  # remove() dequeued it already
    state.waiting.pop(0)  # simulate a missed start
    assert state.sync(["a", "c"], []) == 0 and state.resyncs == 1
    assert list(state.waiting) == [0, 2] and state.journal.end == end + 1


# ------------------------------------------------------- settings that mean nothing (issue 34)
@pytest.mark.parametrize("extras, message", [
    ({"time_scale": 1e300}, "extras.rlsched.time_scale: must be a finite number >= 0.001 and <= 1000, not 1e+300"),
    ({"default_height": 10**6 + 1}, "extras.rlsched.default_height: must be an integer >= 1 and <= 1000000"),
    ({"default_steps": True}, "extras.rlsched.default_steps: must be an integer >= 1 and <= 100000, not True"),
    ({"decision_budget_ms": 1e300}, "extras.rlsched.decision_budget_ms: must be a finite number > 0 and <= 3.6e+06"),
    ({"telemetry_device": 10**9}, "extras.rlsched.telemetry_device: must be an integer >= -1 and <= 1023"),
    ({"metrics_ports": 0}, "extras.rlsched.metrics_ports: must be an integer >= 1 and <= 1024, not 0"),
    ({"slo_scales": {"batch": 1e300}}, "extras.rlsched.slo_scales.batch: must be a finite number > 0 and <= 1e+06"),
    ({"late_binding": 1}, "extras.rlsched.late_binding: must be true or false, not 1"),
])
def test_every_numeric_setting_is_bounded_by_the_table(extras, message) -> None:
    """Bug: ``time_scale: 1e300`` put every deadline at its arrival; the ranges are ``rlsched.bounds``'."""
    with pytest.raises(ConfigError) as err:
        PluginConfig.from_extras({"rlsched": extras}, {})
    assert str(err.value).startswith(message), str(err.value)


def test_a_default_shape_no_gpu_holds_is_refused_where_the_profile_is_known() -> None:
    """Bug: ``default_height: 1000000`` modelled every request without a height as a 10^12-pixel image."""
    cfg = PluginConfig(telemetry=False, default_height=1_000_000)  # in the table's range ...
    with pytest.raises(ConfigError, match=r"extras.rlsched.default_height: the default shape 1000000x1024 needs"):
        PluginState(load_profile("qwen-image-h200"), ServingConfig(), cfg)  # ... but no GPU of the profile holds it
    make_state(default_height=2048)  # one that fits


def test_client_sizes_past_the_table_are_defaulted() -> None:
    fields, bad = read_request(sp(height=10**7, width=10**6, num_frames=10**9), PluginConfig())
    assert (fields["height"], fields["width"], fields["num_frames"]) == (1024, 10**6, 1)
    assert bad == ["height", "num_frames"]


def test_a_clients_own_parked_ms_does_not_move_its_request_ahead() -> None:
    """Bug: a client's ``extra_args.rlsched_parked_ms`` dated its request back (ahead of the queue and
    its deadline earlier) outside late binding. Only the central pool's own value counts: the replica
    reads it only with ``late_binding`` (deploy --router central), and the pool drops a client's first."""
    from rlsched.integrations.vllm_omni.state import PARKED_KEY, drop_client_parking

    extra = {PARKED_KEY: 10**9, "priority": "batch"}
    fields, bad = read_request(sp(extra_args=extra), PluginConfig())
    assert fields["parked_s"] == 0.0 and bad == [PARKED_KEY]
    state, clock = make_state()
    rec, bad = state.add("a", sp(extra_args=extra), None)
    assert rec.request.arrival_s == state.now and bad == [PARKED_KEY]
    assert read_request(sp(extra_args={PARKED_KEY: 500}), PluginConfig(late_binding=True))[0]["parked_s"] == 0.5

    params = sp(extra_args=dict(extra))
    drop_client_parking(SimpleNamespace(sampling_params_list=[params]), 0)
    assert params.extra_args == {"priority": "batch"}
    override = sp(extra_args={PARKED_KEY: 1})
    drop_client_parking(None, 0, override)
    assert override.extra_args == {}
    drop_client_parking(object(), 3)  # a request it cannot read is left alone, never an exception


def test_deploy_marks_late_binding_only_behind_the_central_pool(tmp_path) -> None:
    import yaml

    from rlsched.cli import main

    out = tmp_path / "d.yaml"
    for args, late in ((["--policy", "edf@central", "--replicas", "2", "--devices", "0,1"], True),
                       (["--policy", "edf@least-work", "--replicas", "2", "--devices", "0,1"], False),
                       (["--policy", "edf"], False)):
        assert main(["deploy", *args, "--out", str(out)]) == 0
        extras = yaml.safe_load(out.read_text())["stages"][0]["extras"]["rlsched"]
        assert extras.get("late_binding", False) is late, args


def _hostile(bound) -> list:
    """Values at and past ``bound``'s edges, and the kinds that are never numbers here."""
    edges = [bound.low, bound.high] if not bound.values else list(bound.values)
    near = [e + d for e in edges for d in (-1, -1e-9, 0, 1e-9, 1) if e not in (math.inf, -math.inf)]
    return [*near, True, False, math.nan, math.inf, -math.inf, 10**400, "5", None, 2.5, 0, -1]


def test_every_numeric_setting_takes_exactly_its_bounds_values() -> None:
    """Property over the plugin's settings: a value from the table's edges loads iff the bound holds it (and
    it is of the bound's kind); anything else is a ConfigError naming the setting, never another exception."""
    from numbers import Integral

    from rlsched import bounds
    from rlsched.integrations.vllm_omni.config import NUMBERS

    # the budget may not exceed the deadline (issue 47): each is probed with the other out of its way
    def other(name: str, value: object) -> dict:
        if name == "decision_budget_ms":
            return {"decision_deadline_ms": bounds.DECISION_MS.high}
        number = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < 1e300
        return {"decision_budget_ms": min(value, 5.0)} if name == "decision_deadline_ms" and number else {}

    for name, bound in NUMBERS.items():
        for value in _hostile(bound):
            kind_ok = not isinstance(value, bool) and (isinstance(value, Integral) if bound.integer
                                                       else isinstance(value, (int, float)))
            try:
                got = PluginConfig(**{name: value, **other(name, value)})
            except ConfigError as exc:
                assert exc.where == f"extras.rlsched.{name}", (name, value, str(exc))
                assert not (kind_ok and bound.holds(value)), (name, value)
                continue
            assert kind_ok and bound.holds(getattr(got, name)), (name, value)
