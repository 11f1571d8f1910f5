"""The README's multi-replica tables from ``make results-replicas`` (``results/replicas/*/results.json``).

    python scripts/replicas_table.py            # prints markdown: targets, then one table per scenario

Per scenario: every router × replica policy at every load (class-weighted SLO attainment %,
mean over the evaluation seeds); for rlsched's tuned policy behind each router, the paired
difference to the best plain combination in that column (95 % interval, points). The targets
table: at loads where ``fifo@round-robin`` meets 40–80 %, the rlsched router with the rlsched
policy against it and against the best plain combination; the lowest ratio to any other
policy in any cell; and late binding (``@central``) minus early binding (``@rlsched``), paired.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SCENARIOS = ("qwen-image-8gpu", "qwen-image-hetero", "video-8gpu", "azure-8gpu")


def short(spec: str) -> str:
    """``static:agents/tuned/X.json@R`` -> ``static@R``."""
    policy, _, router = spec.rpartition("@")
    return f"{policy.split(':')[0]}@{router}" if policy.startswith("static:") else spec


def _pm(row: dict) -> str:
    return f"{100 * row['diff']:+.1f} ± {100 * row['diff_ci95']:.1f}"


def scenario_table(name: str, d: dict) -> list[str]:
    loads = sorted({c["rate_scale"] for c in d["cells"]})
    means = {(c["policy"], c["rate_scale"]): c["mean"]["weighted_slo_attainment"] for c in d["cells"]}
    paired = {(p, r["rate_scale"]): r for p, rows in d.get("paired", {}).items() for r in rows}
    out = [f"**{name}**", "", "| router × policy | " + " | ".join(f"×{x:g}" for x in loads) + " |",
           "|---|" + "---|" * len(loads)]
    for spec in dict.fromkeys(c["policy"] for c in d["cells"]):
        cells = []
        for x in loads:
            text = f"{100 * means[spec, x]:.1f}"
            if (spec, x) in paired:
                text += f" ({_pm(paired[spec, x])})"
            cells.append(text)
        out.append(f"| `{short(spec)}` | " + " | ".join(cells) + " |")
    best = {x: short(paired[next(iter(d["paired"])), x]["best"]) for x in loads}
    out += ["", "Best plain combination per load: " + ", ".join(f"×{x:g} `{b}`" for x, b in best.items()), ""]
    return out


def targets(ds: dict[str, dict]) -> list[str]:
    out = ["| scenario | load | `static@rlsched` | × `fifo@round-robin` | × best plain (paired, points) | "
           "late − early binding (points) |", "|---|---|---|---|---|---|"]
    for name, d in ds.items():
        head = d["headline"]
        target = head["target"]
        paired = {r["rate_scale"]: r for r in d["paired"][target]}
        central = target[:-len("rlsched")] + "central"
        late = {r["rate_scale"]: r for r in d.get("late_vs_early", {}).get(central, [])}
        for row in head["per_scenario"][name]:
            x = row["rate_scale"]
            p = paired[x]
            lv = f"{_pm(late[x])}" if x in late else "-"
            out.append(f"| {name} | ×{x:g} | {100 * row['target']:.1f} | {row['vs_fifo']:.2f} | "
                       f"{p['ratio']:.3f} vs `{short(p['best'])}` ({_pm(p)}) | {lv} |")
    out += ["", "Lowest ratio of `static@rlsched` to any other policy in any cell (×0.5–×1.5): " + "; ".join(
        f"{n} ×{d['worst_vs_any']['ratio']:.3f} (×{d['worst_vs_any']['rate_scale']:g}, vs "
        f"`{short(d['worst_vs_any']['best'])}`)" for n, d in ds.items()), ""]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("results/replicas"))
    args = p.parse_args()
    ds = {n: json.loads((args.root / n / "results.json").read_text()) for n in SCENARIOS
          if (args.root / n / "results.json").exists()}
    lines = targets(ds)
    for name, d in ds.items():
        lines += scenario_table(name, d)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
