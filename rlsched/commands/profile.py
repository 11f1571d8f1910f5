"""``rlsched profile fit|measure|predict|derive|calibrate``: cost profiles from measurements, measurements from
this device, what a profile predicts for one request (on one GPU or with sequence parallelism), a profile
derived from a DiT's configs and a GPU's datasheet alone, and a profile with the plugin's online calibration
applied."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlsched import bounds
from rlsched.argtypes import flag, seed_arg
from rlsched.commands.args import HelpFormatter, check_out_file, command, print_json, write_atomic
from rlsched.errors import ConfigError


@command("profile", "Fit a cost profile to a measurement set, measure a diffusers transformer on this device,"
                    " derive a profile for any DiT on any GPU without measurements,"
                    " or predict a request's latency and memory from a profile.")
def add_args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="profile_command", required=True, metavar="ACTION")
    f = sub.add_parser("fit", help="fit a profile to a measurement set (folder with measurements.csv + fit.yaml)",
                       formatter_class=HelpFormatter)
    f.add_argument("measurements", type=Path, help="measurement set: its folder, measurements.csv or fit.yaml")
    f.add_argument("--out", type=Path, help="write the profile YAML here (default: print it)")
    f.add_argument("--json", action="store_true", help="print the residuals as JSON instead of a table")
    f.set_defaults(handler=run_fit)
    m = sub.add_parser("measure", help="time a diffusers transformer's denoise step and VAE decode on this device",
                       formatter_class=HelpFormatter)
    m.add_argument("--arch", default="tiny-flux",
                   help="architecture: tiny-flux / tiny-qwen-image / tiny-wan (random tiny configs, CPU CI) or"
                        " flux / qwen-image / wan (full-size configs with random weights; needs a GPU)")
    m.add_argument("--batch-sizes", default="1,2", help="comma-separated batch sizes")
    m.add_argument("--resolutions", default="64x64,128x128", help="comma-separated WIDTHxHEIGHT (video: WxHxFRAMES)")
    m.add_argument("--cfg", action="store_true", help="run CFG as two sequential forwards per step (as vLLM-Omni)")
    m.add_argument("--repeats", type=flag(bounds.COUNT), default=3, help="timed repeats per point (after one warm-up)")
    m.add_argument("--no-decode", action="store_true", help="skip timing the VAE decode")
    m.add_argument("--dtype", default="auto", help="auto (bf16 on GPU, fp32 on CPU), bf16, fp16 or fp32")
    m.add_argument("--compile", action="store_true", help="torch.compile the transformer (recorded in the stack)")
    m.add_argument("--seed", type=seed_arg, default=0, help="seed of the random weights and inputs (integer >= 0)")
    m.add_argument("--out", type=Path, required=True, help="measurement CSV to write")
    m.set_defaults(handler=run_measure)
    q = sub.add_parser("predict", help="predicted standalone latency and per-GPU memory of a request,"
                                       " on one GPU or over --sp GPUs (sequence parallelism) x --cfg-parallel",
                       formatter_class=HelpFormatter)
    q.add_argument("profile", metavar="PROFILE",
                   help="shipped profile name (envs/profiles/NAME.yaml) or a profile file")
    q.add_argument("--height", type=flag(bounds.SIDE_PX), required=True, help="image / frame height, px")
    q.add_argument("--width", type=flag(bounds.SIDE_PX), required=True, help="image / frame width, px")
    q.add_argument("--frames", type=flag(bounds.FRAMES), default=1, help="frames (1 for an image)")
    q.add_argument("--steps", type=flag(bounds.STEPS), required=True, help="denoise steps")
    q.add_argument("--sp", default="1", help="sequence-parallel GPUs: D (the profile's sp.method), ulyssesD, ringD"
                                            " or ulyssesUxringR (u2r2); a CFG-parallel degree may follow (u2c2, c2)")
    q.add_argument("--cfg-parallel", type=flag(bounds.CFG_PARALLEL), default=1,
                   help="CFG-parallel degree, 1 or 2 (vLLM-Omni cfg_parallel_size; the profile's cfg_parallel block, "
                        "derived): a --cfg request's two guidance branches on two groups of --sp GPUs")
    q.add_argument("--batch", type=flag(bounds.NUM_SEQS), default=1, help="same-shape requests run together")
    q.add_argument("--cfg", action="store_true", help="classifier-free guidance on (two DiT passes per step)")
    q.add_argument("--model", help="model of the profile (default: its only model)")
    q.add_argument("--json", action="store_true", help="print a JSON object (latency_s, peak_gb_per_gpu, ...)")
    q.set_defaults(handler=run_predict)
    d = sub.add_parser("derive", help="a profile for any DiT on any GPU from its diffusers configs and the GPU's "
                                      "datasheet, without measurements (a prior for online calibration)",
                       formatter_class=HelpFormatter)
    d.add_argument("--model", help="a diffusers model folder (model_index.json, transformer/config.json; text "
                                   "encoder and VAE configs when present) or a shipped architecture (--list-models)")
    gpu = d.add_mutually_exclusive_group()
    gpu.add_argument("--gpu", help="a GPU as NVML names it ('NVIDIA L40S') or a short name (--list-gpus)")
    gpu.add_argument("--gpu-spec", help="any other GPU by its numbers: tflops=DENSE_BF16,bandwidth_gbs=N,memory_gb=N"
                                        "[,link_gbs=N]")
    d.add_argument("--compile", action="store_true", help="the stack torch.compiles the DiT")
    d.add_argument("--cfg", choices=("sequential", "batched"), default="sequential",
                   help="how the stack runs classifier-free guidance (vLLM-Omni: two sequential forwards)")
    d.add_argument("--name", help="the profile's name (default: MODEL-GPU-derived)")
    d.add_argument("--out", type=Path, help="write the profile YAML here (default: print it)")
    d.add_argument("--list-models", action="store_true", help="list the shipped architectures and exit")
    d.add_argument("--list-gpus", action="store_true", help="list the GPUs --gpu knows, with sources, and exit")
    d.set_defaults(handler=run_derive)
    c = sub.add_parser("calibrate", help="a profile with the plugin's online calibration applied, written out as "
                                         "a profile file with its provenance (docs/calibration.md)",
                       formatter_class=HelpFormatter)
    c.add_argument("--log", type=Path, help="a vllm serve log: the newest 'rlsched: cost profile ... calibrated' "
                                            "line of each model (and the profile it names)")
    c.add_argument("--metrics", help="instead of --log: a replica's metrics endpoint (http://HOST:PORT/metrics) or "
                                     "a file saved from it: its rlsched_calibration_scale per term (needs --profile)")
    c.add_argument("--scales", help="instead of --log: "
                                    "MODEL=TIME,ATTENTION[,MEMORY[,FIXED[,ENCODE[,DECODE[,COMM]]]]];... "
                                    "(rlsched_calibration_scale)")
    c.add_argument("--profile", help="the profile the scales apply to (default: the one the log names)")
    c.add_argument("--out", type=Path, required=True, help="profile YAML to write")
    c.set_defaults(handler=run_calibrate)


def run_fit(args: argparse.Namespace) -> int:
    from rlsched.profiling.fit import fit_profile, render_profile

    if args.out:
        check_out_file(args.out, "--out")
    result = fit_profile(args.measurements)
    text = render_profile(result, _shown(args.measurements))
    if args.out:
        write_atomic(args.out, text, "--out")
    elif not args.json:
        print(text, end="")
    rows = [{"line": r.row.line, "model": r.row.model, "gpu": r.row.gpu, "stack": r.row.stack,
             "shape": r.row.shape, "batch": r.row.batch, "steps": r.row.steps, "cfg": r.row.cfg,
             "metric": r.row.metric, "measured": r.row.value, "predicted": round(r.predicted, 6),
             "error": round(r.error, 4), "use": r.row.use, "parallel": r.row.parallel} for r in result.residuals]
    if args.json:
        print_json(rows)
    else:
        _residual_table(rows, result.profile["name"])
    return 0


def _shown(path: Path) -> str:
    """The set as given, relative to the working directory when it is inside it (stable headers)."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _residual_table(rows: list[dict], name: str) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{name}: residuals (fit rows are fitted, check rows are held out)")
    for col in ("line", "use", "metric", "shape", "batch", "steps", "cfg", "parallel", "stack", "measured", "predicted",
                "error"):
        t.add_column(col, justify="right" if col in ("line", "batch", "steps", "measured", "predicted", "error")
                     else "left")
    for r in rows:
        t.add_row(str(r["line"]), r["use"], r["metric"], r["shape"], str(r["batch"]), str(r["steps"]),
                  str(r["cfg"]).lower(), r["parallel"], r["stack"], f"{r['measured']:.4g}", f"{r['predicted']:.4g}",
                  f"{r['error']:+.1%}")
    Console(file=sys.stderr, width=None if sys.stderr.isatty() else 200).print(t)


