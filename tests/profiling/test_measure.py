"""``rlsched profile measure`` on CPU: a tiny random transformer, timed and fitted end to end."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from rlsched.errors import ConfigError
from rlsched.profiling.fit import fit_profile
from rlsched.profiling.measure import MeasureSpec, measure, parse_resolutions
from rlsched.profiling.measurements import read_measurements


@pytest.mark.parametrize("arch,shapes,cfg", [("tiny-flux", "32x32,64x64", False), ("tiny-wan", "32x32x5,64x64", True),
                                              ("tiny-qwen-image", "32x32,64x64", True)])
def test_measure_writes_a_csv_that_fit_reads(tmp_path: Path, arch: str, shapes: str, cfg: bool) -> None:
    out = tmp_path / "measurements.csv"
    rows = measure(MeasureSpec(arch, [1, 2], shapes, cfg, 1, True, "auto", False, 0), out)
    back = read_measurements(out)
    assert [(r.metric, r.batch, r.width, r.frames) for r in back] == [(r.metric, r.batch, r.width, r.frames)
                                                                     for r in rows]
    assert {r.metric for r in back} == {"step_s", "decode_s"}  # no peak memory on CPU
    assert len(back) == 2 * 2 * 2 and all(r.value > 0 and r.gpu == "cpu" for r in back)
    assert all(r.cfg is cfg and "eager" in r.stack and "fp32" in r.stack for r in back)
    spec = {"name": f"{arch}-cpu", "gpu": {"name": "cpu", "memory_gb": 1000},
            "stack": {"engine": "diffusers", "attention": "sdpa", "compile": False, "precision": "fp32",
                      "cfg": "sequential" if cfg else "none"},
            "sources": [str(out)],
            "models": {rows[0].model: {"spec": {"modality": "image"},
                                       "start": {"floor_s": 0, "a_s": 0.01, "b_s_per_mtok": 1, "c_s_per_gtok2": 1,
                                                 "encode_s": 0, "decode_s_per_mpx": 1, "weights_gb": 0,
                                                 "act_gb_per_ktok": 0, "vae_gb_per_mpx": 0},
                                       # b_s_per_mtok held: a tiny model's step is all overhead, so
                                       # on a noisy CPU its token slope can fit to ~0 and fit then
                                       # (rightly) calls it unidentified; the round trip is the point
                                       "fit": ["a_s", "decode_s_per_mpx"]}}}
    (tmp_path / "fit.yaml").write_text(yaml.safe_dump(spec))
    result = fit_profile(tmp_path)
    assert len(result.residuals) == len(back)
    assert result.profile["models"][rows[0].model]["step"]["a_s"] > 0


def test_full_size_needs_a_gpu(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the full-size path is the real measurement")
    with pytest.raises(ConfigError, match="needs a GPU"):
        measure(MeasureSpec("wan", [1], "64x64", False, 1, True, "auto", False, 0), tmp_path / "m.csv")


@pytest.mark.parametrize("bad", ["64", "64x", "65x64", "0x16", "64x64x0"])
def test_bad_resolution_is_named(bad: str) -> None:
    with pytest.raises(ConfigError, match="--resolutions"):
        parse_resolutions(bad)


def test_resolutions_parse() -> None:
    assert parse_resolutions("832x480x81, 64x32") == [(832, 480, 81), (64, 32, 1)]
