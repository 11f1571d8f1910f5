"""Plots a person can read: one fixed style per policy name, every series distinct."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from rlsched.plotstyle import FIFO, TABLE, style_of, styles_for  # noqa: E402

TWELVE = ["fifo", "sjf", "edf", "priority", "drr", "seed-memory", "seed-priority", "seed-composite",
          "static:agents/tuned/{scenario}.json", "rl:checkpoints/default",
          "pick:checkpoints/pick;static=agents/tuned/{scenario}.json", "lookahead:agents/tuned/default.json"]


def test_styles_follow_the_name_not_the_order() -> None:
    assert styles_for(TWELVE) == styles_for(list(reversed(TWELVE)))
    assert style_of("fifo@round-robin") == FIFO and style_of("static:agents/tuned/bursty.json") == TABLE["static"]
    assert FIFO.linestyle == "--" and style_of("fifo").color != style_of("pick").color


def test_two_specs_of_one_name_and_unknown_names_stay_distinct() -> None:
    specs = ["static:agents/tuned/default.json", "static:agents/tuned/bursty.json", "my-policy", "other:x"]
    styles = styles_for(specs * 1 + [f"x{i}" for i in range(60)] + [f"static:{i}" for i in range(70)])
    assert len({s.key for s in styles.values()}) == len(styles)
    assert styles[specs[0]].color == styles[specs[1]].color  # same family colour, another marker/line


def test_the_results_plot_for_twelve_policies_has_distinct_series(tmp_path) -> None:
    """Caught: matplotlib's default 10-colour cycle drew fifo and pick in the same blue."""
    from rlsched.evaluation import Cell, Grid
    from rlsched.evaluation.plots import draw

    cells = [Cell(sc, pol, rs, 3, {"weighted_slo_attainment": 0.9 - 0.1 * rs - 0.01 * i},
                  {"weighted_slo_attainment": 0.01})
             for sc in ("default", "bursty") for i, pol in enumerate(TWELVE) for rs in (0.5, 1.0, 1.5)]
    grid = Grid([], {}, {pol: [1, 2, 2] for pol in TWELVE}, 1.0)
    figures = draw(grid, cells, tmp_path, {p: p for p in TWELVE})
    for name, fig in figures.items():
        for ax in fig.axes:
            lines = [ln for ln in ax.get_lines() if ln.get_label() in TWELVE]
            if not lines:
                continue
            keys = [(ln.get_color(), ln.get_marker(), ln.get_linestyle()) for ln in lines]
            assert len(set(keys)) == len(keys), (name, keys)
        assert (tmp_path / f"{name}.png").is_file()
    fifo = [ln for fig in figures.values() for ax in fig.axes for ln in ax.get_lines() if ln.get_label() == "fifo"]
    assert fifo and {(ln.get_color(), ln.get_linestyle()) for ln in fifo} == {(FIFO.color, "--")}


def test_a_router_spec_keeps_its_policy_colour_and_takes_the_routers_line() -> None:
    from rlsched.plotstyle import ROUTERS, TABLE, style_of, styles_for

    static = "static:agents/tuned/default.json"
    specs = [f"{p}@{r}" for p in ("fifo", "edf", static) for r in ROUTERS]
    for spec in specs:
        policy, _, router = spec.rpartition("@")
        style = style_of(spec)
        assert style.color == TABLE[policy.split(":")[0]].color
        assert (style.marker, style.linestyle) == ROUTERS[router]
    assert style_of(f"{static}@rlsched").linewidth > style_of(f"{static}@round-robin").linewidth
    assert len({s.key for s in styles_for(specs).values()}) == len(specs)
    assert style_of("fifo") == TABLE["fifo"]  # one GPU: unchanged
