"""``rlsched profile derive`` scored on public measurements of pairs it was not fitted to (issue 46)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rlsched.profiling.architecture import list_models
from rlsched.profiling.derive import (
    Stack,
    load_efficiencies,
    measured_points,
    runs_off_gpu,
    score_points,
    shipped_points,
    stack_of,
    summary,
)
from rlsched.profiling.gpus import find_gpu

ROOT = Path(__file__).resolve().parents[2]
PUBLIC_SET = ROOT / "tests" / "data" / "derive_public" / "measurements.csv"
TARGET = 0.25
"""Issue 46: median |error| on pairs the efficiencies were not fitted to (met since the attention ceilings:
docs/derive.md reports 17.9 %; it was 30.4 %, video 78.2 %, with one efficiency of the datasheet)."""


@pytest.fixture(scope="module")
def points():
    return measured_points(PUBLIC_SET)


@pytest.fixture(scope="module")
def scored(points):
    return score_points(points)


def test_every_row_is_a_sourced_check_of_a_shipped_model_on_a_known_gpu(points) -> None:
    assert len(points) >= 25
    for p in points:
        r = p.row
        assert r.use == "check" and r.source.startswith("https://"), r.line
        assert r.model in list_models(), r.line
        assert find_gpu(r.gpu).name == r.gpu, r.line


def test_no_pair_is_one_the_efficiencies_are_fitted_on(points) -> None:
    fitted = {p.pair for p in shipped_points()}
    assert {p.pair for p in points}.isdisjoint(fitted)
    assert len({p.pair for p in points if not runs_off_gpu(p)}) >= 5


def test_the_stack_column_names_compile_cfg_batching_and_work_off_the_gpu(points) -> None:
    assert stack_of("diffusers bf16 + torch.compile, cfg batched") == Stack(
        True, "batched", "diffusers bf16 + torch.compile, cfg batched")
    assert stack_of("wan2.1 generate.py").cfg == "sequential" and not stack_of("wan2.1 generate.py").compile
    off = {p.row.stack for p in points if runs_off_gpu(p)}
    assert any("t5_cpu" in s for s in off) and any("cpu_offload" in s for s in off)
    assert not any(runs_off_gpu(p) for p in points if p.row.stack.startswith("wan2.1 generate.py (offload_model"))


def test_the_public_table_in_the_docs_is_this_run() -> None:
    """Regenerates docs/derive.md's public-score table (the shipped efficiencies, every row) and compares."""
    res = subprocess.run([sys.executable, "scripts/derive_public.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr


def test_the_on_gpu_median_meets_the_target_and_memory_is_never_under_estimated(scored) -> None:
    on = summary([s for s in scored if not runs_off_gpu(s.point)])
    assert on["latency_points"] >= 20 and on["memory_points"] >= 4
    assert on["median_abs_error"] <= TARGET
    assert on["worst_memory_under"] == 0.0


def test_video_on_non_hopper_peaks_meets_the_target_too(scored) -> None:
    """The rows one efficiency of the datasheet could not fit (x1.65-x2.45 before the attention ceilings)."""
    video = summary([s for s in scored if not runs_off_gpu(s.point) and s.point.row.frames > 1])
    assert video["latency_points"] >= 5
    assert video["median_abs_error"] <= TARGET and video["worst_ratio"] < 1.6


def test_the_score_uses_the_efficiencies_it_is_given(points) -> None:
    eff = load_efficiencies()
    timed = [p for p in points if p.row.metric in ("total_s", "diffuse_s")][:3]
    slower = replace(eff, eff_linear=eff.eff_linear / 2, eff_attention=eff.eff_attention / 2)
    base, halved = score_points(timed, eff), score_points(timed, slower)
    assert all(b.predicted < h.predicted for b, h in zip(base, halved))
