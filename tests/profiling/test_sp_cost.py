"""Sequence-parallel cost model: degree 1 is today's cost exactly; degree d splits compute,
adds communication and sync, keeps weights and splits activations per GPU."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.sim import Request, load_profile
from rlsched.sim.cost import PROFILE_DIR, SPCost, SPLayout

SHIPPED = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
SHAPES = ((512, 512, 1), (1024, 1024, 1), (1536, 1536, 1), (480, 832, 33), (720, 1280, 81), (64, 64, 1))


def _requests(cost, model: str, h: int, w: int, f: int, cfg: bool, n: int) -> list[Request]:
    m = cost.model(model)
    frames = f if m.modality == "video" else 1
    return [Request(i, 0.0, model, m.modality, h, w, frames, 20, cfg, "batch", math.inf) for i in range(n)]


@pytest.mark.parametrize("name", SHIPPED)
def test_degree_one_is_todays_cost_exactly(name: str) -> None:
    cost = load_profile(name)
    for model, m in cost.models.items():
        for (h, w, f) in SHAPES:
            for cfg in (False, True):
                for n in (1, 3):
                    recs = [cost.record(r) for r in _requests(cost, model, h, w, f, cfg, n)]
                    t, q, p = recs[0].tokens * n, recs[0].quad * n, m.passes(recs[0].request)
                    for one in (1, "1", SPLayout(), SPLayout(1, 1)):
                        assert m.step_time_sp(t, q, p, one) == m.step_time(t, q, p)
                        assert cost.batch_step_time_sp(recs, one) == cost.batch_step_time(recs)
                        assert cost.batch_memory_gb_sp(recs, one) == cost.batch_memory_gb(recs)
                    for step_mode in (False, True):
                        assert (cost.batch_duration_sp(recs, 1, step_mode, 3.0, 0.5, [0] * n)
                                == cost.batch_duration(recs, step_mode, 3.0, 0.5, [0] * n))
                    rec = recs[0]
                    mpx = h * w * rec.request.num_frames / 1e6
                    assert m.request_memory_gb(rec.tokens, mpx, 1) == rec.mem_gb
                    assert cost.standalone_sp_s(rec.request, 1) == cost.standalone_s(rec.request)


@pytest.mark.parametrize("name", [n for n in SHIPPED if "sp:" in (PROFILE_DIR / f"{n}.yaml").read_text()])
def test_the_sp_block_changes_nothing_at_degree_one(name: str) -> None:
    """A shipped profile with ``sp`` equals the same file without it in every degree-1 figure."""
    with_sp = load_profile(name)
    data = yaml.safe_load((PROFILE_DIR / f"{name}.yaml").read_text())
    for m in data["models"].values():
        m.pop("sp", None)
    from rlsched.sim.cost import profile_from_dict

    without = profile_from_dict(data, name)
    assert any(m.sp is not None for m in with_sp.models.values())
    for model, m in with_sp.models.items():
        assert dataclasses.replace(m, sp=None) == without.models[model]


def _model(**sp):
    cost = load_profile("flux1-dev-h100")
    m = cost.model("flux1-dev")
    return cost, dataclasses.replace(m, sp=SPCost(**sp))


def test_degree_d_splits_compute_and_adds_comm_and_sync() -> None:
    _, m = _model(method="ulysses", ulysses_comm_s_per_mtok=0.0, ulysses_sync_s_per_degree=0.0,
                  ring_comm_s_per_mtok=0.0, ring_sync_s_per_degree=0.0)
    m = dataclasses.replace(m, floor_s=0.0)
    t, q = 0.2, 0.5  # big enough that the floor never binds
    compute = m.b_s_per_mtok * t + m.c_s_per_gtok2 * q
    for d in (2, 4, 8):
        assert m.step_time_sp(t, q, 1, d) == pytest.approx(m.a_s + compute / d)
        assert m.step_time_sp(t, q, 1, f"ring{d}") == pytest.approx(m.a_s + compute / d)
    _, m = _model(method="ulysses", ulysses_comm_s_per_mtok=10.0, ulysses_sync_s_per_degree=0.01,
                  ring_comm_s_per_mtok=20.0, ring_sync_s_per_degree=0.03)
    m = dataclasses.replace(m, floor_s=0.0)
    base = m.a_s + compute / 4
    assert m.step_time_sp(t, q, 1, 4) == pytest.approx(base + 10.0 * t * 3 / 16 + 0.01 * 3)
    assert m.step_time_sp(t, q, 1, "ring4") == pytest.approx(base + 20.0 * t * 3 / 4 + 0.03 * 3)
    hybrid = base + 10.0 * t * 1 / (4 * 2) + 20.0 * t * 1 / (2 * 2) + 0.03 * 3  # slowest method's sync rate
    assert m.step_time_sp(t, q, 1, "u2r2") == pytest.approx(hybrid)
    assert m.step_time_sp(t, q, 1, SPLayout(2, 2)) == m.step_time_sp(t, q, 1, "ulysses2xring2")


def test_sequential_cfg_pays_the_fixed_and_sync_cost_per_forward() -> None:
    cost = load_profile("qwen-image-h800-sdpa")
    m = cost.model("qwen-image")
    assert m.sequential_cfg and m.sp is not None
    t, q = 2 * 16384 / 1e6, 2 * 16384**2 / 1e9
    two, one = m.step_time_sp(t, q, 2, 4), m.step_time_sp(t, q, 1, 4)
    assert two - one == pytest.approx(m.a_s + m.sp.ulysses_sync_s_per_degree * 3)


def test_the_floor_holds_per_gpu_so_small_shapes_get_slower() -> None:
    m = load_profile("qwen-image-h20-gfdit").model("qwen-image")
    t, q = 1024 / 1e6, 1024**2 / 1e9
    assert m.step_time_sp(t, q, 1, 4) > m.step_time_sp(t, q, 1, 2) > m.step_time_sp(t, q, 1, 1)
    assert m.step_time_sp(t, q, 1, 8) >= m.floor_s


def test_memory_per_gpu_replicates_weights_and_splits_activations() -> None:
    cost = load_profile("qwen-image-h800-sdpa")
    m = cost.model("qwen-image")
    recs = [cost.record(r) for r in _requests(cost, "qwen-image", 2048, 2048, 1, True, 2)]
    act = sum(m.act_gb_per_ktok * r.tokens * 1e3 for r in recs)
    vae = sum(m.vae_gb_per_mpx * 2048 * 2048 / 1e6 for _ in recs)
    for d in (2, 4, 8):
        assert cost.batch_memory_gb_sp(recs, d) == pytest.approx(cost.weights_gb + act / d + vae)
    assert cost.batch_memory_gb_sp(recs, 8) < cost.batch_memory_gb_sp(recs, 2) < cost.batch_memory_gb(recs)
    assert cost.batch_memory_gb_sp(recs, 8) > cost.weights_gb


def test_standalone_and_duration_pay_encode_and_decode_once() -> None:
    cost = load_profile("hunyuanvideo-h100")
    req = _requests(cost, "hunyuanvideo", 720, 1280, 129, False, 1)[0]
    rec = cost.record(req)
    step = cost.batch_step_time_sp([rec], 4)
    want = rec.encode_s + req.num_inference_steps * step + rec.decode_s
    assert cost.standalone_sp_s(req, 4) == pytest.approx(want)
    assert cost.batch_duration_sp([rec], 4) == pytest.approx(want)
    assert cost.batch_duration_sp([rec], 4, step_mode=True, steps_done=[0]) == pytest.approx(step + rec.encode_s)


def test_layout_parsing() -> None:
    assert SPLayout.parse("4") == SPLayout(4, 1)
    assert SPLayout.parse("4", "ring") == SPLayout(1, 4)
    assert SPLayout.parse("u2r2") == SPLayout.parse("ulysses2xring2") == SPLayout(2, 2)
    assert SPLayout.parse("ring8") == SPLayout(1, 8) and SPLayout.parse("U4") == SPLayout(4, 1)
    assert str(SPLayout(2, 2)) == "ulysses2xring2" and str(SPLayout()) == "1" and SPLayout(2, 4).degree == 8
    for bad in ("", "0", "x", "u0", "2.5", "-2", "tp2", "u2r"):
        with pytest.raises(ConfigError):
            SPLayout.parse(bad)
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ConfigError):
            SPLayout.of(bad)


def test_degree_above_one_without_an_sp_block_is_refused() -> None:
    m = load_profile("qwen-image-h200").model("qwen-image")
    assert m.sp is None
    assert m.step_time_sp(0.01, 0.01, 2, 1) == m.step_time(0.01, 0.01, 2)
    with pytest.raises(ConfigError, match="no 'sp' block"):
        m.step_time_sp(0.01, 0.01, 2, 2)
    hy = load_profile("hunyuanvideo-h100").model("hunyuanvideo")
    with pytest.raises(ConfigError, match="no ring coefficients"):
        hy.step_time_sp(0.1, 0.1, 1, "ring2")


@pytest.mark.parametrize(("edit", "match"), [
    ({"method": "tensor"}, "method must be one of"),
    ({"ulysses_comm_s_per_mtok": -1.0}, "ulysses_comm_s_per_mtok must be"),
    ({"ulysses_sync_s_per_degree": float("nan")}, "ulysses_sync_s_per_degree must be"),
    ({"ulysses_comm_s_per_mtok": "fast"}, "ulysses_comm_s_per_mtok must be"),
    ({"ulyses_comm_s_per_mtok": 1.0}, "unknown keys"),
    ({"ring_comm_s_per_mtok": 1.0}, "ring needs both"),
    ({"method": "ring"}, "method 'ring' has no"),
])
def test_a_malformed_sp_block_is_refused(tmp_path: Path, edit: dict, match: str) -> None:
    data = yaml.safe_load((PROFILE_DIR / "hunyuanvideo-h100.yaml").read_text())
    data["models"]["hunyuanvideo"]["sp"].update(edit)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=match) as exc:
        load_profile(path)
    assert "models.hunyuanvideo.sp" in str(exc.value)
    data["models"]["hunyuanvideo"]["sp"] = [1, 2]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_profile(path)