def run_derive(args: argparse.Namespace) -> int:
    from rlsched.profiling.architecture import list_models, read_architecture
    from rlsched.profiling.derive import Stack, derive_profile, load_efficiencies, render_derived
    from rlsched.profiling.gpus import GPUS, find_gpu, parse_gpu_spec

    if args.list_models:
        for name in list_models():
            arch = read_architecture(name)
            print(f"{name:18s} {arch.pipeline:26s} {arch.modality:5s} DiT {arch.transformer.params / 1e9:5.1f}B")
        return 0
    if args.list_gpus:
        print(f"{'gpu':11s} {'TFLOPS':>7s} {'GB/s':>6s} {'GB':>4s} {'link':>5s} {'generation':10s} {'attn':>4s}  "
              "source")
        for g in GPUS:  # attn: the generation's attention kernel ceiling, TFLOPS (gpus.ATTENTION_CEILINGS)
            attn = f"{g.attention_tflops:4g}" if g.attention_tflops < float("inf") else "   -"
            print(f"{g.name:11s} {g.tflops:7g} {g.bandwidth_gbs:6g} {g.memory_gb:4g} {g.link_gbs:5g} "
                  f"{g.generation:10s} {attn}  {g.source}")
        return 0
    if not args.model or not (args.gpu or args.gpu_spec):
        raise ConfigError("--model/--gpu", "derive needs --model and --gpu (or --gpu-spec); see --list-models, "
                                           "--list-gpus")
    if args.out:
        check_out_file(args.out, "--out")
    gpu = find_gpu(args.gpu) if args.gpu else parse_gpu_spec(args.gpu_spec)
    arch = read_architecture(args.model)
    profile = derive_profile(arch, gpu, load_efficiencies(), Stack(compile=args.compile, cfg=args.cfg), args.name)
    weights = next(iter(profile["models"].values()))["weights_gb"]
    if weights >= gpu.memory_gb:  # the file would load nowhere; say why here, not at the first predict or serve
        raise ConfigError("--gpu", f"{arch.name}'s {arch.params / 1e9:.1f}B parameters in BF16 with the prior's "
                                   f"memory overhead take {weights:.4g} GB, more than the {gpu.name}'s "
                                   f"{gpu.memory_gb:g} GB (a prior errs on the safe side; docs/derive.md)")
    text = render_derived(profile, f"rlsched profile derive --model {args.model} --gpu "
                                   f"{args.gpu or repr(args.gpu_spec)}{' --compile' if args.compile else ''}")
    if args.out:
        write_atomic(args.out, text, "--out")
        print(f"rlsched: wrote {args.out} ({profile['name']}: {arch.name} on {gpu.name}, derived)", file=sys.stderr)
    else:
        print(text, end="")
    return 0


