"""The fidelity table of docs/simulator.md: every measurement row of every shipped profile's set,
fitted (pinned) and held-out (check) points side by side with the model's error.

    python scripts/fidelity_table.py > /tmp/fidelity.md
"""

from __future__ import annotations

from rlsched.profiling.fit import fit_profile
from rlsched.sim.cost import PROFILE_DIR

UNIT = {"step_s": "s/step", "diffuse_s": "s", "total_s": "s", "decode_s": "s", "encode_s": "s", "attn_share": "",
        "peak_gb": "GB"}


def main() -> None:
    print("| profile | point (stack, GPU) | metric | fit/check | measured | model | error |")
    print("|---|---|---|---|---|---|---|")
    for folder in sorted(p for p in (PROFILE_DIR / "measurements").iterdir() if p.is_dir()):
        result = fit_profile(folder)
        for r in sorted(result.residuals, key=lambda r: (r.row.use != "fit", r.row.line)):
            row = r.row
            point = (f"{row.shape} BS{row.batch} {row.steps} steps{' CFG' if row.cfg else ''} "
                     f"({row.stack}, {row.gpu})")
            print(f"| {folder.name} | {point} | {row.metric} | {row.use} | {row.value:.4g} {UNIT[row.metric]} | "
                  f"{r.predicted:.4g} | {r.error:+.1%} |")


if __name__ == "__main__":
    main()
