"""Measurement sets whose fitted rows are exactly a known profile's predictions (fit-recovery tests)."""

from __future__ import annotations

from pathlib import Path

from rlsched.profiling.fit import predict
from rlsched.profiling.measurements import read_measurements
from rlsched.sim.cost import CostModel

MEASURED_COLUMN = 10
"""The measured-seconds column of measurements.csv."""


def write_predicted_rows(src: Path, truth: CostModel, dest: Path) -> None:
    """``dest/measurements.csv``: ``src``'s ``use == fit`` rows with their measured value replaced
    by ``truth``'s prediction (other rows dropped)."""
    rows = read_measurements(src / "measurements.csv")
    lines = (src / "measurements.csv").read_text().splitlines()
    body = [lines[0]]
    for r, line in zip(rows, lines[1:]):
        if r.use == "fit":
            cells = line.split(",")
            cells[MEASURED_COLUMN] = f"{predict(truth, r):.9g}"
            body.append(",".join(cells))
    (dest / "measurements.csv").write_text("\n".join(body) + "\n")
