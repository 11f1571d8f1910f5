"""Display names in the eval report: one per policy spec, so no result drops out of the table."""

from pathlib import Path

from rlsched.evaluation import label, labels, run_grid, write_report

# the Makefile's RESULT_POLICIES: one spec per short name, shown as before
RESULT_POLICIES = ("fifo,sjf,edf,priority,drr,seed-memory,seed-priority,seed-composite,"
                   "static:agents/tuned/{scenario}.json,rl:checkpoints/default,"
                   "pick:checkpoints/pick;static=agents/tuned/{scenario}.json").split(",")


def test_unique_short_names_are_kept() -> None:
    assert labels(RESULT_POLICIES) == {p: label(p) for p in RESULT_POLICIES}
    assert labels(RESULT_POLICIES)["static:agents/tuned/{scenario}.json"] == "static (tuned)"
    assert labels(RESULT_POLICIES)["pick:checkpoints/pick;static=agents/tuned/{scenario}.json"] == "pick (pick)"


def test_specs_sharing_a_short_name_are_told_apart_by_what_differs() -> None:
    assert labels(["fifo", "static:agents/tuned/default.json", "static:agents/tuned/bursty.json"]) == {
        "fifo": "fifo", "static:agents/tuned/default.json": "static (tuned: default)",
        "static:agents/tuned/bursty.json": "static (tuned: bursty)"}
    picks = ["pick:checkpoints/pick;static=agents/tuned/default.json",
             "pick:checkpoints/pick;static=agents/tuned/bursty.json", "pick:checkpoints/pick", "rl", "rl:x/default"]
    names = labels(picks)
    assert len(set(names.values())) == len(picks)
    assert names["pick:checkpoints/pick;static=agents/tuned/bursty.json"] == \
        "pick (pick: static=agents/tuned/bursty.json)"


def test_two_static_specs_give_two_rows(tmp_path: Path) -> None:
    specs = ["fifo", "static:agents/tuned/default.json", "static:agents/tuned/bursty.json"]
    grid = run_grid(["default"], specs, [1000], [1.0], duration=600, progress=False)
    write_report(grid, tmp_path)
    md = (tmp_path / "results.md").read_text()
    table = md.split("### default", 1)[1].split("\n\n", 2)[1].splitlines()
    rows = [line.split(" | ")[0].lstrip("| ") for line in table[2:]]
    assert rows == ["fifo", "static (tuned: default)", "static (tuned: bursty)"]
    assert "static (tuned) " not in md
