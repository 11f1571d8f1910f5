"""Evaluation grids and tuning trials on a Ray cluster give the rows a local run gives, bit for bit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]
if not os.environ.get("RLSCHED_REQUIRE_RAY"):  # `make test-ray` sets it: a missing Ray fails there
    pytest.importorskip("ray")

from rlsched.evaluation import run_grid  # noqa: E402
from rlsched.sim.metrics import json_safe  # noqa: E402

GRID = dict(scenarios=["default", "bursty"], policies=["fifo", "edf", "seed-composite"], seeds=[1000, 1001],
            loads=[0.75, 1.25], duration=600.0)


def _dump(obj: Any) -> str:
    return json.dumps(json_safe(obj), sort_keys=True, default=str)


def test_eval_grid_on_ray_is_bit_identical_to_local(ray_cluster: Any) -> None:
    local = run_grid(**GRID, workers=1, progress=False)
    on_ray = run_grid(**GRID, progress=False, ray="auto")
    assert len(on_ray.rows) == 2 * 3 * 2 * 2
    assert _dump(on_ray.rows) == _dump(local.rows)  # repr-exact floats, same order
    assert on_ray.latency_ratio == local.latency_ratio and on_ray.batch_sizes == local.batch_sizes


def _eval(out: Path, *extra: str) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "rlsched", "eval", "--scenarios", "default", "--policies", "fifo,edf",
           "--seeds", "1000,1001", "--loads", "1.0", "--duration", "600", "--out", str(out), "--json", *extra]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads((out / "results.json").read_text())


def test_eval_cli_runs_on_the_cluster_at_an_address(ray_address: str, tmp_path: Path) -> None:
    on_ray = _eval(tmp_path / "ray", "--ray", ray_address)
    assert on_ray == _eval(tmp_path / "local")


def test_a_task_error_comes_back_typed_as_locally(ray_cluster: Any) -> None:
    from rlsched.errors import ConfigError

    bad = dict(GRID, policies=["fifo", "static:nowhere.json"])
    with pytest.raises(ConfigError, match="nowhere.json"):
        run_grid(**bad, progress=False, ray="auto")


def test_tune_trials_on_ray_match_local(ray_cluster: Any) -> None:
    from rlsched.agents.tune import TuneSpec, search

    spec = TuneSpec("default", seeds=(0, 1), rate_scales=(0.75, 1.25), duration_s=600.0, trials=4, batch=2)
    local, on_ray = search(spec), search(spec, ray="auto")
    assert on_ray.scores == local.scores and list(on_ray.vector) == list(local.vector)


def test_labels_on_ray_match_local(ray_cluster: Any) -> None:
    import numpy as np

    from rlsched.agents.labels import generate, label_tasks

    tasks = label_tasks(["default", "bursty"], "agents/tuned/{scenario}.json", 2, 5, (1.0, 1.5), 300.0, 3, 1200.0)
    local, on_ray = generate(tasks, progress=False), generate(tasks, progress=False, ray="auto")
    assert sum(len(p["q"]) for p in local) > 0 and len(on_ray) == len(local)
    for a, b in zip(local, on_ray):
        for key in ("glob", "cand", "q"):
            np.testing.assert_array_equal(a[key], b[key])


def test_label_cli_runs_on_the_cluster_at_an_address(ray_address: str, tmp_path: Path) -> None:
    import numpy as np

    def label(out: Path, *extra: str) -> dict[str, Any]:
        cmd = [sys.executable, "-m", "rlsched", "label", "--scenarios", "default", "--episodes", "2", "--seed", "7",
               "--future", "300", "--every", "4", "--duration", "900", "--out", str(out), "--no-progress", "--json",
               *extra]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
        assert res.returncode == 0, res.stderr[-3000:]
        with np.load(json.loads(res.stdout.splitlines()[-1])["labels"]) as data:
            return {k: data[k] for k in ("glob", "cand", "q")}

    on_ray, local = label(tmp_path / "ray.npz", "--ray", ray_address), label(tmp_path / "local.npz", "--workers", "1")
    assert len(local["q"]) > 0
    for key in local:
        np.testing.assert_array_equal(on_ray[key], local[key])
