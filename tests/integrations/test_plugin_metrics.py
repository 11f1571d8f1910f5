"""Prometheus metrics module (no vLLM) and the ``rlsched deploy`` command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

prom = pytest.importorskip("prometheus_client")

from rlsched.integrations.vllm_omni.metrics import PluginMetrics  # noqa: E402

DOCS = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"


def names(registry) -> set[str]:
    return {m.name for m in registry.collect()}


def test_metrics_on_their_own_registry_do_not_collide() -> None:
    a, b = PluginMetrics(prom.CollectorRegistry()), PluginMetrics(prom.CollectorRegistry())
    a.fallbacks.labels(reason="slow").inc()
    assert a.sample("rlsched_fallbacks_total", {"reason": "slow"}) == 1
    assert b.sample("rlsched_fallbacks_total", {"reason": "slow"}) is None
    reg = prom.CollectorRegistry()
    assert PluginMetrics.on(reg) is PluginMetrics.on(reg)  # one set per registry and model
    PluginMetrics(reg)  # a second set on the registry shares its collectors (registering twice raised)


def test_every_sample_carries_the_model_name() -> None:
    """Every rlsched_* sample has vLLM's ``model_name`` label; two models' engines in one process
    share the collectors and keep their samples apart."""
    reg = prom.CollectorRegistry()
    qwen = PluginMetrics.on(reg, "Qwen/Qwen-Image")
    flux = PluginMetrics.on(reg).for_model("black-forest-labs/FLUX.1-dev")
    for m in (qwen, flux):
        m.decisions.labels(policy="edf").inc()
        m.latency.observe(1e-4)
        m.wait_overrides.inc()
        m.record_finish("batch", "slo_met")
        m.set_queue_depth({"batch": 2})
    qwen.invalid.labels(field="priority").inc()
    samples = [s for metric in reg.collect() for s in metric.samples]
    assert samples and all(s.labels.get("model_name") in ("Qwen/Qwen-Image", "black-forest-labs/FLUX.1-dev")
                           for s in samples)
    assert qwen.sample("rlsched_decisions_total", {"policy": "edf"}) == 1
    assert reg.get_sample_value("rlsched_decisions_total",
                                {"model_name": "black-forest-labs/FLUX.1-dev", "policy": "edf"}) == 1
    assert flux.sample("rlsched_invalid_request_fields_total", {"field": "priority"}) is None


def test_a_known_models_set_exports_zeros_from_the_start_and_an_unknown_one_nothing() -> None:
    """As prometheus_client does without labels: rlsched_admission_mismatches_total is 0 before the
    first mismatch (an alert on it needs the series); the scheduler's set from before it knows its
    model leaves no ``unknown`` series."""
    reg = prom.CollectorRegistry()
    unknown = PluginMetrics.on(reg)
    known = unknown.for_model("Qwen/Qwen-Image")
    assert known.sample("rlsched_admission_mismatches_total") == 0
    assert known.sample("rlsched_queue_depth", {"priority": "realtime"}) == 0
    assert {s.labels["model_name"] for m in reg.collect() for s in m.samples} == {"Qwen/Qwen-Image"}


def test_the_model_name_is_the_one_vllm_labels_with() -> None:
    from types import SimpleNamespace

    from rlsched.integrations.vllm_omni.metrics import model_name_of

    assert model_name_of(SimpleNamespace(model="/models/qwen", served_model_name=["qwen-image", "q"])) == "qwen-image"
    assert model_name_of(SimpleNamespace(model_config=SimpleNamespace(served_model_name="flux"))) == "flux"
    assert model_name_of(SimpleNamespace(model="Qwen/Qwen-Image")) == "Qwen/Qwen-Image"
    assert model_name_of(None, SimpleNamespace()) == "unknown"


def test_the_model_name_is_the_served_name_not_the_folders_path(tmp_path: Path) -> None:
    """vLLM's served model name when given; else the model folder's basename (vLLM-Omni 0.30 tells a diffusion
    stage only ``model``, the path; vLLM's own default served name is that path too), as a client names it."""
    from types import SimpleNamespace

    from rlsched.integrations.vllm_omni.metrics import model_name_of

    folder = tmp_path / "FLUX.1-dev"
    folder.mkdir()
    assert model_name_of(SimpleNamespace(model=str(folder))) == "FLUX.1-dev"  # the diffusion stage's od_config
    assert model_name_of(SimpleNamespace(model=f"{folder}/")) == "FLUX.1-dev"
    assert model_name_of(SimpleNamespace(model_config=SimpleNamespace(served_model_name=str(folder),
                                                                      model=str(folder)))) == "FLUX.1-dev"
    assert model_name_of(SimpleNamespace(model_config=SimpleNamespace(served_model_name="flux", model=str(folder)))) \
        == "flux"
    assert model_name_of("./models/qwen") == "qwen" and model_name_of("Qwen/Qwen-Image") == "Qwen/Qwen-Image"


def test_a_request_aborted_past_its_deadline_missed_its_slo() -> None:
    """A client that gave up on a late request (loadgen's --timeout) counts it as a miss, and so does the server;
    cancelled before its deadline it is neither met nor missed."""
    from types import SimpleNamespace

    from rlsched.integrations.vllm_omni.metrics import finish_outcome

    def rec(status: str, finish_s: float) -> SimpleNamespace:  # a RequestRecord's fields that finish_outcome reads
        return SimpleNamespace(status=status, finish_s=finish_s, deadline_s=10.0,
                               slo_met=status == "completed" and finish_s <= 10.0)

    assert [finish_outcome(rec("completed", 9.0)), finish_outcome(rec("completed", 11.0)),
            finish_outcome(rec("failed", 1.0))] == ["slo_met", "slo_missed", "slo_missed"]
    assert [finish_outcome(rec("aborted", 11.0)), finish_outcome(rec("aborted", 5.0))] == ["slo_missed", "aborted"]


def test_slo_attainment_per_class() -> None:
    m = PluginMetrics(prom.CollectorRegistry())
    for outcome in ("slo_met", "slo_met", "slo_missed", "aborted"):
        m.record_finish("realtime", outcome)
    m.record_finish("batch", "slo_missed")
    get = m.sample
    assert get("rlsched_slo_attainment_ratio", {"priority": "realtime"}) == pytest.approx(2 / 3)
    assert get("rlsched_slo_attainment_ratio", {"priority": "batch"}) == 0.0
    assert get("rlsched_requests_finished_total", {"priority": "realtime", "outcome": "aborted"}) == 1
    m.set_queue_depth({"realtime": 3})
    assert get("rlsched_queue_depth", {"priority": "realtime"}) == 3
    assert get("rlsched_queue_depth", {"priority": "background"}) == 0


def test_a_deployment_of_its_own_classes_exports_queue_depth_for_those_alone() -> None:
    reg = prom.CollectorRegistry()
    m = PluginMetrics.on(reg, "Qwen/Qwen-Image")  # a known model: the shipped three exported at once
    m.serve_classes(["paid", "free"])
    m.set_queue_depth({"paid": 2})
    depth = {s.labels["priority"]: s.value for f in reg.collect() for s in f.samples if s.name == "rlsched_queue_depth"}
    assert depth == {"paid": 2, "free": 0}


def test_every_metric_is_prefixed_and_documented() -> None:
    registered = names(PluginMetrics(prom.CollectorRegistry()).registry)
    assert registered and all(n.startswith("rlsched_") for n in registered)
    documented = set(re.findall(r"`(rlsched_[a-z_]+)`", DOCS.read_text()))
    # prometheus_client reports counters without their _total suffix
    assert {n.removesuffix("_total") for n in documented} == registered


# ------------------------------------------------------------------ deploy
def rlsched(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlsched", *args], capture_output=True, text=True,
                          check=check, timeout=120)


def test_every_setting_is_in_the_settings_table() -> None:
    from rlsched.integrations.vllm_omni.config import PluginConfig

    table = DOCS.read_text().split("| key | default | meaning |", 1)[1].split("\n\n", 1)[0]
    keys = {k for row in table.splitlines() if row.startswith("| `") for k in re.findall(r"`(\w+)`", row.split("|")[1])}
    assert keys == set(PluginConfig.model_fields)


def test_deploy_writes_a_stage_with_engine_backend_and_extras(tmp_path: Path) -> None:
    out = tmp_path / "deploy.yaml"
    (tmp_path / "wan2_2_ti2v.yaml").write_text("stages:\n  - stage_id: 0\n")  # deploy checks the base exists
    res = rlsched("deploy", "--policy", "edf", "--max-num-seqs", "8", "--step-execution",
                  "--default-slo-scale", "4", "--base-config", "wan2_2_ti2v.yaml", "--out", str(out))
    doc = yaml.safe_load(out.read_text())
    assert doc["base_config"] == "wan2_2_ti2v.yaml"
    stage = doc["stages"][0]
    assert stage == {"stage_id": 0, "max_num_seqs": 8, "step_execution": True, "request_batch_max_wait_ms": 0.0,
                     "engine_backend": "rlsched.integrations.vllm_omni.RLDiffusionEngine",
                     "extras": {"rlsched": {"policy": "edf", "profile": "qwen-image-h200-vllm-omni",
                                            "default_slo_scale": 4.0}}}
    assert f"--deploy-config {out}" in res.stdout
    overrides = json.loads(res.stdout.split("--stage-overrides '")[1].split("'")[0])
    assert overrides == {"0": {k: v for k, v in stage.items() if k != "stage_id"}}


def test_deploy_rejects_unknown_policy_and_profile(tmp_path: Path) -> None:
    for args, what in ((["--policy", "nope"], "unknown policy"), (["--policy", "edf", "--profile", "gpu9"], "gpu9")):
        res = rlsched("deploy", *args, "--out", str(tmp_path / "d.yaml"), check=False)
        assert res.returncode == 2 and what in res.stderr
        assert not (tmp_path / "d.yaml").exists()


def _nan_checkpoint(tmp_path: Path) -> Path:
    from rlsched.learned.checkpoint import META, WEIGHTS, read_safetensors, save_checkpoint
    from rlsched.resources import data_dir

    src = data_dir("checkpoints") / "default"
    tensors = read_safetensors(src / WEIGHTS)
    tensors["action_net.bias"] = np.full_like(tensors["action_net.bias"], np.nan)
    return save_checkpoint(tmp_path / "nan-ck", tensors, json.loads((src / META).read_text()))  # re-signed


@pytest.mark.parametrize(("args", "message"), [
    (["--metrics-port", "70000"], "argument --metrics-port: must be an integer >= 0 and <= 65535, not 70000"),
    (["--metrics-port", "-1"], "--metrics-port"),
    (["--stage-id", "-1"], "argument --stage-id: must be an integer >= 0"),
    (["--policy", "drr:0"], "policy drr:0"),
    (["--policy", "drr:-1"], "policy drr:-1"),
    (["--decision-deadline-ms", "0"], "argument --decision-deadline-ms: must be a finite number > 0"),
    (["--policy", "rl:NANCK"], "action_net.bias has 9 non-finite values"),
])
def test_deploy_validates_before_writing(tmp_path: Path, args: list[str], message: str) -> None:
    args = [a.replace("NANCK", str(_nan_checkpoint(tmp_path))) for a in args]
    out = tmp_path / "d.yaml"
    res = rlsched("deploy", "--policy", "edf", *args, "--out", str(out), check=False)
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr
    assert not out.exists()


def test_deploy_into_a_missing_folder_is_a_clear_error(tmp_path: Path) -> None:
    res = rlsched("deploy", "--policy", "edf", "--out", str(tmp_path / "nope" / "d.yaml"), check=False)
    assert res.returncode == 2 and f"folder {tmp_path / 'nope'} does not exist" in res.stderr
    assert "Traceback" not in res.stderr


def test_replicas_sharing_a_stage_config_each_serve_the_next_free_metrics_port() -> None:
    import socket
    import urllib.request

    from rlsched.integrations.vllm_omni import metrics as metrics_mod

    with socket.socket() as busy:  # the first port is taken (another replica, here a plain socket)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        base = busy.getsockname()[1]
        registry = prom.CollectorRegistry()
        PluginMetrics(registry).replica.labels(devices="1", port=str(base + 1)).set(1)
        try:
            got = metrics_mod.serve(base, registry, span=2)
        finally:
            metrics_mod._SERVING.pop(base, None)
        if got is None:  # base + 1 happened to be taken too on this machine: nothing to check
            pytest.skip(f"ports {base} and {base + 1} both in use")
        assert got == base + 1 and metrics_mod.serve(base, registry, span=1) is None  # span 1: only the busy port
        text = urllib.request.urlopen(f"http://127.0.0.1:{got}/metrics", timeout=5).read().decode()
        assert f'rlsched_replica_info{{devices="1",model_name="unknown",port="{base + 1}"}} 1.0' in text


def test_deploy_gives_each_replica_a_metrics_port(tmp_path: Path) -> None:
    from rlsched.errors import ConfigError
    from rlsched.integrations.vllm_omni.config import PluginConfig

    rlsched("deploy", "--policy", "edf", "--replicas", "2", "--devices", "0,1", "--metrics-port", "9400",
            "--out", str(tmp_path / "two.yaml"))
    rlsched("deploy", "--policy", "edf", "--replicas", "2", "--devices", "0,1", "--out", str(tmp_path / "off.yaml"))
    two, off = (yaml.safe_load((tmp_path / f).read_text())["stages"][0]["extras"]["rlsched"]
                for f in ("two.yaml", "off.yaml"))
    assert (two["metrics_port"], two["metrics_ports"]) == (9400, 2)
    assert "metrics_port" not in off and "metrics_ports" not in off  # no endpoint: nothing to share

    assert PluginConfig.from_extras({"rlsched": {"metrics_port": 9400, "metrics_ports": 2}}).metrics_ports == 2
    for bad in (0, True, 2.0):
        with pytest.raises(ConfigError, match="metrics_ports"):
            PluginConfig(metrics_port=9400, metrics_ports=bad)
    with pytest.raises(ConfigError, match="metrics_ports"):
        PluginConfig(metrics_port=65535, metrics_ports=2)
