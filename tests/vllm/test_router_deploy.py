"""``rlsched deploy --replicas R --devices LIST --sp D --router SPEC``: the stage keys vLLM-Omni's own
loader reads, a router section the API process turns into a ``RouterConfig``, and an ``extras.rlsched``
the replicas' engine plugin still accepts."""

from __future__ import annotations

import json
import os

import pytest

pytestmark = pytest.mark.vllm
if not os.environ.get("RLSCHED_REQUIRE_VLLM"):
    pytest.importorskip("vllm_omni")

from vllm_omni.config.omni_config import normalize_and_validate_diffusion_engine_ingress_kwargs  # noqa: E402
from vllm_omni.config.stage_config import load_deploy_config  # noqa: E402
from vllm_omni.diffusion.data import OmniDiffusionConfig  # noqa: E402

from rlsched.cli import main as rlsched_main  # noqa: E402
from rlsched.integrations.vllm_omni.config import PluginConfig  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterConfig  # noqa: E402

ARGS = ["--profile", "qwen-image-h200-vllm-omni", "--replicas", "2", "--sp", "2", "--devices", "0,1,2,3"]


def test_deploy_writes_replicas_layout_and_router(tmp_path, capsys) -> None:
    path = tmp_path / "deploy.yaml"
    assert rlsched_main(["deploy", "--policy", "edf@least-work", *ARGS, "--out", str(path)]) == 0
    stage = load_deploy_config(path).stages[0]  # vLLM-Omni's own loader
    assert (stage.num_replicas, stage.devices) == (2, "0,1,2,3")
    assert stage.engine_extras["parallel_config"]["ulysses_degree"] == 2
    extras = stage.engine_extras["extras"]
    assert RouterConfig.from_extras(extras, environ={}).router == "least-work"
    assert PluginConfig.from_extras(extras, environ={}).policy == "edf"  # each replica's plugin still reads it
    overrides = json.loads(capsys.readouterr().out.split("--stage-overrides '")[1].split("'")[0])["0"]
    runtime = {k: overrides.pop(k) for k in ("num_replicas", "devices")}  # the runtime's, not the engine's
    assert runtime == {"num_replicas": 2, "devices": "0,1,2,3"}
    kwargs = normalize_and_validate_diffusion_engine_ingress_kwargs(overrides, stage_id=0)
    od = OmniDiffusionConfig.from_kwargs(**kwargs)
    assert od.parallel_config.sequence_parallel_size == 2 and od.extras["rlsched_router"]["router"] == "least-work"


@pytest.mark.parametrize("args, message", [
    (["--replicas", "2"], "--devices"),
    (["--replicas", "2", "--devices", "0,1,2"], "3 GPUs"),
    (["--replicas", "2", "--devices", "0,0"], "distinct"),
    (["--replicas", "2", "--devices", "0,1", "--router", "central:2"], "central takes no arguments"),
    (["--replicas", "2", "--devices", "0,1", "--router", "no-such"], "unknown router"),
])
def test_deploy_refuses_a_layout_or_router_it_cannot_serve(tmp_path, capsys, args, message) -> None:
    assert rlsched_main(["deploy", "--policy", "edf", *args, "--out", str(tmp_path / "d.yaml")]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "d.yaml").exists()


def test_deploy_central_writes_the_central_policy_and_fifo_replicas(tmp_path) -> None:
    """``POLICY@central``: the policy picks batches centrally (extras.rlsched_router.policy), each replica
    runs them FIFO (extras.rlsched.policy), as the simulator's ``@central`` runs do."""
    path = tmp_path / "deploy.yaml"
    assert rlsched_main(["deploy", "--policy", "edf@central", *ARGS, "--out", str(path)]) == 0
    extras = load_deploy_config(path).stages[0].engine_extras["extras"]
    routing = RouterConfig.from_extras(extras, environ={})
    assert routing.central and routing.policy == "edf"
    assert PluginConfig.from_extras(extras, environ={}).policy == "fifo"
