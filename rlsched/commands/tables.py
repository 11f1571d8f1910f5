"""Rich tables for metric dicts."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("weighted SLO", "weighted_slo_attainment", "pct"),
    ("SLO", "slo_attainment", "pct"),
    ("realtime", "per_class.realtime.slo_attainment", "pct"),
    ("batch", "per_class.batch.slo_attainment", "pct"),
    ("background", "per_class.background.slo_attainment", "pct"),
    ("goodput r/s", "goodput_rps", "f4"),
    ("p99 lat s", "latency_p99_s", "f1"),
    ("late", "requests_late", "int"),
    ("shed", "requests_rejected", "int"),
    ("OOM", "requests_failed", "int"),
    ("GPU util", "gpu_compute_util", "pct"),
    ("mean batch", "batch_size_mean", "f2"),
)
"""One name per column (the class ``batch`` and the mean batch size were both ``batch``)."""
LEGEND = ("late: requests served past their SLO (a policy serves those it cannot save last, so they set the p99 "
          "latency); shed: refused or dropped unserved; OOM: failed in a batch that ran out of GPU memory")


def get(row: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        row = row[part]
    return row


def fmt(value: Any, kind: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return {"pct": f"{100 * value:.1f}%", "f4": f"{value:.4f}", "f1": f"{value:.1f}",
            "f2": f"{value:.2f}", "int": str(value)}[kind]


def metrics_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, caption=LEGEND)
    table.add_column("policy")
    for head, _, _ in COLUMNS:
        table.add_column(head, justify="right")
    for row in rows:
        table.add_row(row["policy"], *(fmt(get(row, key), kind) for _, key, kind in COLUMNS))
    return table


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    heads = ["policy"] + [h for h, _, _ in COLUMNS]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in rows:
        cells = [row["policy"]] + [fmt(get(row, key), kind) for _, key, kind in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{LEGEND[0].upper()}{LEGEND[1:]}."


def show(table: Table) -> None:
    Console(width=200).print(table)
