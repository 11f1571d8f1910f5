"""The report's slo_vs_load.png: a legend beside or below the panels, error bars no wider than the data."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from rlsched.evaluation import Cell, Grid  # noqa: E402
from rlsched.evaluation.plots import draw  # noqa: E402
from rlsched.evaluation.stats import ci95_half_width  # noqa: E402

SLO = "weighted_slo_attainment"
LONG = ["fifo", "edf", "static:agents/tuned/{scenario}.json", "pick:checkpoints/pick;static=agents/tuned/x.json",
        "seed-composite", "lookahead:agents/tuned/default.json"]


def _report(scenarios: list[str], policies: list[str], seeds: int) -> tuple[Grid, list[Cell]]:
    """Rows whose seeds spread by ±20 points around a falling curve, the curves of policies 2k and 2k+1 alike
    (a long note names them); cells aggregated from them."""
    noise = np.random.default_rng(0).uniform(-0.2, 0.2, (3, seeds))
    rows = [{"scenario": sc, "policy": pol, "rate_scale": rs, "seed": 1000 + s,
             SLO: float(np.clip(0.95 - 0.5 * rs - 0.03 * (i // 2) + noise[j, s], 0, 1))}
            for sc in scenarios for i, pol in enumerate(policies) for j, rs in enumerate((0.5, 1.0, 1.5))
            for s in range(seeds)]
    groups: dict[tuple[str, str, float], list[float]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["policy"], r["rate_scale"]), []).append(r[SLO])
    cells = [Cell(*key, seeds, {SLO: float(np.mean(v))}, {SLO: ci95_half_width(v)}) for key, v in groups.items()]
    return Grid(rows, {}, {pol: [1, 2] for pol in policies}, 1.0), cells


def _bars(ax) -> list[tuple[str, float, float, float]]:
    """(label, x, bottom, top) of every error bar in ``ax``."""
    out = []
    for container in ax.containers:
        line, _, (bars,) = container.lines
        out += [(container.get_label(), seg[0][0], min(seg[0][1], seg[1][1]), max(seg[0][1], seg[1][1]))
                for seg in bars.get_segments()]
    return out


@pytest.mark.parametrize("scenarios", [["default"], ["default", "bursty"]])
@pytest.mark.parametrize("policies", [["fifo", "edf"], LONG])
def test_the_legend_and_the_note_stay_off_the_panels(tmp_path, scenarios, policies) -> None:
    """Caught: with two scenarios the legend sat on the second panel's curves and tick labels."""
    grid, cells = _report(scenarios, policies, 2)
    fig = draw(grid, cells, tmp_path, {p: p for p in policies}, keep=True)["slo_vs_load"]
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    panels = [ax.get_tightbbox(renderer) for ax in fig.axes if ax.axison]  # data, ticks, labels and title
    assert len(panels) == len(scenarios)
    (legend,) = fig.legends
    for artist in (legend, fig._suptitle):
        box = artist.get_window_extent(renderer)
        assert not any(box.overlaps(p) for p in panels), artist
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1
    plt.close("all")


def test_two_seeds_get_their_range_not_a_t_interval_over_the_whole_axis(tmp_path) -> None:
    """Caught: with two seeds the 95 % t-interval (±12.7 standard errors) spanned 0–100 %."""
    grid, cells = _report(["default", "bursty"], ["fifo", "edf"], 2)
    fig = draw(grid, cells, tmp_path, {"fifo": "fifo", "edf": "edf"}, keep=True)["slo_vs_load"]
    for ax in (a for a in fig.axes if a.axison):
        bars = _bars(ax)
        assert len(bars) == 2 * 3
        for pol, x, low, high in bars:
            seeds = [100 * r[SLO] for r in grid.rows
                     if (r["scenario"], r["policy"], r["rate_scale"]) == (ax.get_title(), pol, x)]
            assert low == pytest.approx(min(seeds)) and high == pytest.approx(max(seeds))
    assert "min–max over 2 seeds" in fig._suptitle.get_text()
    plt.close("all")


def test_five_seeds_keep_the_t_interval(tmp_path) -> None:
    grid, cells = _report(["default"], ["fifo", "edf"], 5)
    fig = draw(grid, cells, tmp_path, {"fifo": "fifo", "edf": "edf"}, keep=True)["slo_vs_load"]
    half = {(c.policy, c.rate_scale): 100 * c.ci95[SLO] for c in cells}
    mean = {(c.policy, c.rate_scale): 100 * c.mean[SLO] for c in cells}
    bars = _bars(fig.axes[0])
    assert len(bars) == 2 * 3
    for pol, x, low, high in bars:
        assert (low, high) == pytest.approx((mean[pol, x] - half[pol, x], mean[pol, x] + half[pol, x]))
    assert "95 % t-interval of the mean over 5 seeds" in fig._suptitle.get_text()
    plt.close("all")


def test_the_latency_cdf_shows_the_requests_never_served_and_the_late_tail(tmp_path) -> None:
    """Requests never served (inf) and those past 30x their SLO sat beyond the axis: the curves stopped
    short of 1 with nothing to say why (issue 48). They are drawn in a marked tail now."""
    from rlsched.evaluation.plots import NEVER, TAIL

    grid, cells = _report(["default"], ["fifo"], 2)
    grid.latency_ratio[("default", "fifo", "batch")] = [0.5, 2.0, 100.0, np.inf, np.inf]
    fig = draw(grid, cells, tmp_path, {"fifo": "fifo"}, keep=True)["latency_cdf"]
    ax = fig.axes[1]  # default — batch
    (line,) = ax.get_lines()[:1]
    x, y = np.asarray(line.get_xdata()), np.asarray(line.get_ydata())
    low, high = ax.get_xlim()
    assert np.isfinite(x).all() and x.max() <= high and y[-1] == 1.0
    assert y[x < TAIL].max() == pytest.approx(0.4) and y[x < NEVER].max() == pytest.approx(0.6)  # 1 late, 2 never
    assert any("never" in t.get_text() for t in ax.texts)
    plt.close("all")