def run_calibrate(args: argparse.Namespace) -> int:
    from rlsched.profiling.calibrated import TERMS, calibrated_profile, render

    if sum(x is not None for x in (args.log, args.metrics, args.scales)) != 1:
        raise ConfigError("--log/--metrics/--scales", "give one: the server log the plugin wrote, a replica's "
                                                      "metrics, or the scales")
    check_out_file(args.out, "--out")
    profile, scales, provenance = _calibration(args)
    data = calibrated_profile(profile, scales, provenance)
    scaled = ", ".join(f"{m} " + ", ".join(f"{t} x{v:g}" for t, v in zip(TERMS, s)) for m, s in scales.items())
    header = (f"{profile} with an online calibration applied ({scaled}).\n"
              "Written by `rlsched profile calibrate`; its provenance is the last line of sources.")
    write_atomic(args.out, render(data, header), "--out")
    print(f"rlsched: wrote {args.out} ({data['name']}: {scaled})", file=sys.stderr)
    return 0


def _calibration(args: argparse.Namespace) -> tuple[str, dict[str, tuple[float, ...]], str]:
    """(profile, per-model scales, provenance) from the one input given: --log, --metrics or --scales."""
    from rlsched.atomic import input_file
    from rlsched.profiling.calibrated import parse_scales, scales_from_log, scales_from_metrics
    from rlsched.sim.cost import load_profile

    if args.log is not None:
        logged, version, scales = scales_from_log(input_file(args.log, "--log").read_text(errors="replace"),
                                                  str(args.log))
        provenance = f"online calibration version {version} of {logged} (rlsched plugin), from {args.log}"
        return args.profile or _logged_profile_file(logged), scales, provenance
    if args.metrics is not None:
        if not args.profile:
            raise ConfigError("--profile", "--metrics needs the profile the replica serves (its metrics do not "
                                           "name it)")
        version, scales = scales_from_metrics(_metrics_text(args.metrics), load_profile(args.profile).models,
                                              f"--metrics {args.metrics}")
        provenance = f"online calibration version {version} of {args.profile} (rlsched plugin), from {args.metrics}"
        return args.profile, scales, provenance
    if not args.profile:
        raise ConfigError("--profile", "--scales needs the profile they apply to")
    scales = parse_scales(args.scales, "--scales")
    return args.profile, scales, f"online calibration of {args.profile}: scales {args.scales}"


