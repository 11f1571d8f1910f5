"""How many decisions keep their budget under the e2e load: a real ``vllm serve --omni`` (CPU, the e2e tier's
stand-ins) with docs/deploy.md's late-binding deploy at the default budgets (central 2 ms, engine 5 ms), the
central e2e test's workload (the default scenario at 16x its rate, 50x the time scale), ``--requests`` of it
(default 200, issue 47's burst) sent ``--rounds`` times, on this machine with whatever else it runs. Reads
the server's own metrics: per decision site (the central pool on the API server, each replica's engine
scheduler) the decisions timed, the share over budget (the latency histogram's bucket at the budget: the
time the guard checks, ``guard.py``), the fallbacks by reason.

    .venv-vllm/bin/python scripts/decision_budget.py [--policy edf] [--requests 200] [--rounds 1] [--loop LOOP]

Issue 47 (docs/benchmarks.md, "Decisions against their budget").
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rlsched import loadgen  # noqa: E402
from rlsched.integrations.vllm_omni.cpu_server import build_tiny_model  # noqa: E402
from rlsched.sim import load_scenario  # noqa: E402
from tests.e2e.harness import LOOPS, REPO, Server, deploy_stage  # noqa: E402

DEPLOY = ("--replicas 2 --devices 0,1 --sp 1 --router central --profile qwen-image-h200-vllm-omni "
          "--max-num-seqs 4 --metrics-port 9400 --time-scale 50").split()
"""docs/deploy.md's ``e2e:deploy-central`` line (no budget flags: the defaults) at the e2e tier's time scale,
less its ``--policy`` (``--policy``: edf, as there; issue 47 served the tuned ``static``)."""


def site(metrics: dict[str, float], hist: str, budget_s: float, fallbacks: str) -> dict[str, object]:
    n = metrics.get(f"{hist}_count", 0.0)
    within = metrics.get(f'{hist}_bucket{{le="{budget_s:g}"}}', metrics.get(f'{hist}_bucket{{le="{budget_s}"}}', 0.0))
    return {"decisions": int(n), "over_budget": int(n - within),
            "over_budget_pct": round(100 * (n - within) / n, 2) if n else None,
            "fallbacks": {k.partition("reason=")[2].strip('"}'): int(v) for k, v in metrics.items()
                          if k.startswith(f"{fallbacks}{{") and v}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--policy", default="edf", help="the central policy (rlsched deploy --policy)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--loop", choices=tuple(LOOPS), default="legacy")
    args = p.parse_args()
    work = Path(tempfile.mkdtemp(prefix="rlsched-budget-"))
    stage = deploy_stage(sys.executable, *DEPLOY, "--policy", args.policy, out=work / "deploy.yaml")
    server = Server(build_tiny_model(REPO / ".cache" / "e2e-model"), stage, work, python=sys.executable,
                    loop=args.loop)
    with server:
        reqs = load_scenario("default").requests(seed=0, rate_scale=16.0, duration_s=600)
        failed = 0
        for _ in range(args.rounds):
            planned = loadgen.plan(reqs, 50.0, max_requests=args.requests)
            failed += sum(not r.ok for r in loadgen.run(server.url, planned, timeout_s=600, workers=64))
        out = {"policy": args.policy, "loop": args.loop, "loadavg_1m": round(os.getloadavg()[0], 2),
               "requests": args.requests * args.rounds, "failed": failed,
               "central (2 ms)": site(server.api_metrics(), "rlsched_router_latency_seconds", 2e-3,
                                      "rlsched_router_fallbacks_total")}
        for k, port in enumerate(server.metrics_ports):
            out[f"engine {k} (5 ms)"] = site(server.metrics(port), "rlsched_decision_latency_seconds", 5e-3,
                                             "rlsched_fallbacks_total")
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
