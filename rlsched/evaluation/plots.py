"""The report's plots: SLO attainment against load, latency CDFs, batch sizes (``write_report``)."""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

from rlsched.atomic import atomic_open
from rlsched.evaluation.runs import Grid
from rlsched.evaluation.stats import Cell, flat

SLO = "weighted_slo_attainment"
FEW_SEEDS = 5
"""Fewer seeds than this get min–max bars: the 95 % t-interval of two seeds is ±12.7 standard errors, 0–100 %."""

PLOTS_NEED = "matplotlib is not installed (pip install 'rlsched[rl]')"


def available() -> bool:
    """Whether the plots can be drawn: a serving-only install (no ``rl`` extra) gets the tables alone."""
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def draw(grid: Grid, cells: list[Cell], out: Path, shown: dict[str, str], keep: bool = False) -> dict[str, Any]:
    """slo_vs_load.png, latency_cdf.png and batch_sizes.png, every policy in its fixed style
    (``rlsched.plotstyle``), legends beside or below the panels, never over them, error bars as ``_bar`` says;
    returns the figures when ``keep`` (else they are closed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from rlsched.plotstyle import styles_for

    scenarios = sorted({c.scenario for c in cells})
    policies = list(dict.fromkeys(c.policy for c in cells))
    styles = styles_for(policies)
    cols = min(3, len(scenarios))
    rows = -(-len(scenarios) // cols)
    alone = len(scenarios) == 1  # one panel: the legend goes beside it; several: below them
    size = (8.4, 4.4) if alone else (4.6 * cols, 3.6 * rows + 1.0 + 0.2 * -(-len(policies) // 3))
    fig, axes = plt.subplots(rows, cols, figsize=size, squeeze=False, layout="constrained")
    for ax in axes.flat[len(scenarios):]:
        ax.axis("off")
    seeds = _seed_values(grid)
    curves: dict[str, list[float]] = {pol: [] for pol in policies}
    for ax, sc in zip(axes.flat, scenarios):
        for pol in policies:
            mine = sorted((c for c in cells if c.scenario == sc and c.policy == pol), key=lambda c: c.rate_scale)
            x = np.array([c.rate_scale for c in mine])
            y = np.array([c.mean[SLO] for c in mine])
            below, above = np.array([_bar(c, seeds.get((sc, pol, c.rate_scale), [])) for c in mine]).T
            curves[pol] += list(y)
            ax.errorbar(x, 100 * y, yerr=100 * np.stack([below, above]), capsize=3, label=shown[pol],
                        markersize=5, **styles[pol].line())
        ax.set(title=sc, xlabel="load (× nominal rate)", ylabel="class-weighted SLO attainment %", ylim=(0, 100))
        ax.grid(alpha=0.3)
    handles, names = axes[0][0].get_legend_handles_labels()
    if alone:
        fig.legend(handles, names, loc="outside right upper", fontsize=8, ncol=1)
    else:
        fig.legend(handles, names, loc="outside lower center", fontsize=8, ncol=min(3, len(names)))
    notes = [_bars_note(cells)]  # above the panels: constrained layout keeps a suptitle in the figure
    same = _coinciding(curves, shown)
    if same:
        notes.append("Lines that coincide (within 1.5 points at every scenario and load): " + "; ".join(same))
    width = int(size[0] * 14)  # characters of 7 pt text across the figure
    fig.suptitle("\n".join(textwrap.fill(n, width) for n in notes), fontsize=7, x=0.01, ha="left")
    _savefig(fig, out / "slo_vs_load.png", dpi=100)
    figures = {"slo_vs_load": fig, "latency_cdf": _cdf_plot(grid, scenarios, policies, shown, styles, out, plt, np)}
    fig, ax = plt.subplots(figsize=(6, 3.6))
    top = max((max(v) for v in grid.batch_sizes.values() if v), default=1)
    for pol in policies:
        sizes = grid.batch_sizes.get(pol)
        if sizes:
            share = np.bincount(np.asarray(sizes), minlength=top + 1)[1:] / len(sizes)
            ax.plot(np.arange(1, top + 1), share, drawstyle="steps-mid", label=shown[pol], **styles[pol].line())
    ax.set(title=f"batch sizes at load ×{grid.reference_load:g}, all scenarios", xlabel="batch size",
           ylabel="fraction of batches")
    ax.legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, out / "batch_sizes.png", dpi=110)
    figures["batch_sizes"] = fig
    if not keep:
        for f in figures.values():
            plt.close(f)
    return figures


def _seed_values(grid: Grid) -> dict[tuple[str, str, float], list[float]]:
    """(scenario, policy, load) → each seed's class-weighted SLO attainment (NaN dropped)."""
    values: dict[tuple[str, str, float], list[float]] = {}
    for row in grid.rows:
        value = flat(row, SLO)
        if not math.isnan(value):
            values.setdefault((row["scenario"], row["policy"], row["rate_scale"]), []).append(value)
    return values


