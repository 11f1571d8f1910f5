"""``rlsched label`` (teacher labels for the candidate policy) and ``rlsched learn`` (its whole recipe)."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsched import bounds
from rlsched.argtypes import flag, number_list, seed_arg
from rlsched.commands.args import add_json, check_out_dir, check_out_file, command, renamed, report
from rlsched.errors import ConfigError
from rlsched.parallel import add_parallel_args


@command("label", "Label decision points with the look-ahead teacher: the value of starting each candidate batch.")
def add_label_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", default="default,omni-mix,trace-azure,bursty",
                   help="request-mode scenarios, comma-separated")
    p.add_argument("--static", default="agents/tuned/{scenario}.json",
                   help="tuned action file of the heuristic ({scenario} is replaced)")
    p.add_argument("--episodes", type=flag(bounds.COUNT), default=8, help="labelled episodes per scenario")
    p.add_argument("--seed", type=seed_arg, default=0, help="first training seed (consecutive, < 900)")
    renamed(p, p.add_argument("--load-range", dest="rate_scales", metavar="LOW,HIGH", default="0.5,1.5",
                              help="load range LOW,HIGH; episodes spread evenly over it"), "--rate-scales")
    p.add_argument("--future", type=flag(bounds.NONNEGATIVE_S), default=600.0,
                   help="hindsight horizon in s (the fork sees the real arrivals this far ahead; 0: realizable)")
    p.add_argument("--every", type=flag(bounds.COUNT), default=2,
                   help="label one decision point with a choice in this many")
    p.add_argument("--duration", type=flag(bounds.DURATION_S), default=7200.0, help="arrival window per episode (s)")
    p.add_argument("--policy", help="DAgger: a frozen scorer (pick checkpoint folder) visits the states "
                                    "instead of the heuristic")
    add_parallel_args(p, workers=2)
    p.add_argument("--out", required=True, help="labels file to write (.npz)")
    p.add_argument("--no-progress", action="store_true")
    add_json(p)
    p.set_defaults(handler=run_label)


def run_label(args: argparse.Namespace) -> int:
    from rlsched.agents.labels import generate, label_tasks, save_labels

    loads = number_list(args.rate_scales, "--load-range")
    if len(loads) != 2 or loads[0] > loads[1]:
        raise ConfigError("--load-range", f"expected LOW,HIGH with LOW <= HIGH, not {args.rate_scales!r}")
    low, high = loads
    out = check_out_file(args.out, "--out", make_parents=True)
    if out.suffix != ".npz":  # numpy would add it, and the file written would not be --out
        raise ConfigError("--out", f"{out}: the labels file must end in .npz")
    _check_static(args.scenarios.split(","), args.static)
    scorer = None
    if args.policy:
        from rlsched.learned.pick import load_scorer

        scorer = load_scorer(args.policy)
    tasks = label_tasks(args.scenarios.split(","), args.static, args.episodes, args.seed, (low, high),
                        args.future, args.every, args.duration, scorer)
    parts = generate(tasks, args.workers, not args.no_progress, args.ray)
    save_labels(out, parts, {"scenarios": args.scenarios, "episodes": args.episodes,  # whole or not at all
                             "seed": args.seed, "future_s": args.future}, "--out")
    states = sum(len(p["q"]) for p in parts)
    report(args, {"labels": out, "states": states}, f"wrote {out}: {states} labelled decision points")
    return 0


def _check_static(scenarios: list[str], static: str) -> None:
    """Every scenario's tuned file loads before the first episode (not at its own episode)."""
    from rlsched.policies.static import load_static
    from rlsched.sim import load_scenario

    for sc in dict.fromkeys(scenarios):
        load_scenario(sc)
        try:
            load_static(static.format(scenario=sc))
        except ConfigError as exc:
            raise ConfigError("--static", f"scenario {sc!r}: {exc}") from None


def as_heuristic(validation: dict[str, float]) -> bool:
    """Whether a stage's paired differences to its heuristic were exactly 0 in every validation cell (mean
    and 95 % interval both 0): the learned policy then decides as the heuristic on those seeds, which a
    bare "chosen: imitation@4" did not say. A knob run's validation (no paired differences) is never."""
    return validation.get("mean") == 0.0 and validation.get("ci95") == 0.0


@command("learn", "Train a learned policy end to end: the candidate-batch policy (labels, imitation, DAgger, "
                  "MaskablePPO, validation, export), with a `kind: router` preset the learned router, with "
                  "`kind: knob` (agents/ppo.yaml) the knob policy (train + export).")
def add_learn_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--agent", default="agents/pick.yaml",
                   help="recipe preset (YAML): agents/pick.yaml (candidate policy), agents/router.yaml (router) or "
                        "agents/ppo.yaml (the knob policy: train + export)")
    p.add_argument("--run-dir", required=True, help="folder for labels, TensorBoard logs and the report")
    p.add_argument("--out", help="checkpoint folder to export the validated best stage to")
    p.add_argument("--timesteps", type=flag(bounds.TIMESTEPS_OR_NONE),
                   help="PPO steps (default: the preset's; 0 skips PPO)")
    p.add_argument("--smoke", action="store_true",
                   help="cut every budget of the recipe (labels, epochs, margins, PPO steps, validation) to a few "
                        "minutes, its scenarios and files kept: check that it runs end to end before the real run "
                        "(the policy it exports is not one to serve)")
    add_parallel_args(p, workers=None)  # None: the preset's
    p.add_argument("--no-progress", action="store_true")
    add_json(p)
    p.set_defaults(handler=run_learn)


def run_learn(args: argparse.Namespace) -> int:
    from rlsched.agents.recipe import recipe_kind, recipe_of, with_smoke, with_timesteps

    check_out_dir(args.run_dir, "--run-dir")
    if args.out:
        check_out_dir(args.out, "--out")
    load, learn = recipe_of(args.agent)
    cfg = load(args.agent, workers=args.workers, ray=args.ray)
    if args.smoke:
        cfg = with_smoke(cfg, recipe_kind(args.agent))
    if args.timesteps is not None:
        cfg = with_timesteps(cfg, args.timesteps)
    cfg.check_inputs(str(args.agent))  # every scenario and file the recipe reads, before any work
    # labelling bars are on stderr; PPO's (stable-baselines3's own) is on stdout, which --json keeps for the JSON
    result = learn(cfg, Path(args.run_dir), Path(args.out) if args.out else None,
                   not (args.no_progress or args.json))
    same = as_heuristic(result["validation"].get(result["chosen"], {}))
    summary = {"chosen": result["chosen"], "validation": result["validation"], "total_s": result["total_s"],
               "checkpoint": args.out, "tensorboard": f"{args.run_dir}/tb", "same_as_heuristic": same,
               "smoke": bool(args.smoke)}
    exported = f"\ncheckpoint:  {args.out}" if args.out else ""
    if args.smoke:
        exported += ("\nsmoke:       --smoke cut every budget: the recipe runs end to end on these inputs; run it "
                     "without --smoke for a policy to serve")
    note = (f"\nnote:        {result['chosen']} scored exactly as the heuristic it starts from in every validation "
            "cell (paired difference +0.0, interval 0): on these seeds it decides as that heuristic does; serve the "
            "heuristic, or give the recipe more labels and steps" if same else "")
    report(args, summary, f"chosen:      {result['chosen']} ({result['total_s']:.0f} s; the report and its "
                          f"validation numbers are in {args.run_dir}){note}{exported}\n"
                          f"TensorBoard: tensorboard --logdir {args.run_dir}/tb")
    return 0
