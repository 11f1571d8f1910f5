"""``rlsched train`` and ``rlsched export``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rlsched import bounds
from rlsched.argtypes import flag, seed_arg
from rlsched.commands.args import add_json, check_out_dir, command, renamed, report

MAX_ENVS = int(bounds.ENVS.high)
"""--n-envs above this is a typo, not a rollout (each environment holds a whole simulator)."""


@command("train", "Train a PPO scheduling policy (TensorBoard logs and checkpoints in --run-dir).")
def add_train_args(p: argparse.ArgumentParser) -> None:
    renamed(p, p.add_argument("--scenarios", dest="scenario", metavar="S1,S2,...",
                              help="scenario names or files, comma-separated (default: the agent preset's)"),
            "--scenario")
    p.add_argument("--agent", default="agents/ppo.yaml", help="agent preset (YAML)")
    p.add_argument("--timesteps", type=flag(bounds.TIMESTEPS),
                   help="total environment steps, >= 1 (default: the preset's)")
    p.add_argument("--run-dir", required=True, help="folder for config, checkpoints and TensorBoard logs")
    p.add_argument("--n-envs", type=flag(bounds.ENVS),
                   help=f"parallel environments, 1..{MAX_ENVS} (default: the preset's)")
    p.add_argument("--seed", type=seed_arg, default=0, help="training seed (workload seeds drawn below 1000)")
    p.add_argument("--resume", action="store_true", help="continue from the run dir's last checkpoint")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_json(p)
    p.set_defaults(handler=run_train)


def run_train(args: argparse.Namespace) -> int:
    from rlsched.agents.config import load_agent_config
    from rlsched.agents.train import train

    overrides = {"timesteps": args.timesteps, "n_envs": args.n_envs}
    if args.scenario:
        overrides["scenarios"] = args.scenario.split(",")
    cfg = load_agent_config(args.agent, **overrides)  # step counts checked: agent.timesteps ...
    cfg.check_inputs(str(args.agent))  # every scenario, tuned file and baseline, before any work
    check_out_dir(args.run_dir, "--run-dir")
    last = train(cfg, Path(args.run_dir), seed=args.seed, resume=args.resume,
                 progress=not (args.no_progress or args.json))  # stable-baselines3's bar is on stdout
    report(args, {"checkpoint": str(last), "tensorboard": f"{args.run_dir}/tb"},
           f"trained: {last}\nTensorBoard: tensorboard --logdir {args.run_dir}/tb\n"
           f"export:   rlsched export {args.run_dir} --out checkpoints/NAME")
    return 0


@command("export", "Export a training run as a frozen policy: safetensors + JSON, loadable with numpy only.")
def add_export_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run dir written by `rlsched train`")
    p.add_argument("--out", required=True, help="checkpoint folder to write (e.g. checkpoints/default)")
    p.add_argument("--source", default="best",
                   help="checkpoint inside the run dir: best (on the validation seeds; falls back to last), "
                        "last, steps_N")
    add_json(p)
    p.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    from rlsched.agents.export import export_run

    out = export_run(Path(args.run_dir), check_out_dir(args.out, "--out", whole=True), args.source)
    report(args, {"checkpoint": str(out), "policy": f"rl:{out}"},
           f"wrote {out}/policy.safetensors and {out}/policy.json; use --policy rl:{out}")
    return 0