def _bar(cell: Cell, seeds: list[float]) -> tuple[float, float]:
    """How far the bar reaches (below, above) the mean: the 95 % t-interval from ``FEW_SEEDS`` seeds on,
    the seeds' min–max below that (none where the seeds' values are not at hand)."""
    mean = cell.mean[SLO]
    if cell.n >= FEW_SEEDS:
        half = 0.0 if math.isnan(cell.ci95[SLO]) else cell.ci95[SLO]
        return half, half
    if not seeds or math.isnan(mean):
        return 0.0, 0.0
    return max(0.0, mean - min(seeds)), max(0.0, max(seeds) - mean)


def _bars_note(cells: list[Cell]) -> str:
    """What the error bars are, said under the panels."""
    ns = sorted({c.n for c in cells})
    seeds = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}–{ns[-1]}"
    if ns[0] >= FEW_SEEDS:
        return f"Bars: 95 % t-interval of the mean over {seeds} seeds."
    if ns[-1] < FEW_SEEDS:
        return (f"Bars: min–max over {seeds} seeds (under {FEW_SEEDS} seeds a 95 % t-interval is wider than "
                "the data: ±12.7 standard errors at two).")
    return f"Bars: 95 % t-interval of the mean where {FEW_SEEDS} seeds or more, else the seeds' min–max."


def _coinciding(curves: dict[str, list[float]], shown: dict[str, str], points: float = 1.5) -> list[str]:
    """Pairs of policies whose curves never differ by more than ``points``: a reader must be told
    one line hides another rather than see it vanish."""
    names = list(curves)
    return [f"{shown[a]} and {shown[b]}" for i, a in enumerate(names) for b in names[i + 1:]
            if curves[a] and len(curves[a]) == len(curves[b])
            and max(abs(x - y) for x, y in zip(curves[a], curves[b])) * 100 <= points]


def _savefig(fig: Any, path: Path, dpi: int) -> None:
    with atomic_open(path, "wb", "--out") as fh:
        fig.savefig(fh, format="png", dpi=dpi)


TAIL = 30.0
"""Latency / SLO where the CDF's axis ends: later requests are drawn at the edge of a marked tail."""
NEVER = 60.0
"""Where requests never served (failed out of memory, shed, unfinished) are drawn, in the marked tail."""


def class_names(grid: Grid) -> list[str]:
    """The classes the grid's rows report (the shipped three for the shipped scenarios), in their order,
    one panel each."""
    names: dict[str, None] = {}
    for row in grid.rows:
        names.update(dict.fromkeys(row.get("per_class", {})))
    return list(names) or ["realtime", "batch", "background"]


def _cdf_plot(grid: Grid, scenarios: list[str], policies: list[str], shown: dict[str, str], styles: dict[str, Any],
              out: Path, plt: Any, np: Any) -> Any:
    """Latency / SLO per class; requests later than ``TAIL`` x their SLO and those never served are kept in a
    marked tail (at ``TAIL`` and ``NEVER``), so every curve reaches 1 and the jump at the edge shows their
    share: the requests a reader most needs to see are the ones a cut axis hid."""
    classes = class_names(grid)
    fig, axes = plt.subplots(len(scenarios), len(classes), figsize=(4 * len(classes), 2.8 * len(scenarios)),
                             squeeze=False)
    for row, sc in zip(axes, scenarios):
        for ax, cls in zip(row, classes):
            for pol in policies:
                vals = np.sort(np.asarray(grid.latency_ratio.get((sc, pol, cls), []), dtype=float))
                if vals.size:
                    x = np.append(np.where(np.isinf(vals), NEVER, np.minimum(vals, TAIL)), 1.5 * NEVER)
                    y = np.append(np.arange(1, vals.size + 1) / vals.size, 1.0)
                    ax.step(x, y, where="post", label=shown[pol], markevery=max(1, vals.size // 6), markersize=4,
                            **styles[pol].line())
            ax.axvline(1.0, color="grey", linestyle=":")
            ax.axvspan(TAIL, 1.5 * NEVER, color="grey", alpha=0.15, lw=0)
            for at, text in ((TAIL, f"≥{TAIL:g}×"), (NEVER, "never\nserved")):
                ax.text(at * 1.04, 0.04, text, fontsize=6, color="dimgrey", va="bottom")
            ax.set(xscale="log", xlim=(0.3, 1.5 * NEVER), ylim=(0, 1), title=f"{sc} — {cls}",
                   xlabel=f"latency / SLO (shaded: past {TAIL:g}× or never served)", ylabel="CDF")
    if axes[0][0].get_legend_handles_labels()[0]:
        axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    _savefig(fig, out / "latency_cdf.png", dpi=100)
    return fig
