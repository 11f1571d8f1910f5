"""``rlsched plan``: the layout (replicas × sequence-parallel degree × CFG-parallel degree) N GPUs should
serve a scenario with."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from rlsched import bounds
from rlsched.argtypes import flag, flag_list, int_list
from rlsched.commands.args import check_out_dir, command, existing_outputs, print_json, write_atomic
from rlsched.errors import CheckpointError, ConfigError
from rlsched.parallel import add_parallel_args, progress_bar

if TYPE_CHECKING:
    from rlsched.routing.spec import StageSpec

PLAN_FILES = ("plan.json", "stage.yaml", "deploy.sh", "plan.png")
"""What ``rlsched plan`` writes into --out (each checked before the first layout is simulated)."""


@command("plan", "Simulate every replicas x SP-degree (x CFG-parallel, where the profile has it) layout of N GPUs "
                 "on training seeds; recommend one and write its vLLM-Omni stage keys.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="default", help="scenario name or YAML path")
    p.add_argument("--gpus", type=flag_list(bounds.STAGE_GPUS), default=None,
                   help="GPUs the stage gets (default: the scenario's: its replicas' GPUs, or 1); with --rate, the "
                        "GPU counts to compare (default 1,2,4,8)")
    p.add_argument("--rate", type=flag(bounds.POSITIVE), default=None, metavar="REQ_PER_S",
                   help="your traffic in requests a second (the scenario's mix at that rate): every GPU count of "
                        "--gpus serves the same traffic, and the fewest GPUs reaching --target is recommended "
                        "(without it, the traffic grows with the GPUs: --loads x the nominal rate per GPU)")
    p.add_argument("--target", type=flag(bounds.FRACTION), default=0.95,
                   help="with --rate: the class-weighted SLO attainment (0-1) the recommended GPU count must reach "
                        "(mean over --loads and --seeds; default 0.95)")
    p.add_argument("--profile", default=None,
                   help="cost profile (default: the scenario's); SP degrees > 1 need one with an 'sp' block, "
                        "CFG-parallel layouts one with a 'cfg_parallel' block (derived), e.g. "
                        "qwen-image-h200-vllm-omni")
    p.add_argument("--policy", default="static:agents/tuned/default.json@rlsched",
                   help="POLICY@ROUTER every layout is run with (@central: late binding)")
    p.add_argument("--routers", default="rlsched,router,central",
                   help="routers compared on the recommended layout, --policy's replica policy behind each, on "
                        "the deployed router's information (view=engine); the best mean picks the deploy line's "
                        "router ('' keeps --policy's)")
    p.add_argument("--seeds", default="0,1,2", help="training seeds (< 900), paired across layouts")
    p.add_argument("--duration", type=flag(bounds.DURATION_S), default=None,
                   help="arrival window per run in s (default: the scenario's; at hundreds of GPUs a shorter one, "
                        "e.g. 600, keeps plan to minutes)")
    p.add_argument("--loads", default=None,
                   help="loads, x the scenario's nominal rate per GPU x --gpus (default 0.5,0.75,1.0,1.25,1.5); "
                        "with --rate, x --rate (default 1: exactly your traffic)")
    p.add_argument("--cfg-degrees", default="1,2",
                   help="CFG-parallel degrees to consider (2 only where the profile has a cfg_parallel block, "
                        "whose coefficients are derived); 1: sequence-parallel layouts only")
    p.add_argument("--check-seeds", default="",
                   help="evaluation seeds (>= 1000) to re-run every layout on after choosing: what the "
                        "recommendation loses to the best layout in hindsight")
    p.add_argument("--out", type=Path, default=Path("runs/plan"),
                   help="folder for plan.json, plan.png, stage.yaml and deploy.sh (the rlsched deploy line)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    add_parallel_args(p)
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from rlsched.planning import layouts, plan, plan_for_rate, profile_of
    from rlsched.routing.spec import StageSpec
    from rlsched.sim import load_scenario
    from rlsched.sim.cost import load_profile

    loads_text = args.loads or ("1" if args.rate is not None else "0.5,0.75,1.0,1.25,1.5")
    try:
        loads = [float(x) for x in loads_text.split(",")]
    except ValueError:
        raise ConfigError("--loads", f"expected comma-separated numbers, not {loads_text!r}") from None
    out = check_out_dir(args.out, "--out", PLAN_FILES)  # before minutes of simulating, not after
    seeds = int_list(args.seeds, "--seeds")
    check = int_list(args.check_seeds, "--check-seeds") if args.check_seeds else []
    sc = load_scenario(args.scenario)
    profile = args.profile or profile_of(sc)
    counts = _gpu_counts(args.gpus, args.rate, sc.gpus)
    cfg_degrees = int_list(args.cfg_degrees, "--cfg-degrees", bounds.CFG_PARALLEL)
    routers = [r.strip() for r in args.routers.split(",") if r.strip()]
    spec = StageSpec.parse(args.policy)
    deployable(spec, routers)
    cost = load_profile(profile)
    total = (sum(len(layouts(g, cost, cfg_degrees)) for g in counts) * len(seeds)
             + (max(len(layouts(g, cost, cfg_degrees)) for g in counts) * len(check)
                + len(routers) * (len(seeds) + len(check)))) * len(loads)  # the re-check and routers: one count
    earlier = existing_outputs(out, PLAN_FILES)
    if earlier:  # said before the work, so a plan worth keeping can still be saved (Ctrl-C)
        print(f"rlsched: note: --out {out} holds {', '.join(p.name for p in earlier)} of an earlier plan; "
              "this plan replaces them", file=sys.stderr)
    with _bar(total, args.json) as advance:
        if args.rate is None:
            result = plan(args.scenario, counts[0], spec, seeds, loads, profile, args.workers, args.ray,
                          advance, check, cfg_degrees, routers, args.duration)
        else:
            result = plan_for_rate(args.scenario, counts, args.rate, spec, seeds, loads, args.target, profile,
                                   args.workers, args.ray, advance, check, cfg_degrees, routers, args.duration)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "plan.json", json.dumps(result, indent=1), "--out")  # each file whole or not at all
    write_atomic(out / "stage.yaml", result["stage_yaml"], "--out")
    deploy = out / "deploy.sh"
    write_atomic(deploy, f"# rlsched plan's recommendation ({result['recommended']}, {result['policy']}); it "
                         f"prints the vllm serve line\n{result['deploy_command']}\n", "--out")
    plotted = _plot(result, out / "plan.png")
    if args.json:
        print_json(result)
        return 0
    if "by_gpus" in result:
        print(f"{result['scenario']} at {result['rate_rps']:g} req/s ({result['profile']}), {result['policy']}, "
              f"seeds {result['seeds']}: the best layout of each GPU count, class-weighted SLO attainment %")
        for r in result["by_gpus"]:
            print(f"{r['gpus']:>5} GPUs  {r['layout']:>12}  {100 * r['mean']:6.1f}"
                  + ("  reaches" if r["reaches_target"] else ""))
        verdict = "the fewest that reach" if result["reaches_target"] else "none reaches; the closest to"
        print(f"recommended: {result['gpus']} GPUs ({verdict} the target {100 * result['target']:g} %)")
    print(f"{result['scenario']} on {result['gpus']} GPUs ({result['profile']}), {result['policy']}, "
          f"seeds {result['seeds']}: class-weighted SLO attainment %")
    print(f"{'layout':>12} " + " ".join(f"x{x:>5g}" for x in loads) + "    mean")
    for r in result["rows"]:
        mark = "*" if r.get("cfg_parallel", 1) > 1 else ""
        print(f"{r['layout'] + mark:>12} " + " ".join(f"{100 * v:6.1f}" for v in r["by_load"].values())
              + f"  {100 * r['mean']:6.1f}")
    if any(r.get("cfg_parallel", 1) > 1 for r in result["rows"]):
        print("* CFG-parallel: the profile's cfg_parallel coefficients are derived, not measured")
    print(f"recommended: {result['recommended']} (the worst layout loses {result['worst_loses_points']} points); "
          f"stage keys in {args.out / 'stage.yaml'}, " + (f"plot {args.out / 'plan.png'}" if plotted else
                                                            "no plot (matplotlib is not installed here)"))
    if result.get("router_rows"):
        print(f"routers on {result['recommended']} (deployed view), class-weighted SLO attainment %:")
        for r in result["router_rows"]:
            print(f"{r['router']:>12} " + " ".join(f"{100 * v:6.1f}" for v in r["by_load"].values())
                  + f"  {100 * r['mean']:6.1f}" + (f"   re-checked {100 * r['check_mean']:.1f}" if "check_mean" in r
                                                   else ""))
        by_load = ", ".join(f"x{x} {r}" for x, r in result["best_router_by_load"].items())
        print(f"recommended router: {result['recommended_router']} (best per load: {by_load})")
    print(f"deploy it (also in {deploy}):\n  {result['deploy_command']}")
    if check:
        print(f"re-checked on seeds {check}: " + ", ".join(f"{r['layout']} {100 * r['check_mean']:.1f}"
                                                          for r in result["rows"])
              + f"; best in hindsight {result['hindsight_best']}, the recommendation loses "
                f"{result['recommended_loses_points']} points, the worst layout {result['check_worst_loses_points']}")
    return 0


def _gpu_counts(counts: list[int] | None, rate: float | None, own: int) -> list[int]:
    """``--gpus``: one count (default the scenario's), or with ``--rate`` the counts to compare (default 1,2,4,8)."""
    if rate is None:
        if counts is None:
            return [own]
        if len(counts) > 1:
            raise ConfigError("--gpus", f"several GPU counts ({','.join(map(str, counts))}) answer a fixed traffic: "
                                        "give --rate too")
        return counts
    return counts or [1, 2, 4, 8]


def _plot(result: dict, path: Path) -> bool:
    """Write the plot; False where matplotlib is missing (a serving host: rlsched installed --no-deps)."""
    from rlsched.planning import write_plot

    try:
        import matplotlib  # noqa: F401
    except ImportError:
        path.unlink(missing_ok=True)  # no stale plot of an earlier plan beside this plan.json
        return False
    write_plot(result, path)
    return True


class _bar:
    """A rich progress bar on stderr (none with --json)."""

    def __init__(self, total: int, quiet: bool) -> None:
        self.total, self.quiet = total, quiet

    def __enter__(self) -> Callable[[], None]:
        if self.quiet:
            return lambda: None
        self._progress = progress_bar(transient=True)
        self._progress.start()
        task = self._progress.add_task("layouts x loads x seeds", total=self.total)
        return lambda: self._progress.advance(task)

    def __exit__(self, *exc: object) -> None:
        if not self.quiet:
            self._progress.stop()


def deployable(spec: StageSpec, routers: list[str]) -> None:
    """Every router the deploy line may name (``--routers``, else ``--policy``'s own) is one ``rlsched
    deploy`` serves: its ``extras.rlsched_router`` builds (``RouterConfig``, deploy's own rule). Neither a
    simulator view (``view=replica``, ``view=ledger``, ``delay_ms=``) nor a teacher that simulates the
    replicas (``lookahead``, ``hindsight``) runs in vLLM-Omni: plan recommended them and wrote a line
    deploy refused."""
    from rlsched.integrations.vllm_omni.config import CENTRAL, RouterConfig

    policy, own = spec.policy, spec.router
    for router in routers or [own]:
        try:
            RouterConfig(router=router, policy=policy if router == CENTRAL else "")
        except (ConfigError, CheckpointError) as exc:
            raise ConfigError("--routers" if routers else "--policy",
                              f"{router!r}: rlsched deploy cannot serve this router ({exc}); plan compares only "
                              "routers it can deploy (compare any router in the simulator with rlsched eval)") from None
