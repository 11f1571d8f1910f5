"""The fidelity table of docs/simulator.md: every measurement row of every shipped profile's set,
fitted (pinned) and held-out (check) points side by side with the model's error
(tests/sim/test_fidelity_table.py checks the page holds exactly this output).

    python scripts/fidelity_table.py > /tmp/fidelity.md
"""

from __future__ import annotations

from rlsched.profiling.fit import fit_profile
from rlsched.profiling.measurements import Measurement
from rlsched.sim.cost import PROFILE_DIR

UNIT = {"step_s": "s/step", "diffuse_s": "s", "total_s": "s", "decode_s": "s", "encode_s": "s", "attn_share": "",
        "peak_gb": "GB"}


def _parallel(row: Measurement) -> str:
    """The row's GPUs, where more than one: Ulysses x ring sequence parallelism, replicas."""
    parts = [f"Ulysses {row.ulysses}"] * (row.ulysses > 1) + [f"ring {row.ring}"] * (row.ring > 1)
    parts += [f"{row.replicas} replicas"] * (row.replicas > 1)
    return f", {' x '.join(parts)}" if parts else ""


def markdown() -> str:
    lines = ["| profile | point (stack, GPU, parallelism) | metric | fit/check | measured | model | error |",
             "|---|---|---|---|---|---|---|"]
    for folder in sorted(p for p in (PROFILE_DIR / "measurements").iterdir() if p.is_dir()):
        result = fit_profile(folder)
        for r in sorted(result.residuals, key=lambda r: (r.row.use != "fit", r.row.line)):
            row = r.row
            point = (f"{row.shape} BS{row.batch} {row.steps} steps{' CFG' if row.cfg else ''} "
                     f"({row.stack}, {row.gpu}{_parallel(row)})")
            lines.append(f"| {folder.name} | {point} | {row.metric} | {row.use} | {row.value:.4g} "
                         f"{UNIT[row.metric]} | {r.predicted:.4g} | {r.error:+.1%} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
