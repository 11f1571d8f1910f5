"""Smoke tests: the CLI as a subprocess with tiny budgets."""

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest

REQUIRED = ("slo_attainment", "goodput_rps", "throughput_rps", "requests_total", "requests_completed",
            "requests_failed", "requests_unfinished", "weighted_slo_attainment")


def rlsched(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlsched", *args], capture_output=True, text=True,
                          check=check, timeout=120)


def test_simulate_json_has_required_keys() -> None:
    out = json.loads(rlsched("simulate", "--scenario", "default", "--duration", "1800", "--json").stdout)
    for key in REQUIRED:
        assert key in out
    for cls in ("realtime", "batch", "background"):
        assert {"slo_attainment", "latency_p99_s", "count"} <= set(out["per_class"][cls])
    assert out["requests_completed"] + out["requests_failed"] + out["requests_rejected"] \
        + out["requests_unfinished"] == out["requests_total"]


def test_compare_prints_one_object_per_policy_same_workload() -> None:
    out = json.loads(rlsched("simulate", "--compare", "fifo,edf,drr", "--duration", "1800", "--json").stdout)
    assert [o["policy"] for o in out] == ["fifo", "edf", "drr"]
    assert len({o["requests_total"] for o in out}) == 1


def test_table_and_records(tmp_path: Path) -> None:
    rec = tmp_path / "r.csv"
    res = rlsched("simulate", "--scenario", "video-mix", "--duration", "7200", "--records", str(rec))
    assert "fifo" in res.stdout and "weighted SLO" in res.stdout
    rows = list(csv.DictReader(rec.open()))
    want = {"id", "arrival_s", "first_scheduled_s", "finish_s", "status", "slo_met", "batch_id"}
    assert rows and want <= set(rows[0])


def test_bad_input_is_a_clear_error() -> None:
    res = rlsched("simulate", "--scenario", "nope", check=False)
    assert res.returncode == 2 and "scenario not found" in res.stderr and "Traceback" not in res.stderr
    res = rlsched("simulate", "--policy", "magic", "--duration", "100", check=False)
    assert res.returncode == 2 and "unknown policy" in res.stderr


def test_bench_sim_json() -> None:
    out = json.loads(rlsched("bench", "sim", "--repeats", "1", "--json").stdout)
    assert out["requests_per_s"] > 1000 and out["requests"] > 1000


def test_bench_backlog_reports_every_policy_relative_to_fifo() -> None:
    out = json.loads(rlsched("bench", "backlog", "--repeats", "1", "--policies", "fifo,edf", "--json").stdout)
    assert out["requests"] > 19000 and set(out["x_fifo"]) == {"fifo", "edf"} and out["x_fifo"]["fifo"] == 1.0


def test_bench_route_times_every_router_spec() -> None:
    out = json.loads(rlsched("bench", "route", "--repeats", "1", "--policies", "router,round-robin", "--json").stdout)
    assert out["waiting"] == 256 and set(out) >= {"router", "round-robin"}
    assert out["router"]["calls"] >= 100 and 0 < out["router"]["cpu"]["p50_us"] <= out["router"]["cpu"]["p99_us"]


def test_bench_calibration_prices_a_batch_and_a_version() -> None:
    out = json.loads(rlsched("bench", "calibration", "--repeats", "1", "--json").stdout)
    assert 0 < out["batch_of_1_us"] and 0 < out["batch_of_4_us"]
    kinds = ("recost", "decision", "first_decision_after")
    assert all(out[f"{what}_{n}_ms"] > 0 for what in kinds for n in (256, 4096))


def test_shed_lost_rejects_with_a_reason_and_counts_add_up() -> None:
    args = ("simulate", "--scenario", "default", "--duration", "1800", "--load", "2", "--json")
    out = json.loads(rlsched(*args, "--policy", "static:;shed_lost=true").stdout)
    assert out["requests_rejected"] > 0 and out["rejections"] == {"lost": out["requests_rejected"]}
    assert out["requests_completed"] + out["requests_failed"] + out["requests_rejected"] \
        + out["requests_unfinished"] == out["requests_total"]
    res = rlsched(*args, "--policy", "static:;shed_lost=perhaps", check=False)
    assert res.returncode == 2 and "shed_lost" in res.stderr and "Traceback" not in res.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--policy", "drr:0"), "policy drr:0: the argument must be a finite number > 0"),
    (("--policy", "drr:-1"), "policy drr:-1: the argument must be a finite number > 0"),
    (("--policy", "drr:abc"), "policy drr:abc: the argument must be a number"),
    (("--seed", "-1"), "argument --seed: must be an integer >= 0"),
    (("--load", "-1"), "argument --load: must be a finite number >= 1e-09"),
    (("--duration", "nan"), "argument --duration: must be a finite number > 0"),
    (("--policy", "drr:1e-300"), "policy drr:1e-300: the argument must be a finite number >= 1e-09 and <= 1e+09"),
])
def test_bad_arguments_are_clear_errors_without_traceback_or_hang(args: tuple[str, ...], message: str) -> None:
    res = rlsched("simulate", "--duration", "100", *args, check=False)  # a hang would hit the timeout
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_trace_rows_past_the_window_are_reported(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,height,width,num_frames,num_inference_steps,priority\n"
                     "0,512,512,1,50,batch\n50,512,512,1,50,batch\n500,512,512,1,50,batch\n")
    res = rlsched("simulate", "--trace", str(trace), "--duration", "100", "--compare", "fifo,edf", "--json")
    assert [(o["requests_total"], o["trace_rows_skipped"]) for o in json.loads(res.stdout)] == [(2, 1), (2, 1)]
    assert res.stderr.count("rlsched: warning:") == 1 and "1 of 3 rows" in res.stderr


def test_eval_seeds_must_be_integers() -> None:
    res = rlsched("eval", "--seeds", "abc", check=False)
    assert res.returncode == 2 and "--seeds" in res.stderr and "Traceback" not in res.stderr
