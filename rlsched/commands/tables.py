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
"""One name per column (the class ``batch`` and the mean batch size were both ``batch``). The three class
columns are the shipped classes'; a scenario of its own classes has one column per class (``columns``)."""
_CLASS_COLUMNS = slice(2, 5)
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


def columns(rows: Sequence[dict[str, Any]]) -> tuple[tuple[str, str, str], ...]:
    """``COLUMNS`` with one SLO-attainment column per class the rows report, titled by its name (a class
    named like another column is told apart as ``class NAME``)."""
    names = list(dict.fromkeys(c for row in rows for c in row.get("per_class", {})))
    if not names or names == ["realtime", "batch", "background"]:
        return COLUMNS
    taken = {head for head, _, _ in COLUMNS[:_CLASS_COLUMNS.start] + COLUMNS[_CLASS_COLUMNS.stop:]}
    own = tuple((f"class {c}" if c in taken else c, f"per_class.{c}.slo_attainment", "pct") for c in names)
    return COLUMNS[:_CLASS_COLUMNS.start] + own + COLUMNS[_CLASS_COLUMNS.stop:]


def metrics_table(rows: Sequence[dict[str, Any]], title: str) -> Table:
    table = Table(title=title, caption=LEGEND)
    table.add_column("policy")
    cols = columns(rows)
    for head, _, _ in cols:
        table.add_column(head, justify="right")
    for row in rows:
        table.add_row(row["policy"], *(fmt(get(row, key), kind) for _, key, kind in cols))
    return table


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    cols = columns(rows)
    heads = ["policy"] + [h for h, _, _ in cols]
    lines = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for row in rows:
        cells = [row["policy"]] + [fmt(get(row, key), kind) for _, key, kind in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\n{LEGEND[0].upper()}{LEGEND[1:]}."


def show(table: Table) -> None:
    Console(width=200).print(table)
