"""CFG-parallel layouts (vLLM-Omni ``cfg_parallel_size`` 2): a CFG request's two guidance branches on
two GPU groups. Per step: one group's branch plus a small exchange; a request without CFG gains
nothing; per GPU the weights stay whole and activations hold one branch; degree 1 is today's cost."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlsched.cli import main
from rlsched.errors import ConfigError
from rlsched.planning import Layout, deploy_command, stage_yaml
from rlsched.profiling.predict import predict_request
from rlsched.sim import Request, load_profile, load_scenario
from rlsched.sim.cost import PROFILE_DIR, SPLayout, profile_from_dict
from rlsched.sim.layout import LayoutCost, at_layout
from rlsched.sim.simulator import ServingConfig

NAME = "qwen-image-h200-vllm-omni"
OMNI = load_profile(NAME)
SIZES = (512, 1024, 1536, 2048)


def _req(size: int, cfg: bool = True, rid: int = 0) -> Request:
    return Request(rid, 0.0, "qwen-image", "image", size, size, 1, 50, cfg, "batch", 1e9)


def _profile_data(name: str = NAME) -> dict:
    return yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())


def _with_stack_cfg(mode: str):  # type: ignore[no-untyped-def]
    data = _profile_data()
    data["stack"]["cfg"] = mode
    return profile_from_dict(data, f"{NAME} ({mode})")


def test_layout_spelling_and_its_errors() -> None:
    assert SPLayout.parse("c2") == SPLayout.parse("cfg2") == SPLayout(1, 1, 2)
    assert SPLayout.parse("u2c2") == SPLayout.parse("ulysses2xcfg2") == SPLayout.parse("2c2") == SPLayout(2, 1, 2)
    assert SPLayout.parse("4c2", "ring") == SPLayout(1, 4, 2) and SPLayout.parse("u2r2c2") == SPLayout(2, 2, 2)
    assert SPLayout.parse("u2r2") == SPLayout(2, 2) == SPLayout(2, 2, 1)  # no CFG degree: 1, as before
    lay = SPLayout.parse("u2c2")
    assert (lay.degree, lay.cfg, lay.gpus, str(lay), lay.sp_only) == (2, 2, 4, "ulysses2xcfg2", SPLayout(2, 1))
    assert str(SPLayout.parse("c2")) == "cfg2" and str(SPLayout()) == "1"
    for bad in ("c3", "u2c0", "c", "cx2", "2c"):
        with pytest.raises(ConfigError):
            SPLayout.parse(bad)
    with pytest.raises(ConfigError, match="cfg-parallel"):
        SPLayout.of(2, "ulysses", 4)


@pytest.mark.parametrize("size", SIZES)
def test_a_cfg_request_runs_one_branch_per_group_plus_the_exchange(size: int) -> None:
    m = OMNI.model("qwen-image")
    rec = OMNI.record(_req(size))
    t, q = rec.tokens, rec.quad
    assert m.cfg_parallel is not None
    for sp in ("1", "u2", "u4"):
        one = SPLayout.parse(sp)
        two = dataclasses.replace(one, cfg=2)
        exchange = m.cfg_parallel.exchange_s(t, 2)
        # one group = the same request without CFG on the SP layout (one forward of a sequential stack)
        assert m.step_time_sp(t, q, 2, two) == pytest.approx(m.step_time_sp(t / 2, q / 2, 1, one) + exchange)
        assert 0 < exchange < 1e-3 * m.step_time_sp(t, q, 2, one)  # the exchange is small ...
        assert m.step_time_sp(t, q, 2, two) < m.step_time_sp(t, q, 2, one)  # ... so c=2 beats c=1
        assert m.step_time_sp(t, q, 2, two) < 0.52 * m.step_time_sp(t, q, 2, one)  # near 2x on a sequential stack
    # CFG-parallel 2 beats SP2 on the same two GPUs for every shape (SP pays all-to-alls and sync)
    assert m.step_time_sp(t, q, 2, "c2") < m.step_time_sp(t, q, 2, "2")


def test_the_exchange_is_latent_bytes_over_the_derived_link() -> None:
    c = OMNI.model("qwen-image").cfg_parallel
    assert c is not None and c.source.startswith("derived")
    n = 128 * 128  # a 2048x2048 image: 16,384 latent tokens, two branches
    assert c.exchange_s(2 * n / 1e6, 2) == pytest.approx(c.latency_s + n * c.bytes_per_token / (c.link_gb_s * 1e9))
    # the derivation the profile's source states: from the sp block (4 all-to-alls x 60 layers x 3072 x 2 B)
    sp = OMNI.model("qwen-image").sp
    assert sp is not None and sp.ulysses_comm_s_per_mtok is not None and sp.ulysses_sync_s_per_degree is not None
    per_token = 4 * 60 * 3072 * 2
    assert c.link_gb_s == pytest.approx(per_token * 1e6 / sp.ulysses_comm_s_per_mtok / 1e9, rel=0.01)
    assert c.latency_s == pytest.approx(sp.ulysses_sync_s_per_degree / 240, rel=0.02)
    assert c.bytes_per_token == 2 * 2 * 16 * 2  # proj_out: 2x2 patch x 16 channels, bf16


@pytest.mark.parametrize("size", SIZES)
def test_a_request_without_cfg_gains_nothing(size: int) -> None:
    """vLLM-Omni runs a no-CFG request's one conditional forward on every CFG rank (no exchange)."""
    for sp in (1, 2, 4):
        wide, cfg2 = at_layout(OMNI, sp), at_layout(OMNI, sp, 2)
        a, b = wide.record(_req(size, cfg=False)), cfg2.record(_req(size, cfg=False))
        assert (a.step_s, a.work_s, a.mem_gb) == (b.step_s, b.work_s, b.mem_gb)
        assert cfg2.record(_req(size)).work_s < wide.record(_req(size)).work_s


