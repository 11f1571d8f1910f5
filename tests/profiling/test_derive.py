"""``rlsched profile derive``: a profile from a DiT's configs and a GPU's datasheet (issue 46)."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from rlsched.errors import ConfigError
from rlsched.profiling.architecture import ARCH_DIR, list_models, read_architecture
from rlsched.profiling.derive import (
    EFFICIENCY_FILE,
    MEMORY_MARGIN,
    Stack,
    derived_cost,
    fit_efficiencies,
    load_efficiencies,
    render_efficiencies,
    shipped_points,
)
from rlsched.profiling.gpus import GPUS, find_gpu, parse_gpu_spec
from rlsched.sim.cost import load_profile
from rlsched.sim.request import Request

ROOT = Path(__file__).resolve().parents[2]


def rlsched(*args: str, cwd: Path = ROOT, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlsched", *args], capture_output=True, text=True, check=check,
                          timeout=300, cwd=cwd)


@pytest.mark.parametrize("model,shipped", [("flux1-dev", "flux1-dev-h100"), ("qwen-image", "qwen-image-h200"),
                                           ("wan2.1-t2v-14b", "wan21-t2v-14b-h100"),
                                           ("hunyuanvideo", "hunyuanvideo-h100")])
def test_flops_from_the_configs_equal_the_shipped_profiles_counts(model: str, shipped: str) -> None:
    arch, m = read_architecture(model), load_profile(shipped).model(model)
    assert arch.linear_gflop_per_token == pytest.approx(m.linear_gflop_per_token, rel=2e-3)
    assert arch.attn_flop_per_token2 == pytest.approx(m.attn_flop_per_token2, rel=1e-6)
    assert arch.patch_px == m.patch_px


@pytest.mark.parametrize("model,billions", [("flux1-dev", 11.9), ("qwen-image", 20.4), ("wan2.1-t2v-14b", 14.0),
                                            ("wan2.1-t2v-1.3b", 1.4), ("sd3.5-large", 8.1), ("wan2.2-ti2v-5b", 5.0)])
def test_dit_parameters_match_the_published_sizes(model: str, billions: float) -> None:
    assert read_architecture(model).transformer.params / 1e9 == pytest.approx(billions, rel=0.05)


def test_the_shipped_efficiencies_are_the_fit_on_every_shipped_set() -> None:
    points = shipped_points()
    assert EFFICIENCY_FILE.read_text() == render_efficiencies(fit_efficiencies(points), len(points))


def test_the_leave_one_pair_out_table_in_the_docs_is_this_run() -> None:
    """Regenerates docs/derive.md's table (every pair derived with its own rows left out) and compares."""
    res = subprocess.run([sys.executable, "scripts/derive_score.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stderr


def test_leave_one_pair_out_meets_the_latency_median_and_never_under_estimates_memory_past_10_percent() -> None:
    from rlsched.profiling.derive import score_leave_one_out, summary

    s = summary(score_leave_one_out())
    assert s["latency_points"] >= 30 and s["memory_points"] >= 5
    assert s["median_abs_error"] <= 0.20
    assert s["worst_memory_under"] <= 0.10


def test_leave_one_pair_out_leaves_at_most_the_sglang_floor_outside_x1_6() -> None:
    """Issue 46 asks every point within x1.6: four were outside before the attention ceilings, one is left
    (sglang's per-step floor at batch 1 on the H200, docs/derive.md)."""
    from rlsched.profiling.derive import LATENCY_METRICS, score_leave_one_out

    outside = [s for s in score_leave_one_out() if s.point.row.metric in LATENCY_METRICS
               and max(s.ratio, 1 / s.ratio) > 1.6]
    assert [(s.point.pair, s.point.row.batch, s.point.row.stack) for s in outside] == [
        (("qwen-image", "H200"), 1, "sglang+compile")]


def test_attention_runs_at_the_generations_ceiling_where_the_datasheet_times_the_efficiency_exceeds_it() -> None:
    arch, eff = read_architecture("hunyuanvideo"), load_efficiencies()

    def attention_tflops(gpu_name: str) -> float:
        gpu = replace(find_gpu(gpu_name), memory_gb=1e6)  # HunyuanVideo's weights need more than an L20's 48 GB
        c = derived_cost(arch, gpu, eff, digits=None).model("hunyuanvideo").c_s_per_gtok2
        return arch.attn_flop_per_token2 * 1e9 / c / 1e12

    assert find_gpu("H100").tflops * eff.eff_attention > 335 and find_gpu("H20").tflops * eff.eff_attention < 335
    assert attention_tflops("H100") == pytest.approx(335) and attention_tflops("H200") == pytest.approx(335)
    assert attention_tflops("A800") == pytest.approx(min(312 * eff.eff_attention, 230))
    assert attention_tflops("H20") == pytest.approx(148 * eff.eff_attention)
    assert attention_tflops("L20") == pytest.approx(119.5 * eff.eff_attention)  # Ada: no published ceiling
    # Blackwell and CDNA3: the datasheet times the fitted efficiency lies above what cuDNN's SDPA and AITER reach
    assert find_gpu("MI300X").tflops * eff.eff_attention > 590 and attention_tflops("MI300X") == pytest.approx(590)
    assert find_gpu("B200").tflops * eff.eff_attention > 1600 and attention_tflops("B200") == pytest.approx(1600)
    custom = parse_gpu_spec("tflops=989,bandwidth_gbs=3350,memory_gb=80")
    assert custom.attention_tflops == math.inf


def test_every_listed_gpu_names_its_generation_and_each_ceiling_its_source() -> None:
    from rlsched.profiling.gpus import ATTENTION_CEILINGS, GENERATIONS

    assert all(g.generation in GENERATIONS for g in GPUS)
    assert {find_gpu(n).generation for n in ("A100", "L40S", "H20", "B200", "MI300X")} == set(GENERATIONS)
    for ceiling in ATTENTION_CEILINGS.values():
        assert ("arXiv:" in ceiling.source or "README" in ceiling.source) and 0 < ceiling.uncertainty < ceiling.tflops
    listed = rlsched("profile", "derive", "--list-gpus").stdout.splitlines()
    assert next(line for line in listed if line.startswith("H20 ")).split()[5:7] == ["Hopper", "335"]
    assert next(line for line in listed if line.startswith("L20 ")).split()[5:7] == ["Ada", "-"]
    assert next(line for line in listed if line.startswith("B200 ")).split()[5:7] == ["Blackwell", "1600"]
    assert next(line for line in listed if line.startswith("MI300X ")).split()[5:7] == ["CDNA3", "590"]


def test_a_derived_profile_names_the_kernel_whose_ceiling_caps_its_attention() -> None:
    from rlsched.profiling.derive import derive_profile

    def note(gpu: str) -> str:
        profile = derive_profile(read_architecture("flux1-dev"), find_gpu(gpu), load_efficiencies(), Stack())
        return str(profile["stack"]["attention"])

    assert "Blackwell's cuDNN SDPA ceiling of 1600 ± 200 TFLOPS" in note("B200")
    assert "Hopper's FlashAttention-2 ceiling of 335 ± 15 TFLOPS" in note("H100")
    assert "CDNA3's AITER ceiling of 590 ± 60 TFLOPS" in note("MI300X")
    assert "no published kernel ceiling" in note("L40S")


def test_gpu_by_nvml_name_short_name_and_numbers() -> None:
    assert find_gpu("NVIDIA H100 80GB HBM3").name == "H100"
    assert find_gpu("nvidia l40s").name == "L40S" and find_gpu("NVIDIA GeForce RTX 4090").name == "RTX4090"
    for short in ("A100", "A800", "H100", "H800", "H200", "H20", "B200", "L40S", "L20", "L4", "A10G", "RTX4090",
                  "MI300X"):
        assert find_gpu(short).source
    g = parse_gpu_spec("tflops=200,bandwidth_gbs=1000,memory_gb=48")
    assert (g.tflops, g.bandwidth_gbs, g.memory_gb, g.link_gbs) == (200, 1000, 48, 32)
    assert len({g.name for g in GPUS}) == len(GPUS)


@pytest.mark.parametrize("spec,names", [("tflops=1,bandwidth_gbs=2", "memory_gb"),
                                        ("tflops=x,bandwidth_gbs=1,memory_gb=1", "tflops"),
                                        ("tflops=0,bandwidth_gbs=1,memory_gb=1", "tflops"),
                                        ("tflops=1,tflops=2,bandwidth_gbs=1,memory_gb=1", "twice"),
                                        ("flops=1", "flops=1")])
def test_a_bad_gpu_spec_names_its_key(spec: str, names: str) -> None:
    with pytest.raises(ConfigError, match=names):
        parse_gpu_spec(spec)


def test_an_unknown_gpu_points_to_gpu_spec() -> None:
    with pytest.raises(ConfigError, match="--gpu-spec"):
        find_gpu("NVIDIA Voodoo 5")


def test_a_derived_profile_loads_and_scales_with_the_gpu() -> None:
    arch, eff = read_architecture("flux1-dev"), load_efficiencies()
    req = Request(0, 0.0, "flux1-dev", "image", 1024, 1024, 1, 28, False, "batch", 1e9)
    h100, l40s = derived_cost(arch, find_gpu("H100"), eff), derived_cost(arch, find_gpu("L40S"), eff)
    assert 1.5 < l40s.standalone_s(req) / h100.standalone_s(req) < 4.0  # 362 vs 989 TFLOPS, 864 vs 3350 GB/s
    assert l40s.fits([l40s.record(req)])  # FLUX.1-dev at 1024x1024 fits a 48 GB L40S
    assert derived_cost(arch, find_gpu("H100"), eff, Stack(compile=True)).standalone_s(req) < h100.standalone_s(req)


SHIPPED_VIDEO = ("wan21-t2v-14b-h100", "hunyuanvideo-h100", "wan22-ti2v-5b-a800")


@pytest.mark.parametrize("shipped", SHIPPED_VIDEO)
def test_a_derived_prior_never_under_estimates_a_batch_of_two_of_the_largest_shipped_videos(shipped: str) -> None:
    """Fail safe for batches, not only for the batch-1 peaks the memory envelope is fitted on: the prior derived
    with the pair left out of the fit (what serves an unmeasured pair) holds two of the pair's largest measured
    videos in at least the memory the shipped (true) profile says they take together."""
    truth = load_profile(shipped)
    (model,) = truth.models
    gpu = find_gpu(truth.gpu)
    points = shipped_points()
    largest = max((p.row for p in points if p.pair == (model, gpu.name) and p.row.frames > 1),
                  key=lambda r: r.height * r.width * r.frames)
    assert truth.stack is not None
    stack = Stack(compile=truth.stack.compile, cfg=truth.stack.cfg)
    eff = fit_efficiencies([p for p in points if p.pair != (model, gpu.name)])
    prior = derived_cost(read_architecture(model), gpu, eff, stack)
    req = Request(0, 0.0, model, "video", largest.height, largest.width, largest.frames, 50, largest.cfg, "batch", 1e9)
    two_true = truth.batch_memory_gb([truth.record(req)] * 2)
    assert prior.batch_memory_gb([prior.record(req)] * 2) >= two_true


def test_every_batch_the_video_mix_prior_admits_fits_the_true_profile() -> None:
    """What serving on the prior needs (scripts/derived_prior.py: 0 OOM from the first request): every batch of
    one of video-mix's shapes, up to its max_num_seqs, that the prior (Wan2.1 x H100 left out) lets start fits
    the GPU at the shipped profile too."""
    from rlsched.sim import load_scenario

    sc = load_scenario("video-mix")
    truth, points = sc.cost(), shipped_points()
    (model,) = truth.models
    eff = fit_efficiencies([p for p in points if p.pair != (model, "H100")])
    prior = derived_cost(read_architecture(model), find_gpu("H100"), eff, Stack(cfg="sequential"))
    for shape in sc.mix:
        req = Request(0, 0.0, model, shape.modality, shape.height, shape.width, shape.num_frames, shape.steps,
                      shape.cfg, "batch", 1e9)
        for n in range(1, sc.serving.max_num_seqs + 1):
            if prior.fits([prior.record(req)] * n):
                assert truth.fits([truth.record(req)] * n), (shape, n)


def test_every_shipped_architecture_derives_on_every_gpu_with_room_for_its_weights() -> None:
    eff = load_efficiencies()
    for name in list_models():
        arch = read_architecture(name)
        for gpu in GPUS:
            if arch.params * 2 / 1e9 * 1.5 < gpu.memory_gb:
                derived_cost(arch, gpu, eff)


def test_a_diffusers_folder_without_text_encoder_and_vae_configs_uses_the_pipelines_defaults(tmp_path: Path) -> None:
    folder = tmp_path / "my-flux"
    (folder / "transformer").mkdir(parents=True)
    shutil.copy(ARCH_DIR / "flux1-dev" / "model_index.json", folder)
    shutil.copy(ARCH_DIR / "flux1-dev" / "transformer" / "config.json", folder / "transformer")
    arch = read_architecture(folder)
    assert arch.name == "my-flux"
    assert arch.linear_gflop_per_token == read_architecture("flux1-dev").linear_gflop_per_token
    assert any("default" in s for s in arch.sources)


def test_unreadable_architectures_are_refused_by_name(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "transformer").mkdir(parents=True)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    with pytest.raises(ConfigError, match="transformer/config.json"):
        read_architecture(folder)
    (folder / "transformer" / "config.json").write_text(json.dumps({"_class_name": "UNet2DConditionModel"}))
    with pytest.raises(ConfigError, match="UNet2DConditionModel"):
        read_architecture(folder)
    (folder / "transformer" / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not JSON"):
        read_architecture(folder)
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(ConfigError, match="StableDiffusionPipeline"):
        read_architecture(folder)
    with pytest.raises(ConfigError, match="neither"):
        read_architecture("no-such-model")


def test_cli_derive_writes_a_profile_simulate_and_predict_read(tmp_path: Path) -> None:
    out = tmp_path / "flux-l40s.yaml"
    res = rlsched("profile", "derive", "--model", "flux1-dev", "--gpu", "NVIDIA L40S", "--out", str(out), cwd=tmp_path)
    assert "derived" in res.stderr and out.read_text().startswith("# flux1-dev on L40S: DERIVED")
    cost = load_profile(out)
    assert cost.gpu == "L40S" and cost.gpu_memory_gb == 48
    pred = rlsched("profile", "predict", str(out), "--height", "1024", "--width", "1024", "--steps", "28", "--json")
    assert json.loads(pred.stdout)["latency_s"] > 0


def test_cli_derive_lists_and_refuses_cleanly(tmp_path: Path) -> None:
    assert "flux1-dev" in rlsched("profile", "derive", "--list-models").stdout
    assert "MI300X" in rlsched("profile", "derive", "--list-gpus").stdout
    res = rlsched("profile", "derive", "--model", "flux1-dev", check=False)
    assert res.returncode == 2 and "--gpu" in res.stderr and "Traceback" not in res.stderr
    res = rlsched("profile", "derive", "--model", str(tmp_path), "--gpu", "H100", check=False)
    assert res.returncode == 2 and "model_index.json" in res.stderr and "Traceback" not in res.stderr
    spec = rlsched("profile", "derive", "--model", "wan2.1-t2v-1.3b", "--gpu-spec",
                   "tflops=100,bandwidth_gbs=500,memory_gb=24")
    assert "name: wan2.1-t2v-1.3b-custom-derived" in spec.stdout


def test_cli_derive_refuses_a_model_whose_weights_with_the_prior_overhead_do_not_fit() -> None:
    res = rlsched("profile", "derive", "--model", "hunyuanvideo", "--gpu", "L20", check=False)
    share = load_efficiencies().overhead_share * MEMORY_MARGIN
    weights = read_architecture("hunyuanvideo").params * 2 / 1e9 * (1 + share)
    assert res.returncode == 2 and f"take {weights:.4g} GB" in res.stderr and "L20's 48 GB" in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
