"""The multi-replica tables (docs/replicas.md) from ``make results-replicas`` (``results/replicas/*/results.json``).

    python scripts/replicas_table.py            # prints markdown: targets, tables, plan re-checks
    python scripts/replicas_table.py --doc docs/replicas.md   # fills the page's <!-- replicas-* --> blocks

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

from rlsched.learned.router import DEFAULT_CHECKPOINT
from rlsched.policies.base import parse_spec
from rlsched.routing.spec import StageSpec

SCENARIOS = ("qwen-image-8gpu", "qwen-image-hetero", "video-8gpu", "azure-8gpu")


def short(spec: str) -> str:
    """``static:agents/tuned/X.json@R`` -> ``static@R``."""
    stage = StageSpec.parse(spec)
    tuned = stage.routed and stage.policy_kind == "tuned" and bool(stage.policy_spec.arg)
    return f"{stage.policy_spec.name}@{stage.router}" if tuned else spec


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
    loads = sorted({c["rate_scale"] for d in ds.values() for c in d["cells"]})
    out += ["", f"Lowest ratio of `static@rlsched` to any other policy in any cell (×{loads[0]:g}–×{loads[-1]:g}): "
            + "; ".join(
        f"{n} ×{d['worst_vs_any']['ratio']:.3f} (×{d['worst_vs_any']['rate_scale']:g}, vs "
        f"`{short(d['worst_vs_any']['best'])}`)" for n, d in ds.items()) + ".", "",
        "Lowest ratio to any early-binding policy (every router but `@central`): " + "; ".join(
        f"{n} ×{d['worst_vs_early']['ratio']:.3f} (×{d['worst_vs_early']['rate_scale']:g}, vs "
        f"`{short(d['worst_vs_early']['best'])}`)" for n, d in ds.items()) + ".", ""]
    return out


def deployed_table(ds: dict[str, dict]) -> list[str]:
    """What a user deploys (every router on its default view: the ledger plus the replicas' published
    states) against the replicas' true state (a ceiling) and the ledger alone, every load; the deployed best
    (``@rlsched`` or ``@central``) against ``fifo@round-robin`` in SLO violations (100 − attainment) and
    against every other deployable spec."""
    out = ["| scenario | load | `fifo@round-robin` | `static@rlsched` | deployed − true state (ceiling), paired | "
           "deployed − ledger alone, paired | `static@central` | deployed best | violations vs "
           "`fifo@round-robin` | lowest ratio to any other spec |", "|---|---|---|---|---|---|---|---|---|---|"]
    missed = []
    for name, d in ds.items():
        means = {(c["policy"], c["rate_scale"]): c["mean"]["weighted_slo_attainment"] for c in d["cells"]}
        specs = list(dict.fromkeys(c["policy"] for c in d["cells"]))
        rls = next(p for p in specs if p.startswith("static:") and p.endswith("@rlsched"))
        central = rls[:-len("rlsched")] + "central"
        views = {spec.rpartition("view=")[2]: {r["rate_scale"]: r for r in rows}
                 for spec, rows in d.get("views", {}).items()}
        for x in sorted({c["rate_scale"] for c in d["cells"]}):
            fifo, mine, late = means["fifo@round-robin", x], means[rls, x], means.get((central, x), float("nan"))
            best, best_spec = max((mine, rls), (late, central))
            others = [(means[p, x], p) for p in specs if p not in (rls, central) and "view=replica" not in p]
            rival, rival_spec = max(others)
            ratio = best / rival if rival else float("nan")
            cut = 1 - (1 - best) / (1 - fifo) if fifo < 1 else float("nan")
            ceil = views.get("replica", {}).get(x)
            ledger = views.get("ledger", {}).get(x)
            mark = "**" if ratio < 0.98 else ""
            out.append(f"| {name} | ×{x:g} | {100 * fifo:.1f} | {100 * mine:.1f} | "
                       f"{_pm(ceil) if ceil else '-'} | {_pm(ledger) if ledger else '-'} | {100 * late:.1f} | "
                       f"{100 * best:.1f} `@{best_spec.rpartition('@')[2]}` | {-100 * cut:+.1f} % | "
                       f"{mark}×{ratio:.3f}{mark} vs `{short(rival_spec)}` |")
            if (x <= 1.25 and cut < 0.9) or ratio < 0.98:
                missed.append(f"{name} ×{x:g}")
    out += ["", "Cells missing a target (≥ 90 % fewer violations than `fifo@round-robin` at ×0.5–×1.25; never "
            "below ×0.98 any other deployable spec): " + (", ".join(missed) or "none") + "."]
    return out + [""]


def learned_table(ds: dict[str, dict]) -> list[str]:
    """The learned router against rlsched's router behind the same replica policy, every load."""
    rows = [(name, spec, r) for name, d in ds.items() for spec, rs in d.get("router_vs_rlsched", {}).items()
            for r in rs]
    if not rows:
        return []
    loads = sorted({r["rate_scale"] for _, _, r in rows})
    out = ["| scenario | " + " | ".join(f"×{x:g}" for x in loads) + " |", "|---|" + "---|" * len(loads)]
    # which checkpoint each spec serves: the shipped router's, or a scenario's own (video-8gpu: router-video)
    checkpoint = {s: parse_spec(StageSpec.parse(s).router).arg or DEFAULT_CHECKPOINT for _, s, _ in rows}
    for name, spec in dict.fromkeys((n, s) for n, s, _ in rows):
        by = {r["rate_scale"]: r for n, s, r in rows if (n, s) == (name, spec)}
        label = name if checkpoint[spec] == DEFAULT_CHECKPOINT else f"{name} (`{Path(checkpoint[spec]).name}`)"
        out.append(f"| {label} | " + " | ".join(
            f"{_pm(by[x])} (×{by[x]['ratio']:.3f})" if x in by else "-" for x in loads) + " |")
    for ckpt in dict.fromkeys(checkpoint.values()):  # one summary per checkpoint, not their cells pooled
        mine = [(n, r) for n, s, r in rows if checkpoint[s] == ckpt]
        # the cells where fifo@round-robin meets 40-80 % (each scenario's headline band)
        band = [(n, r) for n, r in mine
                if r["rate_scale"] in {b["rate_scale"] for b in ds[n]["headline"]["per_scenario"].get(n, [])}]
        if band:
            wins = [n for n, r in band if r["diff"] - r["diff_ci95"] > 0]
            above = sorted(set(wins))
            mean = sum(r["ratio"] for _, r in band) / len(band)
            low = min((r for _, r in mine), key=lambda r: r["ratio"])
            out += ["", f"`{ckpt}`: over the {len(band)} cells where `fifo@round-robin` meets 40–80 %: mean ratio "
                    f"×{mean:.3f} (target ×1.05); the paired interval above zero in {len(wins)} "
                    f"of them, on {len(above)} scenarios ({', '.join(above) or 'none'}); lowest ratio in any cell "
                    f"×{low['ratio']:.3f}."]
    return out + [""]