def test_memory_per_gpu_holds_whole_weights_and_one_branch() -> None:
    m = OMNI.model("qwen-image")
    for size in SIZES:
        rec = OMNI.record(_req(size))
        for sp in (1, 2):
            cfg2 = at_layout(OMNI, sp, 2)
            assert cfg2.record(_req(size)).mem_gb == pytest.approx(rec.mem_gb / 2 / sp)
            one = cfg2.record(_req(size))
            assert cfg2.batch_memory_gb([one]) == pytest.approx(OMNI.weights_gb + rec.mem_gb / 2 / sp)
            recs = [OMNI.record(_req(size, rid=i)) for i in range(3)]
            assert OMNI.batch_memory_gb_sp(recs, SPLayout.of(sp, cfg=2)) == pytest.approx(
                OMNI.weights_gb + 3 * rec.mem_gb / 2 / sp)
        # a no-CFG request holds its one branch either way
        assert m.request_memory_gb(rec.tokens / 2, 0.0, "c2", 1) == m.request_memory_gb(rec.tokens / 2, 0.0, 1, 1)


@pytest.mark.parametrize("mode", ["sequential", "batched"])
def test_both_cfg_stacks(mode: str) -> None:
    """``sequential`` (vLLM-Omni: two forwards per step) pays the per-forward cost once per group;
    ``batched`` (one forward of both branches) halves the tokens of its one forward."""
    cost = _with_stack_cfg(mode)
    m = cost.model("qwen-image")
    for size in SIZES:
        rec = cost.record(_req(size))
        t, q = rec.tokens, rec.quad
        k = 2 if mode == "sequential" else 1
        assert m.step_time_sp(t, q, 2, 1) == pytest.approx(k * m.a_s + m.b_s_per_mtok * t + m.c_s_per_gtok2 * q)
        group = m.a_s + (m.b_s_per_mtok * t + m.c_s_per_gtok2 * q) / 2
        assert m.step_time_sp(t, q, 2, "c2") == pytest.approx(group + m.cfg_parallel.exchange_s(t, 2))
        assert m.step_time_sp(t, q, 2, "c2") < m.step_time_sp(t, q, 2, 1)
        # a batch of four CFG requests: the same split per group
        recs = [cost.record(_req(size, rid=i)) for i in range(4)]
        assert cost.batch_step_time_sp(recs, "c2") == pytest.approx(
            m.a_s + 4 * (m.b_s_per_mtok * t + m.c_s_per_gtok2 * q) / 2 + m.cfg_parallel.exchange_s(4 * t, 2))


