"""``rlsched bench plugin``: one ``schedule()`` call in vLLM-Omni's schedulers, plugin vs native.

Every shipped policy at 16, 256, 1,024 and 4,096 waiting requests, request mode
(``RLRequestScheduler`` vs ``RequestScheduler``) and step mode (``RLStepScheduler``
vs ``StepScheduler``), the default ``PluginConfig`` (5 ms decision budget, 100 ms
deadline) with online calibration on, as users deploy it, on a fake GPU whose batch
durations drift so that new calibration versions keep coming (``overhead.DriftingGpu``;
``--calibrate off``: the shipped profile): median and p99 µs per call, the FIFO fallbacks
counted (and per 1,000 calls) and the calibration versions made during the timed calls, vLLM-Omni's
own scheduler in the same run, and what else set the slowest calls: the machine (a probe
timed beside every call) and the garbage collector (the calls a collection ran in, and
the p99 of the others); and the work of a call, counted (function calls a ``schedule()``,
which no machine's speed changes). The set-up is ``overhead``'s docstring.

This module imports no vLLM (``rlsched bench`` imports every bench module); the
measurement (``overhead``) is imported when the bench runs and needs the plugin tier.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from rlsched import bounds
from rlsched.argtypes import int_list
from rlsched.bench import bench, percentiles_us
from rlsched.errors import ConfigError
from rlsched.integrations.vllm_omni.config import DECISION_THREADS, PluginConfig

POLICIES = ("fifo", "edf", "sjf", "seed-composite", "static:agents/tuned/default.json", "rl:checkpoints/default",
            "pick:checkpoints/pick;static=agents/tuned/default.json")
"""Every shipped policy (``make run``'s list plus ``sjf``)."""
QUEUES = (16, 256, 1024, 4096)
MODES = ("request", "step")
NATIVE = "vllm-omni"
"""The row label of vLLM-Omni's own scheduler."""
CALLS = 400
"""Timed calls per (mode, policy, queue): ~3 min for the whole default run on 2 cores. 400, not
80: the p99 of 80 calls is the largest call blended with the runner-up, so one context switch
or garbage collection decided it; of 400 it is the 4th largest."""
WARMUP = 3
"""Untimed calls before the timed ones in every cell."""

NEEDS_VLLM = ("rlsched bench plugin needs the vLLM tier (vllm 0.30.0 + vllm-omni 0.30.0), which this Python "
              "lacks ({missing}). Build it with `make .venv-vllm/.installed`, then run "
              "`.venv-vllm/bin/rlsched bench plugin` (or `make bench-plugin`).")


def _load() -> Any:
    """``overhead``, or SystemExit with how to get the vLLM tier. vLLM logs its import to
    stdout; that goes to stderr here, so that ``--json`` prints one JSON object."""
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    with contextlib.redirect_stdout(sys.stderr):  # vLLM's log handler binds sys.stdout at import
        try:
            import vllm_omni  # noqa: F401

            from rlsched.integrations.vllm_omni.harness import overhead
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("rlsched"):
                raise
            raise SystemExit(NEEDS_VLLM.format(missing=f"no module {exc.name!r}")) from None
    import logging

    logging.disable(logging.INFO)  # vLLM-Omni logs every admission at INFO
    return overhead


def parse(args: argparse.Namespace) -> dict[str, Any]:
    """``overhead.measure``'s keyword arguments from the command line (checked before vLLM loads)."""
    policies = [p for p in (args.policies or "").split(",") if p] or list(POLICIES)
    queues = int_list(args.queues, "--queues", bounds.COUNT) if args.queues else list(QUEUES)
    modes = [m for m in (args.modes or "").split(",") if m] or list(MODES)
    bad = sorted(set(modes) - set(MODES))
    if bad:
        raise ConfigError("--modes", f"unknown modes {bad} (known: {', '.join(MODES)})")
    calls = CALLS if args.calls is None else args.calls
    if calls < 1:
        raise ConfigError("--calls", f"must be >= 1, not {calls}")
    rounds = getattr(args, "rounds", 1)
    if rounds < 1:
        raise ConfigError("--rounds", f"must be >= 1, not {rounds}")
    threads = [t for t in (getattr(args, "decision_threads", "") or "").split(",") if t] or ["auto"]
    bad = sorted(set(threads) - set(DECISION_THREADS))
    if bad:
        raise ConfigError("--decision-threads", f"unknown values {bad} (known: {', '.join(DECISION_THREADS)})")
    calibrate = getattr(args, "calibrate", "on")
    if calibrate not in ("on", "off"):
        raise ConfigError("--calibrate", f"on or off, not {calibrate!r}")
    return {"policies": policies, "queues": queues, "modes": modes, "calls": calls, "rounds": rounds,
            "threads": threads, "calibrate": calibrate == "on"}


def table(result: dict[str, Any]) -> str:
    """The rows as aligned text: mode, policy, queue, median, p99, CPU p99, undisturbed p99, p99 of the
    calls without a collection, overhead, admitted a call, function calls a call, disturbed calls, calls
    with a collection, fallbacks (reasons)."""
    head = ("mode", "policy", "queue", "median µs", "p99 µs", "CPU p99 µs", "p99 undisturbed µs", "p99 w/o GC µs",
            "+median µs", "admitted/call", "fn calls/call", "disturbed calls", "GC calls", "versions",
            "fallbacks/1k", "fallbacks")
    lines = [tuple(head)]
    several = len(result.get("decision_threads", ["auto"])) > 1
    for r in result["rows"]:
        reasons = ", ".join(f"{k} {v}" for k, v in r["fallback_reasons"].items())
        warm = ", ".join(f"{k} {v}" for k, v in r.get("warmup_fallback_reasons", {}).items())
        fb = f"{r['fallbacks']}/{r['calls']}" + (f" ({reasons})" if reasons else "") \
            + (f"; warm-up: {warm}" if warm else "")
        native = r["policy"] == "vllm-omni"
        if r["fallbacks_disturbed"]:
            fb += f"; {r['fallbacks_disturbed']} in disturbed calls"
        if r.get("over_budget_used"):
            fb += f"; {r['over_budget_used']} past the budget, used"
        label = r["policy"] + (" (native)" if native else f" [{r['decision_thread']}]" if several else "")
        lines.append((r["mode"], label, f"{r['queue']:,}",
                      f"{r['p50_us']:,.1f}", f"{r['p99_us']:,.1f}", f"{r['cpu_p99_us']:,.1f}",
                      f"{r['p99_undisturbed_us']:,.1f}", f"{r['p99_no_gc_us']:,.1f}",
                      "" if native else f"{r['overhead_p50_us']:+,.1f}",
                      f"{r['admitted_per_call']:.2f}", f"{r['work_p50']:,.0f}", str(r["disturbed"]),
                      str(r["gc_calls"]), "" if native else str(r["versions"]),
                      "" if native else f"{r['fallbacks_per_1k']:g}", "" if native else fb))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    right = set(range(2, 15))
    rounds = result.get("rounds", 1)
    out = [f"schedule() per call, {result['calls']} calls a cell"
           + (f" ({rounds} rounds, queue depths in alternating order)" if rounds > 1 else "")
           + f" after {result['warmup_calls']} untimed, "
           f"max_num_seqs {result['max_num_seqs']}, default PluginConfig (budget {result['decision_budget_ms']:g} ms, "
           f"deadline {result['decision_deadline_ms']:g} ms), online calibration "
           + ("on (a drifting GPU; versions: new calibration versions during the timed calls)"
              if result.get("calibrate", False) else "off")
           + "; fallbacks/1k: per 1,000 calls; CPU: the process's CPU time in the call (all threads; "
           f"wall time beyond it was spent waiting for a core); +median: over vLLM-Omni's in the same mode and queue; "
           f"admitted/call: requests a call admitted, on average (more work per call); "
           f"fn calls/call: function calls (Python and C) a call made, median of {result.get('work_calls', 0)} "
           f"untimed calls after the timed ones (the work, whatever the machine's speed); "
           f"disturbed: calls beside a machine probe over {result['probe_slowdown']:g}x its median "
           f"(the machine ran slow); GC calls: calls a garbage collection ran in"]
    for n, line in enumerate(lines):
        out.append("  ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths)))
                   .rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    ratios = result.get("depth_ratios") or []
    if ratios:
        out.append(f"p99 at {ratios[0]['to']:,} waiting / p99 at {ratios[0]['from']:,} (in machine-probe units; "
                   f"function calls a call):")
        for mode in dict.fromkeys(r["mode"] for r in ratios):
            out.append(f"  {mode}: " + "; ".join(
                f"{r['policy'].split(':')[0]}{' [' + r['decision_thread'] + ']' if several else ''} "
                f"{r['p99_ratio']:.2f} ({r['p99_ratio_machine']:.2f}; {r['work_ratio']:.2f})"
                for r in ratios if r["mode"] == mode))
    return "\n".join(out)


def measure(policies: Sequence[str] = POLICIES, queues: Sequence[int] = QUEUES, modes: Sequence[str] = MODES,
            calls: int = CALLS, warmup: int = WARMUP, progress: Callable[[str], None] | None = None,
            rounds: int = 1, threads: Sequence[str] = ("auto",), calibrate: bool = True) -> dict[str, Any]:
    """One row per (mode, queue, scheduler): vLLM-Omni native first, then each policy, once per
    ``threads`` value (``PluginConfig.decision_thread``; interleaved cell by cell, so that two of them
    meet the same machine; each row's ``decision_thread``). ``calibrate``: online calibration on, as
    deployed, against a fake GPU whose durations drift (``overhead.plugin_scheduler``), or off.

    ``rounds`` > 1 runs the whole grid again, queue depths in reverse order every other round,
    and pools each cell's calls (``calls`` × ``rounds`` per row): on a machine whose speed drifts
    the depths run first would otherwise look cheaper. ``progress`` is called with a label after
    each cell. Each row: ``p50_us``, ``p99_us``, ``cpu_p50_us``, ``cpu_p99_us`` (the process's CPU
    time in the call, all threads), ``calls``, ``fallbacks``, ``fallback_reasons``, ``decisions``,
    ``fallbacks_per_1k`` (per 1,000 timed calls), ``versions`` (calibration versions made during the timed
    calls), ``over_budget_used`` (decisions past the budget used all the same: a lone overrun, or the first
    after a reset), ``warmup_fallback_reasons``, ``admitted_per_call`` (mean requests a call admitted), the machine
    probe's ``disturbed``, ``fallbacks_disturbed``,
    ``p99_undisturbed_us`` and ``probe_p50_us``, the collector's ``gc_calls`` (calls a collection ran
    in), ``gc_p50_us`` (its median time in those calls) and ``p99_no_gc_us`` (p99 of the other calls),
    ``work_p50`` (median function calls a call: ``overhead``'s work count, NaN for a decision on a worker
    thread), and ``overhead_p50_us`` (this row's median minus native's, same mode and queue)."""
    bad = sorted(set(modes) - set(MODES))
    if bad:
        raise ValueError(f"unknown modes {bad} (known: {', '.join(MODES)})")
    o = _load()
    cells = [(NATIVE, ""), *((p, t) for p in policies for t in threads)]
    timed: dict[tuple[str, int, str, str], list[dict[str, Any]]] = {}
    for n in range(rounds):
        for mode in modes:
            step = mode == "step"
            for queue in (queues if n % 2 == 0 else list(reversed(queues))):
                for policy, thread in cells:
                    sched = o.native_scheduler(step) if policy == NATIVE else o.plugin_scheduler(policy, step, thread,
                                                                                                  calibrate)
                    gc.collect()  # the previous cell's garbage is not this cell's cost
                    try:
                        timed.setdefault((mode, queue, policy, thread), []).append(
                            o.time_cell(sched, queue, step, calls, warmup))
                    finally:
                        o.close(sched)
                    if progress is not None:
                        progress(f"{mode} {policy} @{queue}" + (f" [{thread}]" if thread and len(threads) > 1 else ""))
    rows: list[dict[str, Any]] = []
    for mode in modes:
        for queue in queues:
            native_p50 = None
            for policy, thread in cells:
                cell = _summarize(_pool(timed[(mode, queue, policy, thread)]))
                if policy == NATIVE:
                    native_p50 = cell["p50_us"]
                cell["overhead_p50_us"] = round(cell["p50_us"] - native_p50, 1) if native_p50 is not None else 0.0
                rows.append({"mode": mode, "policy": policy, "queue": queue, "decision_thread": thread, **cell})
    settings = PluginConfig()
    return {"bench": "plugin", "depth_ratios": depth_ratios(rows),
            "max_num_seqs": o.MAX_NUM_SEQS, "sizes": list(o.SIZES), "steps_per_request": o.STEPS,
            "calls": calls * rounds, "rounds": rounds, "warmup_calls": warmup, "probe_slowdown": o.PROBE_SLOWDOWN,
            "work_calls": o.WORK_CALLS * rounds,
            "decision_budget_ms": settings.decision_budget_ms,
            "decision_deadline_ms": settings.decision_deadline_ms, "decision_threads": list(threads),
            "calibrate": calibrate, "rows": rows}


BASE_QUEUE = 256
"""The depth the deepest queue's p99 is compared with (the smallest measured when it is absent)."""


def depth_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (mode, policy, decision thread): p99 at the deepest queue over p99 at ``BASE_QUEUE``, the same
    with each cell's times in units of its median machine probe (``p99_ratio_machine``): the cells of one
    row are measured minutes apart, and this VM's speed drifts by up to 2x in that time (the probe, a fixed
    piece of work, tracks it), and the ratio of the median function calls a call (``work_ratio``: the
    work itself, which no machine's speed changes). Empty with fewer than two depths."""
    out = []
    cells: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = {}
    for r in rows:
        cells.setdefault((r["mode"], r["policy"], r["decision_thread"]), {})[r["queue"]] = r
    for (mode, policy, thread), by_queue in cells.items():
        if len(by_queue) < 2:
            continue
        deep = by_queue[max(by_queue)]
        base = by_queue[BASE_QUEUE if BASE_QUEUE in by_queue and BASE_QUEUE != max(by_queue) else min(by_queue)]
        ratio = deep["p99_us"] / base["p99_us"]
        out.append({"mode": mode, "policy": policy, "decision_thread": thread, "from": base["queue"],
                    "to": deep["queue"], "p99_ratio": round(ratio, 2),
                    "p99_ratio_machine": round(ratio * base["probe_p50_us"] / deep["probe_p50_us"], 2),
                    "work_ratio": round(deep["work_p50"] / base["work_p50"], 2)})
    return out


def _pool(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """One cell's rounds as one: per-call arrays joined (a call's disturbance was judged within its
    own round), counts summed."""
    if len(cells) == 1:
        return cells[0]
    out: dict[str, Any] = {k: np.concatenate([c[k] for c in cells])
                           for k in ("us", "cpu_us", "disturbed", "fell_back", "probe_us", "admitted", "gc_us", "work")}
    for k in ("fallbacks", "decisions", "versions", "over_budget_used"):
        out[k] = sum(c[k] for c in cells)
    for k in ("fallback_reasons", "warmup_fallback_reasons"):
        total: Counter[str] = Counter()
        for c in cells:
            total.update(c[k])
        out[k] = dict(sorted(total.items()))
    return out


def _summarize(cell: dict[str, Any]) -> dict[str, Any]:
    """A timed cell's arrays as the row's numbers: percentiles of all calls, of the undisturbed
    ones (``overhead``'s machine probe) and of those without a collection; disturbed calls and the
    fallbacks among them; calls with a collection and its median time in them; the median work count."""
    us, disturbed, fell_back = cell.pop("us"), cell.pop("disturbed"), cell.pop("fell_back")
    work = cell.pop("work")
    work = work[~np.isnan(work)]
    cpu, probes, gc_us = percentiles_us(cell.pop("cpu_us")), cell.pop("probe_us"), cell.pop("gc_us")
    clean, collected = us[~disturbed], gc_us > 0
    no_gc = us[~collected]
    per_1k = round(1000 * cell["fallbacks"] / us.size, 1) if us.size else 0.0
    return {**percentiles_us(us), "cpu_p50_us": cpu["p50_us"], "cpu_p99_us": cpu["p99_us"], "fallbacks_per_1k": per_1k,
            "admitted_per_call": round(float(np.mean(cell.pop("admitted"))), 2), **cell,
            "disturbed": int(disturbed.sum()), "fallbacks_disturbed": int((fell_back & disturbed).sum()),
            "p99_undisturbed_us": _p99(clean), "gc_calls": int(collected.sum()),
            "gc_p50_us": round(float(np.median(gc_us[collected])), 1) if collected.any() else 0.0,
            "p99_no_gc_us": _p99(no_gc), "work_p50": float(np.median(work)) if work.size else float("nan"),
            "probe_p50_us": round(float(np.median(probes)), 1)}


def _p99(us: Any) -> float:
    """p99 of some of a cell's calls; NaN when there are none."""
    return percentiles_us(us)["p99_us"] if us.size else float("nan")


@bench("plugin", text=table)
def plugin_speed(args: argparse.Namespace) -> dict[str, Any]:
    """schedule() µs (median, p99) and fallbacks per mode, policy and queue depth, vs vLLM-Omni."""
    kw = parse(args)
    from rlsched.policies import make_policy

    for spec in kw["policies"]:
        make_policy(spec)  # a typo fails here, not after minutes of other cells
    _load()
    cells = len(kw["modes"]) * len(kw["queues"]) * (len(kw["policies"]) * len(kw["threads"]) + 1) * kw["rounds"]
    with _progress(cells) as advance:
        return measure(progress=advance, **kw)


@contextlib.contextmanager
def _progress(total: int) -> Any:
    """A rich progress bar on stderr, gone when done (a line per cell on stderr without rich)."""
    try:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    except ModuleNotFoundError:
        def plain(label: str) -> None:
            print(f"  {label}", file=sys.stderr, flush=True)
        yield plain
        return
    columns = (TextColumn("schedule() cells"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        job = bar.add_task("", total=total)

        def advance(label: str) -> None:
            bar.update(job, advance=1, description=label)
        yield advance
