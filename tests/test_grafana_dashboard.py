"""docs/grafana/rlsched.json: every PromQL expression names only series the plugin or the router exports,
and selects the dashboard's model."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

prom = pytest.importorskip("prometheus_client")

from rlsched.integrations.vllm_omni.metrics import PluginMetrics  # noqa: E402
from rlsched.integrations.vllm_omni.routing import RouterMetrics  # noqa: E402

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana" / "rlsched.json"
NAME = re.compile(r"\brlsched_[a-z_]+")
SERIES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}
"""The series of a metric family of each type, as Prometheus scrapes them (a counter only as ``_total``)."""


def exported() -> set[str]:
    """Every series name the plugin's and the router's metric sets register, on a fresh registry."""
    registry = prom.CollectorRegistry()
    PluginMetrics(registry, "m")
    RouterMetrics(registry, "m")
    return {family.name + suffix for family in registry.collect() for suffix in SERIES[family.type]}


def expressions(node: Any) -> Iterator[str]:
    """Every PromQL string in the dashboard: panel targets' ``expr`` and variables' ``query``/``definition``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("expr", "query", "definition") and isinstance(value, str):
                yield value
            else:
                yield from expressions(value)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item)


def unknown_names(expr: str, known: set[str]) -> set[str]:
    return set(NAME.findall(expr)) - known


def test_every_expression_names_an_exported_metric() -> None:
    known = exported()
    exprs = list(expressions(json.loads(DASHBOARD.read_text())))
    assert len(exprs) > 15
    assert {e: unknown_names(e, known) for e in exprs if unknown_names(e, known)} == {}
    used = {n for e in exprs for n in NAME.findall(e)}
    # what issue 38 asks the dashboard to show, beside the router's
    assert used >= {"rlsched_decisions_total", "rlsched_fallbacks_total", "rlsched_decision_latency_seconds_bucket",
                    "rlsched_queue_depth", "rlsched_requests_finished_total", "rlsched_batch_size_bucket",
                    "rlsched_batch_duration_ratio_bucket", "rlsched_router_decisions_total",
                    "rlsched_router_fallbacks_total"}


def test_every_panel_selects_the_dashboards_model() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    (var,) = [v for v in dashboard["templating"]["list"] if v["name"] == "model_name"]
    assert var["definition"] == "label_values(rlsched_decisions_total, model_name)"
    targets = [t for p in dashboard["panels"] for t in p.get("targets", [])]
    assert targets
    for target in targets:
        for name in NAME.findall(target["expr"]):  # each metric selector filters on the variable
            assert re.search(re.escape(name) + r'\{[^}]*model_name=~"\$model_name"', target["expr"]), target["expr"]


def test_a_misspelt_or_unsuffixed_name_is_caught() -> None:
    known = exported()
    assert unknown_names('rate(rlsched_decision_total{model_name=~"$model_name"}[5m])', known) == \
        {"rlsched_decision_total"}
    assert unknown_names("rate(rlsched_decisions[5m])", known) == {"rlsched_decisions"}  # a counter without _total
    assert unknown_names("histogram_quantile(0.5, rlsched_batch_duration_ratio)", known) == \
        {"rlsched_batch_duration_ratio"}  # a histogram is scraped as _bucket, _sum, _count
    assert not unknown_names("rlsched_router_central_queue + rlsched_memory_headroom_bytes", known)