def test_the_cfg_parallel_block_changes_nothing_without_cfg_parallelism() -> None:
    """Degree 1 (and every SP layout without CFG) is bit-for-bit the profile without the block."""
    data = _profile_data()
    data["models"]["qwen-image"].pop("cfg_parallel")
    without = profile_from_dict(data, NAME)
    for size in (*SIZES, 64, 1344):
        for cfg in (False, True):
            req = _req(size, cfg)
            for sp in (1, 2, 4, 8, "u2"):
                a, b = at_layout(OMNI, sp).record(req), at_layout(without, sp).record(req)
                assert (a.step_s, a.work_s, a.mem_gb, a.tokens, a.quad) == (b.step_s, b.work_s, b.mem_gb, b.tokens,
                                                                            b.quad)
    assert at_layout(OMNI, 1, 1) is OMNI and at_layout(OMNI, "1") is OMNI


def test_at_layout_builds_a_cfg_replica_and_refuses_a_profile_without_the_block() -> None:
    cost = at_layout(OMNI, 1, 2)
    assert isinstance(cost, LayoutCost) and cost.layout == SPLayout(1, 1, 2) and cost.name == f"{NAME}@cfg2"
    assert at_layout(OMNI, "u2c2").layout == at_layout(OMNI, 2, 2).layout == SPLayout(2, 1, 2)
    with pytest.raises(ConfigError, match="disagree"):
        at_layout(OMNI, "c2", 3)
    with pytest.raises(ConfigError, match="no 'cfg_parallel' block"):
        at_layout(load_profile("qwen-image-h200"), 1, 2)
    with pytest.raises(ConfigError, match="no 'cfg_parallel' block"):
        at_layout(load_profile("flux1-dev-h100"), 2, 2)


@pytest.mark.parametrize(("change", "message"), [
    ({"bogus": 1}, "unknown keys"),
    ({"link_gb_s": None}, "missing keys"),
    ({"link_gb_s": 0}, "link_gb_s must be"),
    ({"bytes_per_token": -1}, "bytes_per_token must be"),
    ({"latency_s": math.inf}, "latency_s must be"),
    ({"latency_s": True}, "latency_s must be"),
    ({"source": "measured on 8 H200s"}, "source must be a string starting 'derived'"),
])
def test_a_bad_cfg_parallel_block_names_its_key(change: dict, message: str) -> None:
    data = _profile_data()
    block = data["models"]["qwen-image"]["cfg_parallel"]
    for key, value in change.items():
        if value is None:
            block.pop(key)
        else:
            block[key] = value
    with pytest.raises(ConfigError, match=r"models\.qwen-image\.cfg_parallel.*" + message):
        profile_from_dict(copy.deepcopy(data), "p.yaml")


def test_predict_prints_the_cfg_parallel_prediction() -> None:
    one = predict_request(OMNI, height=1024, width=1024, steps=50, cfg=True)
    two = predict_request(OMNI, height=1024, width=1024, steps=50, cfg=True, cfg_parallel=2)
    assert two.layout == SPLayout(1, 1, 2) and two.latency_s < 0.52 * one.latency_s
    assert two.latency_s == pytest.approx(OMNI.standalone_sp_s(_req(1024), "c2"))
    assert predict_request(OMNI, height=1024, width=1024, steps=50, cfg=True, sp="u2c2").layout.gpus == 4
    with pytest.raises(ConfigError, match="--cfg-parallel"):
        predict_request(OMNI, height=1024, width=1024, steps=50, cfg_parallel=3)
    with pytest.raises(ConfigError, match="--cfg-parallel"):
        predict_request(load_profile("qwen-image-h200"), height=1024, width=1024, steps=50, cfg_parallel=2)
    res = subprocess.run([sys.executable, "-m", "rlsched", "profile", "predict", NAME, "--height", "1024", "--width",
                          "1024", "--steps", "50", "--cfg", "--cfg-parallel", "2", "--json"],
                         capture_output=True, text=True, timeout=120, check=True)
    out = json.loads(res.stdout)
    assert (out["cfg_parallel"], out["gpus"], out["sp_degree"]) == (2, 2, 1)
    assert out["latency_s"] == pytest.approx(two.latency_s) and out["peak_gb_per_gpu"] < 141