def _metrics_text(source: str) -> str:
    """A metrics endpoint's text (``http://`` or ``https://``) or a file's saved from one."""
    import urllib.request

    from rlsched.atomic import input_file

    if not source.startswith(("http://", "https://")):
        return input_file(source, "--metrics").read_text(errors="replace")
    try:
        with urllib.request.urlopen(source, timeout=10) as resp:
            return resp.read().decode(errors="replace")
    except (OSError, ValueError) as exc:  # URLError is an OSError; a malformed URL a ValueError
        raise ConfigError(f"--metrics {source}", f"cannot read the metrics endpoint: {exc}") from None


def _logged_profile_file(logged: str) -> str:
    """The profile a log names, when it is a shipped name or a file; a server under ``profile: auto`` derived its
    profile at start-up and logged only its name, which names no file: say how to write one."""
    from rlsched.sim.cost import PROFILE_DIR

    path = Path(logged) if Path(logged).suffix else PROFILE_DIR / f"{logged}.yaml"
    if path.is_file():
        return logged
    raise ConfigError("--profile", f"the log's profile {logged!r} is no shipped profile or file (a server under "
                                   "profile: auto derives it at start-up): write it with `rlsched profile derive "
                                   "--model DIR --gpu G --out derived.yaml` and give --profile derived.yaml")


def run_predict(args: argparse.Namespace) -> int:
    from rlsched.profiling.predict import predict_request, resolve_profile

    dims = {k: getattr(args, k) for k in ("height", "width", "frames", "steps", "batch")}
    cost = resolve_profile(args.profile)
    p = predict_request(cost, sp=args.sp, model=args.model, cfg=args.cfg, cfg_parallel=args.cfg_parallel, **dims)
    if args.json:
        print_json(p.as_dict())
        return 0
    frames = f"x{p.frames}f" if p.frames > 1 else ""
    print(f"{p.model} on {p.profile} ({p.gpu}), {p.width}x{p.height}{frames}, {p.steps} steps"
          f"{', CFG' if p.cfg else ''}, batch {p.batch}, sp {p.layout.sp_only}"
          + (f", cfg-parallel {p.layout.cfg} (derived coefficients), {p.layout.gpus} GPUs" if p.layout.cfg > 1 else "")
          + ":")
    print(f"latency_s        {p.latency_s:.4g}")
    print(f"step_s           {p.step_s:.4g}")
    print(f"peak_gb_per_gpu  {p.peak_gb_per_gpu:.4g} of {p.gpu_memory_gb:g}"
          f"{'' if p.peak_gb_per_gpu <= p.gpu_memory_gb else '  (does not fit: OOM)'}")
    return 0


def run_measure(args: argparse.Namespace) -> int:
    from rlsched.profiling.measure import MeasureSpec, measure

    try:
        batches = [int(b) for b in args.batch_sizes.split(",")]
    except ValueError:
        raise ConfigError("--batch-sizes", f"not a list of integers: {args.batch_sizes!r}") from None
    if min(batches) < 1:
        raise ConfigError("--batch-sizes", f"each batch size must be >= 1, not {min(batches)}")
    check_out_file(args.out, "--out")
    spec = MeasureSpec(args.arch, batches, args.resolutions, args.cfg, args.repeats, not args.no_decode,
                       args.dtype, args.compile, args.seed)
    rows = measure(spec, args.out)
    print(f"wrote {len(rows)} rows to {args.out}", file=sys.stderr)
    return 0
