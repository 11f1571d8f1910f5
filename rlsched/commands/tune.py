"""``rlsched tune``: the command line of ``rlsched.agents.tune`` (the library: spec, study, search)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlsched import bounds
from rlsched.agents.reproducible import PROVENANCE, provenance
from rlsched.agents.tune import TuneSpec, require_optuna, search, to_json
from rlsched.argtypes import distinct, flag, int_list, number_list, seed_arg
from rlsched.commands.args import check_out_file, command, print_json, renamed, write_atomic
from rlsched.errors import ConfigError
from rlsched.evaluation import VALIDATION_SEED_BASE
from rlsched.parallel import add_parallel_args, progress_bar
from rlsched.policies.projected import encode_params
from rlsched.sim.classes import print_note
from rlsched.sim.scenario import load_scenario

DEFAULT_OUT = "runs/tuned/{scenario}.json"
"""Where a tune writes without --out: never a shipped file (``agents/tuned/*.json`` are the
40-trial tunes the results use; a 2-trial try-out used to replace them silently)."""


@command("tune", "Search a fixed action for the `static` policy on training seeds (< 900), with Optuna.")
def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenario", default="default", help="scenario name (envs/NAME.yaml) or path")
    p.add_argument("--trials", type=flag(bounds.COUNT), default=40,
                   help="total trials of the study (a resumed study runs only the missing ones)")
    p.add_argument("--seeds", default="0,1", help=f"training seeds, each < {VALIDATION_SEED_BASE}")
    renamed(p, p.add_argument("--loads", dest="rate_scales", metavar="L1,L2,...", default="1.0",
                              help="comma-separated loads (x nominal rate) to average over"), "--rate-scales")
    p.add_argument("--trace", type=Path, metavar="FILE",
                   help="tune on your own traffic: replay this trace (Azure CSV, Hetu-DiT text or rlsched CSV, as "
                        "`simulate --trace`) instead of the scenario's arrivals and shapes, x each of --loads; keep "
                        "another window or day of it to evaluate on")
    p.add_argument("--duration", type=flag(bounds.DURATION_S),
                   help="arrival window per run in s (default: the scenario's)")
    p.add_argument("--search-seed", type=seed_arg, default=0, help="seed of the sampler's own draws (integer >= 0)")
    p.add_argument("--init", help="tuned JSON whose action is tried third (e.g. the previous tune)")
    p.add_argument("--out", help=f"JSON file to write (default: {DEFAULT_OUT.replace('{scenario}', 'SCENARIO')}, "
                                 "never the shipped agents/tuned/SCENARIO.json: name that with --out to replace it)")
    p.add_argument("--storage", help="Optuna storage URL of the study (default: sqlite:///OUT.optuna.db beside "
                                     "--out); an existing study of the same name is resumed")
    p.add_argument("--study-name", help="study name in --storage (default: tune-SCENARIO)")
    p.add_argument("--batch", type=flag(bounds.COUNT), default=1,
                   help="trials asked at once and simulated together (more parallel work for a cluster; "
                        "changes the search path, unlike --workers/--ray)")
    add_parallel_args(p)
    p.add_argument("--json", action="store_true", help="print the result as JSON, no progress bar")
    p.set_defaults(handler=run)


def _init_action(path: str | None) -> tuple[float, ...] | None:
    if not path:
        return None
    from rlsched.policies.static import load_static

    return tuple(encode_params(load_static(path).params).tolist())


def _trace(path: Path | None) -> str | None:
    """``--trace`` as an absolute path (worker processes and Ray tasks read it from anywhere), checked now."""
    if path is None:
        return None
    if not path.is_file():
        raise ConfigError("--trace", f"{path}: no such file")
    return str(path.resolve())


def default_storage(out: Path) -> str:
    """The study beside the tuned file, so rerunning the same command resumes it."""
    return f"sqlite:///{out.with_suffix('.optuna.db')}"


def run(args: argparse.Namespace) -> int:
    spec = TuneSpec(args.scenario, tuple(int_list(args.seeds, "--seeds")),
                    tuple(distinct(number_list(args.rate_scales, "--loads"), "--loads")),
                    args.duration, args.trials, args.search_seed, init=_init_action(args.init), batch=args.batch,
                    trace=_trace(args.trace))
    # the output is checked (and its folder made) before the first trial, not after the last
    out = check_out_file(args.out or DEFAULT_OUT.format(scenario=Path(spec.scenario).stem), "--out",
                         make_parents=True)
    storage = args.storage or default_storage(out)
    print_note(load_scenario(spec.scenario).class_table)
    require_optuna().logging.set_verbosity(require_optuna().logging.WARNING)  # the progress bar reports trials
    with progress_bar(disable=args.json) as bar:
        job = bar.add_task("tuning", total=spec.trials)
        result = search(spec, lambda done, score, best: bar.update(
            job, completed=done, description=f"tuning (best {100 * best:.1f} %)"), args.workers, args.ray,
            storage, args.study_name)
    payload = {**to_json(spec, result, storage), PROVENANCE: provenance()}  # provenance: commit, command
    write_atomic(out, json.dumps(payload, indent=1) + "\n", "--out")
    if args.json:
        print_json(payload)
    else:
        print(f"best weighted SLO attainment {100 * result.score:.2f} % (default action "
              f"{100 * result.default_score:.2f} %) over {len(result.scores)} trials on seeds "
              f"{list(spec.seeds)}" + (f", replaying {spec.trace}" if spec.trace else "")
              + f"; wrote {out} (study in {storage})")
    return 0