def _pool(tmp_path: Path, replicas: list[dict], profile: str = NAME) -> Path:
    data = yaml.safe_load(Path(load_scenario("qwen-image-8gpu").path).read_text())
    data.update(name="pool", profile=profile, duration_s=600, replicas=replicas)
    path = tmp_path / "pool.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_scenario_declares_cfg_parallel_replicas(tmp_path: Path) -> None:
    sc = load_scenario(_pool(tmp_path, [{"count": 2, "sp_degree": 1, "cfg_parallel": 2},
                                        {"count": 1, "sp_degree": 2, "cfg_parallel": 2, "name": "wide"}]))
    specs = sc.replica_specs()
    assert sc.gpus == 2 * 2 + 1 * 4
    assert [s.name for s in specs] == [f"{NAME}@sp1cfg2-0", f"{NAME}@sp1cfg2-1", "wide-0"]
    assert [s.cost.layout for s in specs] == [SPLayout(1, 1, 2)] * 2 + [SPLayout(2, 1, 2)]
    with pytest.raises(ConfigError, match=r"replicas\[0\]\.cfg_parallel"):
        load_scenario(_pool(tmp_path, [{"count": 2, "cfg_parallel": 4}]))
    with pytest.raises(ConfigError, match=r"replicas\[0\].*cfg_parallel"):
        load_scenario(_pool(tmp_path, [{"count": 2, "cfg_parallel": 2}], "qwen-image-h200")).replica_specs()


def test_stage_keys_and_deploy_line_of_a_cfg_layout() -> None:
    keys = yaml.safe_load(stage_yaml(Layout(4, 1, 2), 8, OMNI))
    assert keys["num_replicas"] == 4 and keys["parallel_config"] == {
        "sequence_parallel_size": 1, "ulysses_degree": 1, "ring_degree": 1, "cfg_parallel_size": 2}
    assert "cfg_parallel_size" not in stage_yaml(Layout(4, 2), 8, OMNI)  # c = 1: the keys as before
    line = deploy_command(Layout(2, 2, 2), 8, "edf@rlsched", NAME, ServingConfig())
    assert " --sp 2 --cfg-parallel 2 " in line and "--devices 0,1,2,3,4,5,6,7" in line
    assert "--cfg-parallel" not in deploy_command(Layout(4, 2), 8, "edf@rlsched", NAME, ServingConfig())


def test_deploy_writes_cfg_parallel_size(tmp_path: Path) -> None:
    out = tmp_path / "deploy.yaml"
    assert main(["deploy", "--policy", "edf", "--replicas", "2", "--devices", "0,1,2,3", "--cfg-parallel", "2",
                 "--out", str(out)]) == 0
    (stage,) = yaml.safe_load(out.read_text())["stages"]
    assert stage["num_replicas"] == 2 and stage["devices"] == "0,1,2,3"
    parallel = stage["parallel_config"]
    assert parallel["cfg_parallel_size"] == 2 and parallel["sequence_parallel_size"] == 1
    assert main(["deploy", "--policy", "edf", "--replicas", "2", "--devices", "0,1", "--cfg-parallel", "2",
                 "--out", str(out)]) == 2  # 2 GPUs for 2 replicas x 2 groups
    assert main(["deploy", "--policy", "edf", "--replicas", "2", "--devices", "0,1", "--out", str(out)]) == 0
    (stage,) = yaml.safe_load(out.read_text())["stages"]
    assert "parallel_config" not in stage  # one GPU per replica: vLLM-Omni's defaults, as before
