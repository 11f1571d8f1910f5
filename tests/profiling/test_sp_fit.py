"""The sequence-parallel fit: every committed SP row is reproduced within 10 %, the GF-DiT
crossover (small images slower with more GPUs, large ones ~3x faster) is kept, SP rows never
move degree-1 coefficients, and known SP coefficients are fitted back."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.profiling.fit import fit_profile
from rlsched.profiling.measurements import read_measurements
from rlsched.profiling.sp_table import markdown, multi_gpu_residuals
from rlsched.sim import Request, load_profile
from rlsched.sim.cost import PROFILE_DIR
from tests.profiling.synthetic import write_predicted_rows

MEASUREMENTS = PROFILE_DIR / "measurements"
SETS = sorted(p.name for p in MEASUREMENTS.iterdir() if p.is_dir())
SP_SETS = [s for s in SETS
           if any(r.layout.degree > 1 for r in read_measurements(MEASUREMENTS / s / "measurements.csv"))]


def test_the_published_sp_series_are_committed() -> None:
    assert {"qwen-image-h20-gfdit", "qwen-image-h800-sdpa", "qwen-image-a100-vllm-omni", "flux1-dev-h100",
            "hunyuanvideo-h100"} <= set(SP_SETS)
    rows = [r for s in SETS for r in read_measurements(MEASUREMENTS / s / "measurements.csv")]
    assert sum(r.layout.degree > 1 for r in rows) == 6 + 3 + 3 + 10 + 3
    assert sorted(r.replicas for r in rows if r.replicas > 1) == [2, 4]
    assert all(r.source for r in rows)


@pytest.mark.parametrize("name", SP_SETS)
def test_every_fitted_sp_row_is_reproduced_within_10_percent(name: str) -> None:
    fitted = [r for r in fit_profile(MEASUREMENTS / name).residuals if r.row.use == "fit" and r.row.layout.degree > 1]
    assert fitted
    for r in fitted:
        assert abs(r.error) <= 0.10, f"{name} line {r.row.line} ({r.row.parallel}): {r.error:+.1%}"


def _step(cost, side: int, degree: int) -> float:
    rec = cost.record(Request(0, 0.0, "qwen-image", "image", side, side, 1, 50, False, "batch", math.inf))
    return cost.batch_step_time_sp([rec], degree)


def test_gfdit_crossover_small_slower_large_three_times_faster() -> None:
    cost = load_profile("qwen-image-h20-gfdit")
    assert _step(cost, 512, 4) > _step(cost, 512, 2) > _step(cost, 512, 1)
    assert _step(cost, 1024, 4) < _step(cost, 1024, 2) < _step(cost, 1024, 1)
    speedup = _step(cost, 1536, 1) / _step(cost, 1536, 4)
    assert 2.8 < speedup < 3.8  # published 1557 / 464 = 3.36x
    published = {(512, 1): 0.155, (512, 2): 0.161, (512, 4): 0.172, (1024, 1): 0.605, (1024, 2): 0.350,
                 (1024, 4): 0.207, (1536, 1): 1.557, (1536, 2): 0.880, (1536, 4): 0.464}
    for (side, d), want in published.items():
        assert _step(cost, side, d) == pytest.approx(want, rel=0.10), (side, d)


def test_replicas_keep_per_request_latency_flat() -> None:
    rows = [r for n, r in multi_gpu_residuals() if n == "wan22-ti2v-5b-a800"]
    assert [r.row.replicas for r in rows] == [1, 2, 4]
    assert len({r.predicted for r in rows}) == 1
    assert all(abs(r.error) <= 0.10 for r in rows)


def test_sp_rows_never_move_degree_one_coefficients(tmp_path: Path) -> None:
    src = MEASUREMENTS / "flux1-dev-h100"
    with_sp = fit_profile(src).profile["models"]["flux1-dev"]
    lines = (src / "measurements.csv").read_text().splitlines()
    rows = read_measurements(src / "measurements.csv")
    kept = [lines[0]] + [line for r, line in zip(rows, lines[1:]) if r.layout.degree == 1]
    (tmp_path / "measurements.csv").write_text("\n".join(kept) + "\n")
    spec = yaml.safe_load((src / "fit.yaml").read_text())
    del spec["models"]["flux1-dev"]["sp"]
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(spec))
    without = fit_profile(tmp_path).profile["models"]["flux1-dev"]
    assert {k: v for k, v in with_sp.items() if k != "sp"} == without


def test_fit_recovers_known_sp_coefficients(tmp_path: Path) -> None:
    """SP rows generated from known coefficients are fitted back to them."""
    src = MEASUREMENTS / "flux1-dev-h100"
    truth = load_profile("flux1-dev-h100")
    write_predicted_rows(src, truth, tmp_path)
    spec = yaml.safe_load((src / "fit.yaml").read_text())
    spec["models"]["flux1-dev"]["sp"]["start"] = {"ulysses_comm_s_per_mtok": 1.0, "ulysses_sync_s_per_degree": 0.05,
                                                  "ring_comm_s_per_mtok": 1.0, "ring_sync_s_per_degree": 0.05}
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(spec))
    got = fit_profile(tmp_path).profile["models"]["flux1-dev"]["sp"]
    want = truth.model("flux1-dev").sp
    for k in ("ulysses_comm_s_per_mtok", "ulysses_sync_s_per_degree", "ring_comm_s_per_mtok",
              "ring_sync_s_per_degree"):
        assert got[k] == pytest.approx(getattr(want, k), rel=2e-3), k


def test_a_derived_sp_block_is_the_source_sets_fit() -> None:
    src = fit_profile(MEASUREMENTS / "qwen-image-h20-gfdit").profile["models"]["qwen-image"]["sp"]
    got = fit_profile(MEASUREMENTS / "qwen-image-h200-vllm-omni").profile["models"]["qwen-image"]["sp"]
    assert got == src
    assert any("derived" in s for s in load_profile("qwen-image-h200-vllm-omni").sources)


def test_the_docs_table_is_the_command_output() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "multigpu.md").read_text()
    assert markdown() in page


@pytest.mark.parametrize(("edit", "match"), [
    ({"fit": ["ulysses_speed"]}, "unknown coefficients"),
    ({"start": {"ulysses_comm": 1.0}}, "unknown coefficients"),
    ({"fit": ["b_s_per_mtok"]}, "already fitted at degree 1"),
    ({"stages": 2}, "unknown keys"),
])
def test_a_malformed_sp_fit_spec_is_refused(tmp_path: Path, edit: dict, match: str) -> None:
    src = MEASUREMENTS / "flux1-dev-h100"
    spec = yaml.safe_load((src / "fit.yaml").read_text())
    spec["models"]["flux1-dev"]["sp"].update(edit)
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(spec))
    (tmp_path / "measurements.csv").write_text((src / "measurements.csv").read_text())
    with pytest.raises(ConfigError, match=match):
        fit_profile(tmp_path)


def test_a_bad_sp_column_names_file_line_and_column(tmp_path: Path) -> None:
    text = (MEASUREMENTS / "hunyuanvideo-h100" / "measurements.csv").read_text().splitlines()
    text[-1] = text[-1].rsplit(",", 1)[0] + ",0"
    (tmp_path / "measurements.csv").write_text("\n".join(text) + "\n")
    from rlsched.errors import TraceFormatError

    with pytest.raises(TraceFormatError, match=rf"measurements.csv:{len(text)}.*ulysses"):
        read_measurements(tmp_path / "measurements.csv")
