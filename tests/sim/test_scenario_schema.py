"""Scenario files against the declared schema: every error names file, key and reason."""

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsched.errors import ConfigError, RlschedError
from rlsched.sim import load_scenario
from rlsched.sim.scenario import scenario_from_dict
from rlsched.sim.yamlio import read_yaml

GOOD: dict[str, Any] = {
    "name": "x", "profile": "qwen-image-h200", "duration_s": 60,
    "arrival": {"process": "poisson", "rate_rps": 0.5},
    "classes": {"batch": {"share": 1, "slo_scale": 3}},
    "mix": [{"model": "qwen-image", "modality": "image", "height": 512, "width": 512}],
}


def with_(path: str, value: Any) -> dict[str, Any]:
    """GOOD with ``a.b.c`` set to ``value`` (``...`` deletes it)."""
    data = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    node = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if value is ...:
        del node[last]
    else:
        node[last] = value
    return data


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_good_file_loads_and_defaults_to_poisson(tmp_path: Path) -> None:
    sc = load_scenario(write(tmp_path, with_("arrival.process", ...)))
    assert sc.arrival["process"] == "poisson" and sc.requests(seed=0)


@pytest.mark.parametrize(("path", "value", "key", "reason"), [
    ("arrival.rate_rps", ..., "arrival.rate_rps", "missing"),
    ("arrival.rate_rps", "fast", "arrival.rate_rps", "valid number"),
    ("arrival.rate_rps", -1, "arrival.rate_rps", "greater than 0"),
    ("duration_s", -1, "duration_s", "greater than 0"),
    ("duration_s", "long", "duration_s", "valid number"),
    ("duration_s", float("nan"), "duration_s", "finite"),
    ("classes.batch.share", 0, "classes.batch.share", "greater than 0"),
    ("classes.batch.share", -0.5, "classes.batch.share", "greater than 0"),
    ("rate_rps", 3, "rate_rps", "unknown key"),
    ("arrival.rate_rsp", 3, "arrival.rate_rsp", "unknown key"),
    ("arrival.process", "zipf", "arrival", "unknown process"),
    ("classes.9vip", {"share": 1, "slo_scale": 2}, "classes.9vip (key)", "a class name is a letter"),
    ("mix.0.height", 512.5, "mix[0].height", "integer"),
    ("serving", {"mode": "batchy"}, "serving.mode", "request"),
])
def test_bad_values_name_file_key_and_reason(tmp_path: Path, path: str, value: Any, key: str, reason: str) -> None:
    file = write(tmp_path, with_(path, value))
    with pytest.raises(ConfigError) as err:
        load_scenario(file)
    assert re.fullmatch(rf"{re.escape(str(file))}:\d+: {re.escape(key)}", err.value.where), err.value.where
    assert reason in str(err.value)


def test_errors_name_the_line_of_the_key(tmp_path: Path) -> None:
    file = tmp_path / "s.yaml"
    file.write_text("name: x\nprofile: qwen-image-h200\nduration_s: 60\narrival:\n  process: poisson\n"
                    "  rate_rps: -2\nclasses:\n  batch: {share: 1, slo_scale: 3}\nmix:\n"
                    "  - {model: qwen-image, modality: image, height: 512, width: 512}\n"
                    "  - {model: qwen-image, modality: image, height: 0, width: 512}\nrate: 1\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(file)
    assert err.value.where == f"{file}:6: arrival.rate_rps"
    assert "mix[1].height (line 11): Input should be greater than or equal to 1" in str(err.value)
    assert "rate (line 12): unknown key" in str(err.value)


def test_every_problem_is_listed_at_once(tmp_path: Path) -> None:
    data = with_("duration_s", -1)
    data["arrival"]["rate_rps"] = "x"
    with pytest.raises(ConfigError, match=r"duration_s.*; arrival.rate_rps"):
        scenario_from_dict(data, "s.yaml")


@pytest.mark.parametrize("data", [[1, 2], "text", None, 3])
def test_top_level_must_be_a_mapping(data: Any) -> None:
    with pytest.raises(ConfigError, match="mapping"):
        scenario_from_dict(data, "s.yaml")


def test_a_shape_no_gpu_can_hold_is_refused_up_front() -> None:
    sc = scenario_from_dict({**GOOD, "mix": [
        {"model": "qwen-image", "modality": "image", "height": 100000, "width": 100000}]}, "s.yaml")
    with pytest.raises(ConfigError, match=r"s.yaml: mix\[0\].*shape.*100000x100000x1.*GB"):
        sc.requests(seed=0)


def test_absurd_rate_is_refused_before_allocating() -> None:
    sc = scenario_from_dict(with_("arrival.rate_rps", 1e12), "s.yaml")
    with pytest.raises(ConfigError, match="rate_rps"):
        sc.requests(seed=0)


def test_yaml_that_is_not_utf8_or_has_a_bom(tmp_path: Path) -> None:
    bad = tmp_path / "b.yaml"
    bad.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="UTF-8"):
        read_yaml(bad)
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbf" + yaml.safe_dump(GOOD).encode())
    assert load_scenario(bom).name == "x"


# ------------------------------------------------------------------ fuzzing

JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.text(max_size=8), st.lists(st.integers(), max_size=3),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
PATHS = ["name", "profile", "duration_s", "arrival", "arrival.process", "arrival.rate_rps", "classes",
         "classes.batch", "classes.batch.share", "classes.batch.slo_scale", "mix", "mix.0", "mix.0.height",
         "mix.0.width", "mix.0.steps", "mix.0.model", "mix.0.modality", "mix.0.cfg", "mix.0.weight", "serving",
         "description", "extra", "arrival.cv"]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(PATHS), st.one_of(JUNK, st.just(...))), min_size=1, max_size=3))
def test_fuzzed_scenarios_load_or_raise_a_config_error(edits: list[tuple[str, Any]]) -> None:
    data = copy.deepcopy(GOOD)
    for path, value in edits:
        try:
            data = _set(data, path, value)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            continue  # an earlier edit removed the parent: nothing to set
    try:
        sc = scenario_from_dict(data, "fuzz.yaml")
    except ConfigError as exc:
        assert str(exc).startswith("fuzz.yaml")
        return
    try:
        reqs = sc.requests(seed=0, duration_s=30)
    except RlschedError:
        return
    assert all(r.arrival_s < 30 for r in reqs)


def _set(data: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    copy_ = copy.deepcopy(data)
    *parents, last = path.split(".")
    node: Any = copy_
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if isinstance(node, list):
        node[int(last)] = value if value is not ... else node[int(last)]
    elif value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return copy_


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=200))
def test_fuzzed_yaml_bytes_never_traceback(tmp_path_factory: pytest.TempPathFactory, raw: bytes) -> None:
    path = tmp_path_factory.mktemp("y") / "f.yaml"
    path.write_bytes(raw)
    try:
        load_scenario(path)
    except ConfigError as exc:
        assert str(path) in str(exc)


# ------------------------------------------------------------------ the stage as a whole (issue 34)
def _numeric_paths() -> list[str]:
    """Every numeric field of a scenario, as a key path into GOOD (+ a replica group)."""
    return ["duration_s", "arrival.rate_rps", "classes.batch.share", "classes.batch.slo_scale", "mix.0.height",
            "mix.0.width", "mix.0.num_frames", "mix.0.steps", "mix.0.weight", "mix.0.prefix_groups",
            "serving.max_num_seqs", "serving.request_batch_max_wait_ms", "replicas.0.count",
            "replicas.0.sp_degree", "replicas.0.cfg_parallel"]


@pytest.mark.parametrize("path", _numeric_paths())
@pytest.mark.parametrize("value", [True, False])
def test_a_boolean_is_never_a_number(tmp_path: Path, path: str, value: bool) -> None:
    """Bug: ``count: true`` was coerced to one replica (pydantic reads true as 1, even in ``Literal[1, 2]``)."""
    data = copy.deepcopy(GOOD) | {"serving": {}, "replicas": [{"count": 1}]}
    *parents, last = path.split(".")
    node: Any = data
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    node[last] = value
    with pytest.raises(ConfigError, match=r"s.yaml:\d+: .*must be a number, not a boolean"):
        load_scenario(write(tmp_path, data))


def test_a_whole_stage_has_at_most_max_replicas(tmp_path: Path) -> None:
    """Bug: the cap was per group: many groups ran until killed or ended in a numpy MemoryError."""
    from rlsched import bounds

    groups = [{"count": 1024, "name": f"g{i}"} for i in range(3)]
    with pytest.raises(ConfigError) as err:
        load_scenario(write(tmp_path, GOOD | {"replicas": groups}))
    assert re.search(r"s.yaml:\d+: replicas: 3072 replicas in all groups; a stage has at most 1024", str(err.value))
    ok = [{"count": 512, "name": "a"}, {"count": 512, "name": "b"}]
    assert len(load_scenario(write(tmp_path, GOOD | {"replicas": ok})).replica_specs()) == bounds.MAX_REPLICAS


def test_two_groups_with_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    """Bug: two groups named alike gave ambiguous ``per_replica`` rows (``a-0`` twice)."""
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(GOOD, sort_keys=False) + "replicas:\n  - {count: 2, name: a}\n"
                    "  - {count: 1, sp_degree: 2}\n  - {count: 1, name: a}\n")
    with pytest.raises(ConfigError) as err:
        load_scenario(path)
    assert str(err.value) == (f"{path}:19: replicas[2].name: 'a' is also the name of replicas[0] (line 17): their "
                              "replicas' per_replica rows would be ambiguous; give each group its own name")
    path.write_text(yaml.safe_dump(GOOD | {"replicas": [{"count": 1}, {"count": 2}]}))
    with pytest.raises(ConfigError, match=r"replicas\[1\].name: 'qwen-image-h200@sp1' is also the name of "
                                          r"replicas\[0\]"):
        load_scenario(path)  # the default names collide too


def test_a_multi_frame_shape_on_an_image_model_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mix\[0\]: invalid request field 'num_frames'=8: model 'qwen-image' "
                                          r"generates images: one frame"):
        load_scenario(write(tmp_path, with_("mix.0.num_frames", 8))).requests(seed=0)
