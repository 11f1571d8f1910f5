"""The multi-GPU residual table of docs/multigpu.md: every sequence-parallel and replica row of every
shipped measurement set, with the degree-1 rows of the same series, next to what the
re-fitted profile predicts for it.

    python -m rlsched.profiling.sp_table
"""

from __future__ import annotations

from rlsched.profiling.fit import Residual, fit_profile
from rlsched.sim.cost import PROFILE_DIR

UNIT = {"step_s": "s/step", "diffuse_s": "s", "total_s": "s", "peak_gb": "GB"}


def _series(r: Residual) -> tuple:
    row = r.row
    return row.model, row.gpu, row.height, row.width, row.frames, row.batch, row.steps, row.cfg, row.metric


def multi_gpu_residuals() -> list[tuple[str, Residual]]:
    """(set name, residual) of every multi-GPU row and of the degree-1 rows of its series, in
    set order then CSV line order."""
    out: list[tuple[str, Residual]] = []
    for folder in sorted(p for p in (PROFILE_DIR / "measurements").iterdir() if p.is_dir()):
        residuals = fit_profile(folder).residuals
        series = {_series(r) for r in residuals if r.row.layout.degree > 1 or r.row.replicas > 1}
        out += [(folder.name, r) for r in residuals if _series(r) in series]
    return out


def markdown() -> str:
    lines = ["| profile | row (line: point, stack, GPU) | parallel | fit/check | measured | predicted | residual |",
             "|---|---|---|---|---|---|---|"]
    for name, r in multi_gpu_residuals():
        row = r.row
        point = (f"{row.line}: {row.shape} BS{row.batch} {row.steps} steps{' CFG' if row.cfg else ''} "
                 f"({row.stack}, {row.gpu})")
        lines.append(f"| {name} | {point} | {row.parallel} | {row.use} | {row.value:.4g} {UNIT.get(row.metric, '')} "
                     f"| {r.predicted:.4g} | {r.error:+.1%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