def plan_table(root: Path) -> list[str]:
    """plan's choice on training seeds against the best layout on evaluation seeds."""
    out = ["| scenario | layout | training seeds (mean %) | evaluation seeds (mean %) |", "|---|---|---|---|"]
    found = False
    for path in sorted(root.glob("plan-*/plan.json")):
        found = True
        r = json.loads(path.read_text())
        for row in r["rows"]:
            mark = " **(recommended)**" if row["layout"] == r["recommended"] else ""
            mark = (" (CFG-parallel: derived)" if row.get("cfg_parallel", 1) > 1 else "") + mark
            out.append(f"| {r['scenario']} | {row['layout']}{mark} | {100 * row['mean']:.1f} | "
                       f"{100 * row.get('check_mean', float('nan')):.1f} |")
        for row in r.get("router_rows", []):
            mark = " **(recommended)**" if row["router"] == r["recommended_router"] else ""
            out.append(f"| {r['scenario']} | {r['recommended']}, router `{row['router']}`{mark} | "
                       f"{100 * row['mean']:.1f} | {100 * row.get('check_mean', float('nan')):.1f} |")
        if "hindsight_best" in r:
            out.append(f"| | best in hindsight: {r['hindsight_best']}; the recommendation loses "
                       f"{r['recommended_loses_points']:.2f} points, the worst layout "
                       f"{r['check_worst_loses_points']:.2f} | | |")
    return out + [""] if found else []


def fill(readme: Path, blocks: dict[str, list[str]], prefix: str = "replicas") -> None:
    """Replace each ``<!-- PREFIX-NAME -->`` ... ``<!-- /PREFIX-NAME -->`` block (or a lone
    opening marker) with ``blocks[NAME]``."""
    text = readme.read_text()
    for name, lines in blocks.items():
        start, end = f"<!-- {prefix}-{name} -->", f"<!-- /{prefix}-{name} -->"
        i = text.index(start) + len(start)
        j = text.index(end) if end in text else i
        text = text[:i] + "\n" + "\n".join(lines).rstrip() + "\n" + text[j:] if end in text else \
            text[:i] + "\n" + "\n".join(lines).rstrip() + "\n" + end + text[i:]
    readme.write_text(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=Path("results/replicas"))
    p.add_argument("--doc", "--readme", dest="doc", type=Path,
                   help="fill this file's <!-- replicas-* --> blocks instead of printing")
    args = p.parse_args()
    ds = {n: json.loads((args.root / n / "results.json").read_text()) for n in SCENARIOS
          if (args.root / n / "results.json").exists()}
    tables: list[str] = []
    for name, d in ds.items():
        tables += scenario_table(name, d)
    blocks = {"deployed": deployed_table(ds), "targets": targets(ds), "tables": tables, "plan": plan_table(args.root)}
    learned = learned_table(ds)
    if learned:
        blocks["learned"] = learned
    if args.doc:
        fill(args.doc, blocks)
    else:
        print("\n".join(line for lines in blocks.values() for line in lines))


if __name__ == "__main__":
    main()
