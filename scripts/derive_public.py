"""How good a derived profile is on GPU × model pairs rlsched never fitted: ``rlsched profile derive`` scored on
public measurements (issue 46).

Every row of ``tests/data/derive_public/measurements.csv`` is a number quoted from a public page (its source
column says which) for a GPU × model pair that no shipped measurement set holds. Each is predicted by the
profile derived at the shipped efficiencies (``envs/architectures/efficiencies.yaml``, fitted on the shipped
sets only). Rows whose stack runs part of a request off the GPU (the text encoder on the CPU, models paged in
per request) are scored apart: a derived profile does not model them. Writes the table into docs/derive.md
between its markers (``--check``: fail when the page differs, as the test does).

    python scripts/derive_public.py            # rewrite the table in docs/derive.md
    python scripts/derive_public.py --check    # compare only
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from derive_score import PAGE, render_page, write_or_check  # the sibling script (scripts/ is on the path when it runs)

from rlsched.profiling.architecture import read_architecture
from rlsched.profiling.derive import (
    LATENCY_METRICS,
    Point,
    Scored,
    derived_cost,
    load_efficiencies,
    measured_points,
    runs_off_gpu,
    score_points,
    shipped_points,
    summary,
)

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_SET = ROOT / "tests" / "data" / "derive_public" / "measurements.csv"
BEGIN, END = "<!-- derive-public:begin -->", "<!-- derive-public:end -->"


def pair_medians(scored: list[Scored]) -> dict[tuple[str, str], float]:
    """Median latency ratio (derived / measured) of each GPU × model pair."""
    by_pair: dict[tuple[str, str], list[float]] = {}
    for s in scored:
        if s.point.row.metric in LATENCY_METRICS:
            by_pair.setdefault(s.point.pair, []).append(s.ratio)
    return {pair: statistics.median(ratios) for pair, ratios in sorted(by_pair.items())}


def headline(scored: list[Scored]) -> list[Scored]:
    """The rows a derived profile models: every part of the request on the GPU."""
    return [s for s in scored if not runs_off_gpu(s.point)]


def flop_share(point: Point) -> float | None:
    """The DiT's FLOPs over a request's denoise steps (image tokens; CFG passes counted) per measured second, as
    a share of the GPU's datasheet BF16 peak: how much of the datasheet the measured stack reached."""
    import math

    from rlsched.profiling.gpus import find_gpu
    from rlsched.sim.request import Request

    r = point.row
    if r.metric not in ("total_s", "diffuse_s"):
        return None
    arch, gpu = read_architecture(r.model), find_gpu(r.gpu)
    cost = derived_cost(arch, replace(gpu, memory_gb=1e6), load_efficiencies(), point.stack)
    rec = cost.record(Request(0, 0.0, r.model, arch.modality, r.height, r.width, r.frames, r.steps, r.cfg, "batch",
                              math.inf))
    per_step = arch.linear_gflop_per_token * 1e9 * rec.tokens * 1e6 + arch.attn_flop_per_token2 * rec.quad * 1e9
    return r.steps * per_step / r.value / (gpu.tflops * 1e12)


def _summary_line(name: str, scored: list[Scored]) -> str:
    s, pairs = summary(scored), pair_medians(scored)
    outside = sum(max(x.ratio, 1 / x.ratio) > 1.6 for x in scored if x.point.row.metric in LATENCY_METRICS)
    per_pair = statistics.median(abs(r - 1) for r in pairs.values())
    return (f"- {name}: {s['latency_points']} latency points of {len(pairs)} pairs, median |error| "
            f"**{s['median_abs_error']:.1%}** (median over pairs of each pair's median: {per_pair:.1%}), worst "
            f"×{s['worst_ratio']:.2f}, outside ×1.6: {outside}; memory: {s['memory_points']} points, worst "
            f"under-estimate {s['worst_memory_under']:.1%}")


def fitted_video_shares(shipped: list[Point]) -> str:
    """The FLOP share of the shipped video rows the efficiencies are fitted on (end-to-end latencies)."""
    shares = [(p.pair, flop_share(p)) for p in shipped if p.row.frames > 1 and p.row.metric == "total_s"]
    return ", ".join(f"{m} × {g} {s:.0%}" for (m, g), s in sorted(shares) if s is not None)


def table(scored: list[Scored], shipped: list[Point]) -> str:
    fitted = {p.pair for p in shipped}
    on = headline(scored)
    off = [s for s in scored if runs_off_gpu(s.point)]
    lines = [f"Derived at the shipped efficiencies (fitted on the shipped sets only; pairs fitted there: "
             f"{', '.join(f'{m} × {g}' for m, g in sorted(fitted))}), scored on "
             f"`tests/data/derive_public/measurements.csv` (`python scripts/derive_public.py`):", "",
             _summary_line("every part of the request on the GPU (the score)", on),
             _summary_line("of which images", [s for s in on if s.point.row.frames == 1]),
             _summary_line("of which video", [s for s in on if s.point.row.frames > 1]),
             _summary_line("text encoder on the CPU or models paged in per request (not modelled; apart)", off),
             _summary_line("all rows", scored), "",
             "FLOP share: the DiT's FLOPs over the request's steps (image tokens, CFG passes counted) per measured "
             "second, as a share of the GPU's datasheet dense BF16 peak. The shipped video rows the efficiencies "
             f"are fitted on reach: {fitted_video_shares(shipped)}.", "",
             "| pair | on GPU | metric | shape | steps | cfg | stack | measured | derived | ratio | FLOP share "
             "| source |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for x in sorted(scored, key=lambda x: (runs_off_gpu(x.point), x.point.pair, x.point.row.metric, x.point.row.line)):
        r, share = x.point.row, flop_share(x.point)
        lines.append(f"| {r.model} × {r.gpu} | {'no' if runs_off_gpu(x.point) else 'yes'} | {r.metric} | "
                     f"{r.shape} | {r.steps} | {'yes' if r.cfg else 'no'} | {r.stack} | {r.value:.4g} | "
                     f"{x.predicted:.4g} | ×{x.ratio:.2f} | {'' if share is None else f'{share:.0%}'} | "
                     f"{r.source.split()[0]} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when docs/derive.md's table is not what this run gives")
    args = ap.parse_args(argv)
    shipped = shipped_points()
    fitted = {p.pair for p in shipped}
    points = measured_points(PUBLIC_SET)
    overlap = sorted({p.pair for p in points} & fitted)
    if overlap:
        print(f"{PUBLIC_SET}: pairs the efficiencies are fitted on: {overlap}", file=sys.stderr)
        return 1
    text = PAGE.read_text()
    if BEGIN not in text:
        print(f"{PAGE}: no {BEGIN} marker", file=sys.stderr)
        return 1
    page = render_page(text, table(score_points(points), shipped), BEGIN, END)
    return write_or_check(page, args.check, "public-score table", "derive_public.py")


if __name__ == "__main__":
    sys.exit(main())
