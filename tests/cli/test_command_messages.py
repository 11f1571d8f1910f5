"""Each ``deploy``, ``plan``, ``label``, ``profile measure`` and grid message of docs/errors.md, triggered
by the arguments that earn it and naming the flag (``tests/test_errors_doc.py`` checks every message has
such a test). Through ``rlsched.cli.main`` where the check lives in the command, else its function."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsched.cli import main
from rlsched.commands.deploy import _split_router, _stage_ids, replica_keys
from rlsched.errors import ConfigError
from rlsched.evaluation.runs import RunSpec, check_grid, prepare_stage, run_grid, sp_cost
from rlsched.planning import layouts, plan
from rlsched.sim import load_profile, load_scenario


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(list(args)) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--decision-budget-ms", "200"], "a decision is cut off at the deadline, so the budget must be <= it"),
    (["--stage-id", "3"], "without --base-config: a generic diffusion model has the one stage 0, and for a pipeline "
                          "only its deploy YAML says which stages exist (a stage it lacks is dropped, no plugin "
                          "runs); give --base-config"),
    (["--stage-id", "3", "--base-config", "base.yaml"], "vLLM-Omni would drop this stage and no plugin would run"),
])
def test_deploy_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    (tmp_path / "base.yaml").write_text("stages:\n  - stage_id: 0\n")
    err = _cli(capsys, "deploy", "--policy", "edf", "--out", str(tmp_path / "deploy.yaml"), *args)
    assert message in err


def test_deploy_base_config_chains(tmp_path: Path) -> None:
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("base_config: b.yaml\nstages: []\n")
    b.write_text("base_config: a.yaml\nstages: []\n")
    with pytest.raises(ConfigError, match="base_config loops back to itself"):
        _stage_ids(a, set())
    a.write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping with 'stages', got list"):
        _stage_ids(a, set())
    a.write_text("stages: 3\n")
    with pytest.raises(ConfigError, match="'stages' must be a list of mappings with an integer stage_id"):
        _stage_ids(a, set())
    a.write_text("base_config: nosuch.yaml\nstages: []\n")
    with pytest.raises(ConfigError, match="its base_config 'nosuch.yaml' is not a file beside it"):
        _stage_ids(a, set())


def test_deploy_devices_and_router() -> None:
    omni = load_profile("qwen-image-h200-vllm-omni")
    with pytest.raises(ConfigError, match="--devices: name the stage's 4 GPUs"):
        replica_keys(2, 2, None, omni)
    with pytest.raises(ConfigError, match="'0,0': expected distinct GPU indices, comma-separated"):
        replica_keys(2, 1, "0,0", omni)
    with pytest.raises(ConfigError, match="3 GPUs for --replicas 2 x --sp 1 = 2"):
        replica_keys(2, 1, "0,1,2", omni)
    with pytest.raises(ConfigError, match="'random' and --policy's @rlsched disagree"):
        _split_router("edf@rlsched", "random")


def test_plan_checks_before_simulating() -> None:
    with pytest.raises(ConfigError, match="--cfg-degrees: must be some of"):
        layouts(4, load_profile("qwen-image-h200-vllm-omni"), cfg_degrees=(3,))
    with pytest.raises(ConfigError, match="--seeds: planning uses training seeds"):
        plan("default", 1, "fifo", [10**6], [1.0])
    with pytest.raises(ConfigError, match=r"--check-seeds: the re-check uses evaluation seeds \(>="):
        plan("default", 1, "fifo", [0], [1.0], check_seeds=[0])
    with pytest.raises(ConfigError, match="--loads: must be finite numbers > 0, not"):
        plan("default", 1, "fifo", [0], [0.0])
    with pytest.raises(ConfigError) as err:
        plan("default", 1024, "fifo", [0], [1e9])
    assert "x its own rate (the nominal rate per GPU x" in str(err.value)


@pytest.mark.parametrize("args, message", [
    (["plan", "--loads", "1,x"], "expected comma-separated numbers, not '1,x'"),
    (["label", "--load-range", "2,1", "--out", "l.npz"], "expected LOW,HIGH with LOW <= HIGH, not '2,1'"),
    (["profile", "measure", "--batch-sizes", "1,x", "--out", "m.csv"], "not a list of integers: '1,x'"),
    (["profile", "measure", "--batch-sizes", "0", "--out", "m.csv"], "each batch size must be >= 1, not 0"),
])
def test_list_flags_name_what_they_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    assert message in _cli(capsys, *args)


def test_grid_and_stage_refusals() -> None:
    with pytest.raises(ConfigError, match="--policies") as err:
        check_grid(["default"], ["nosuch"])
    assert "(checked before the first run; nothing was run)" in str(err.value)
    with pytest.raises(ConfigError, match="--replicas") as err:
        run_grid(["qwen-image-8gpu"], ["fifo"], [0], [1.0], replicas=2, progress=False)
    assert "declare their own replicas; --replicas/--sp apply to one-GPU scenarios" in str(err.value)
    eight = load_scenario("qwen-image-8gpu")
    with pytest.raises(ConfigError, match="--replicas") as err:
        prepare_stage(RunSpec("qwen-image-8gpu", "fifo", replicas=2), eight)
    assert "GPUs); --replicas/--sp apply to one-GPU scenarios" in str(err.value)
    plain = load_scenario("default")
    with pytest.raises(ConfigError, match="--sp") as err:
        sp_cost(plain, load_profile("qwen-image-h200"), 2)
    assert "use --sp 1, or a scenario whose profile has an 'sp' block (e.g. qwen-image-h200-vllm-omni" in str(err.value)
