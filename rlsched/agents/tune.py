"""Tuning the ``static`` policy (``rlsched tune``): its fixed action, searched on training seeds with Optuna.

The search is over the 9-dim action of ``ProjectedPolicy`` (the projection's own knobs —
starvation, lateness, batching efficiency — are shared by every projection policy and are
not tuned per scenario). It is an Optuna study with a seeded TPE sampler: the first trials
are the anchors (the default action, earliest-deadline-first among savable requests, then
``--init`` if given), then ``explore`` of the trials are TPE's random start-up draws, and
TPE models the rest. The objective is the mean ``weighted_slo_attainment`` over the given
seeds and loads — on a multi-replica scenario, of the whole stage with the action on every
replica behind rlsched's router (``STAGE_ROUTER``). The shipped vectors are tuned over loads
0.5-1.5 so that one vector serves light load and overload. Tuning and training use seeds
below ``VALIDATION_SEED_BASE`` (900); evaluation (``rlsched eval``) uses seeds >= 1000, so a
tuned action is never scored on the workloads it was tuned on.

The study is saved (``--storage``, by default a SQLite file beside ``--out``), so a tune that
was stopped resumes where it was: ``--trials`` is the total, not the number to add. Each
trial's seeds × loads simulations fan out through ``rlsched.parallel`` (``--workers``,
``--ray``); ``--batch`` trials are asked at once to give a large cluster more to run. Where
the simulations ran never changes the result; ``--batch`` does (TPE sees fewer results
before each proposal).

    rlsched tune --scenario default --trials 40 --seeds 0,1,2,3,4,5 --loads 0.5,1,1.5
    rlsched simulate --scenario default --policy static:agents/tuned/default.json --seed 1000
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from rlsched.atomic import check_output, stream_open
from rlsched.errors import ConfigError, MissingExtra
from rlsched.parallel import run_tasks
from rlsched.policies.projected import (
    ACTION_DIM,
    ActionParams,
    ProjectedPolicy,
    ProjectionConfig,
    decode_action,
    encode_params,
)
from rlsched.run import EVAL_SEED_BASE, VALIDATION_SEED_BASE, RunSpec, prepare, prepare_stage
from rlsched.sim import Scenario, load_scenario
from rlsched.sim.metrics import summarize

SEARCH_DIM = ACTION_DIM
PARAMS = tuple(f"a{i}" for i in range(SEARCH_DIM))
"""Optuna parameter names of the action's coordinates, each in [-1, 1]."""


@dataclass(frozen=True)
class TuneSpec:
    """One search: where, on which seeds, how many trials."""

    scenario: str
    """Scenario name or path."""
    seeds: tuple[int, ...] = (0, 1)
    """Training seeds (each < VALIDATION_SEED_BASE)."""
    rate_scales: tuple[float, ...] = (1.0,)
    """Loads the objective averages over."""
    duration_s: float | None = None
    """Arrival window per run; None: the scenario's."""
    trials: int = 40
    """Total trials of the study (a resumed study runs only the missing ones)."""
    search_seed: int = 0
    """Seed of the sampler's own draws (not a workload seed)."""
    explore: float = 0.5
    """Fraction of trials that are TPE's random start-up draws (anchors included)."""
    init: tuple[float, ...] | None = None
    """An action to try third (e.g. an earlier tuned one), after the two anchors."""
    batch: int = 1
    """Trials asked at once and simulated together: more parallel work, a different search path."""
    trace: str | None = None
    """A trace file (Azure CSV, Hetu-DiT text, rlsched CSV) replacing the scenario's arrivals and shapes, as
    ``simulate --trace`` replays it: the user's own traffic, × each load; the seeds draw only what the
    trace leaves out."""

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ConfigError("tune.seeds", "give at least one training seed")
        if max(self.seeds) >= VALIDATION_SEED_BASE or min(self.seeds) < 0:
            raise ConfigError("tune.seeds", f"training seeds must be in [0, {VALIDATION_SEED_BASE}); "
                              f"{VALIDATION_SEED_BASE}-{EVAL_SEED_BASE - 1} are validation seeds and "
                              f"seeds >= {EVAL_SEED_BASE} are kept for evaluation")
        if self.trials < 1:
            raise ConfigError("tune.trials", "must be >= 1")
        if not 0 <= self.explore <= 1:
            raise ConfigError("tune.explore", "must be in [0, 1]")
        if not self.rate_scales or min(self.rate_scales) <= 0:
            raise ConfigError("tune.rate_scales", "give at least one load, each > 0")
        if self.batch < 1:
            raise ConfigError("tune.batch", "must be >= 1")
        if self.init is not None and len(self.init) != SEARCH_DIM:
            raise ConfigError("tune.init", f"expected {SEARCH_DIM} numbers, got {len(self.init)}")

    def objective_id(self) -> dict[str, Any]:
        """What the scores mean: a study resumed under another objective would mix incomparable scores."""
        out = {"scenario": self.scenario, "seeds": list(self.seeds), "rate_scales": list(self.rate_scales),
               "duration_s": self.duration_s}
        if self.trace is not None:  # the content, not only the path: a trace rewritten in place is another objective
            out.update(trace=self.trace, trace_sha256=hashlib.sha256(Path(self.trace).read_bytes()).hexdigest())
        return out


@dataclass(frozen=True)
class TuneResult:
    """The best vector found and how it scored."""

    vector: np.ndarray
    score: float
    default_score: float
    scores: tuple[float, ...]
    """Score of every completed trial, in trial order."""

    @property
    def action(self) -> np.ndarray:
        return self.vector[:ACTION_DIM]


def default_vector() -> np.ndarray:
    return encode_params(ActionParams())


def deadline_vector() -> np.ndarray:
    """Earliest deadline first among savable requests: equal class weights and urgency
    exponent 1 make the utility w / (deadline − now); full caps, no admission wait."""
    return encode_params(ActionParams((1 / 3, 1 / 3, 1 / 3), (1.0, 1.0, 1.0, 1.0), 0.0, 1.0))


def policy_for(vector: np.ndarray) -> ProjectedPolicy:
    return ProjectedPolicy(decode_action(vector[:ACTION_DIM]), ProjectionConfig())


def objective(spec: TuneSpec, scenario: Scenario, vector: np.ndarray) -> float:
    """Mean weighted SLO attainment of the vector's policy over the spec's seeds and loads (in this process)."""
    total = 0.0
    for seed in spec.seeds:
        for rate_scale in spec.rate_scales:
            total += _attainment(spec, scenario, vector, seed, rate_scale)
    return total / (len(spec.seeds) * len(spec.rate_scales))


STAGE_ROUTER = "rlsched"
"""On a multi-replica scenario the tuned action runs on every replica behind rlsched's router
(what ``static:FILE@rlsched`` deploys)."""


def _attainment(spec: TuneSpec, scenario: Scenario, vector: np.ndarray, seed: int, rate_scale: float) -> float:
    if scenario.replicas:
        from rlsched.routing.routers import make_router
        from rlsched.sim.metrics import summarize_stage

        stage = prepare_stage(RunSpec(spec.scenario, "static", seed, rate_scale, spec.duration_s, trace=spec.trace),
                              scenario)
        stage.run([policy_for(vector) for _ in stage.replicas], make_router(STAGE_ROUTER))
        return float(summarize_stage(stage)["weighted_slo_attainment"])
    sim = prepare(RunSpec(spec.scenario, "static", seed, rate_scale, spec.duration_s, trace=spec.trace), scenario)
    return float(summarize(sim.run(policy_for(vector)))["weighted_slo_attainment"])


@lru_cache(maxsize=8)
def _scenario(name: str) -> Scenario:
    """Loaded once per worker process, not once per simulation."""
    return load_scenario(name)


def _run_one(task: tuple[TuneSpec, tuple[float, ...], int, float]) -> float:
    """One (vector, seed, load) simulation: the unit ``run_tasks`` fans out."""
    spec, vector, seed, rate_scale = task
    return _attainment(spec, _scenario(spec.scenario), np.asarray(vector, dtype=float), seed, rate_scale)


def score_vectors(spec: TuneSpec, vectors: list[np.ndarray], workers: int = 1,
                  ray: str | None = None) -> list[float]:
    """``objective`` of each vector, with all their seeds × loads simulations fanned out at once.

    Sums in the same order as ``objective``, so a score is bit-identical to it wherever it ran."""
    tasks = [(spec, tuple(float(x) for x in v), seed, rs) for v in vectors for seed in spec.seeds
             for rs in spec.rate_scales]
    values = list(run_tasks(_run_one, tasks, workers, ray))
    per = len(spec.seeds) * len(spec.rate_scales)
    scores = []
    for i in range(len(vectors)):
        total = 0.0
        for value in values[i * per:(i + 1) * per]:
            total += value
        scores.append(total / per)
    return scores


# ------------------------------------------------------------------ the study


def require_optuna() -> Any:
    try:
        import optuna
    except ImportError as exc:
        raise MissingExtra("rlsched tune", "optuna", "tune") from exc
    return optuna


def anchors(spec: TuneSpec) -> list[np.ndarray]:
    """Trials every study starts with, so the best is never worse than the known actions."""
    out = [default_vector(), deadline_vector()]
    if spec.init:
        out.append(np.asarray(spec.init, dtype=float))
    return out


def _params(vector: np.ndarray) -> dict[str, float]:
    return {name: float(x) for name, x in zip(PARAMS, vector)}


def _vector(params: dict[str, float]) -> np.ndarray:
    return np.array([params[name] for name in PARAMS], dtype=float)


def open_study(spec: TuneSpec, storage: str | None = None, study_name: str | None = None) -> Any:
    """Create the study, or load it to resume; ``storage=None`` keeps it in memory.

    The sampler is seeded from ``search_seed`` and the number of trials already in the
    study, so a resumed study does not replay the draws it started with, and the same
    history always leads to the same next proposals."""
    optuna = require_optuna()
    name = study_name or f"tune-{Path(spec.scenario).stem}"
    with storage_errors(storage):
        backend = open_storage(optuna, storage)
        done = _existing_trials(optuna, backend, name)
        seed = int(np.random.SeedSequence([spec.search_seed, done]).generate_state(1)[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            sampler = optuna.samplers.TPESampler(seed=seed,
                                                 n_startup_trials=max(1, round(spec.explore * spec.trials)),
                                                 multivariate=True, constant_liar=spec.batch > 1)
        study = optuna.create_study(storage=backend, study_name=name, direction="maximize", sampler=sampler,
                                    load_if_exists=True)
        _check_objective(study, spec, storage)
        _fail_stale(optuna, study)
        _enqueue_anchors(optuna, study, spec)
    return study


def open_storage(optuna: Any, storage: str | None) -> Any:
    """The Optuna storage behind a URL (``None``: in memory); one that does not open (an unknown
    scheme such as ``bogus://x``, a missing driver, a folder that does not exist) is a
    ``ConfigError`` naming ``--storage``, not a SQLAlchemy traceback."""
    if storage is None:
        return None
    try:
        return optuna.storages.get_storage(storage)
    except (ImportError, ValueError) as exc:  # a missing database driver, a malformed URL
        raise ConfigError("--storage", f"cannot open {storage!r}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    """The first line of an exception's message (SQLAlchemy's carry a background URL after it)."""
    text = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


@contextlib.contextmanager
def storage_errors(storage: str | None) -> Iterator[None]:
    """Turn the storage's own failures into a ``ConfigError`` naming ``--storage``: SQLAlchemy's
    (a database that cannot be opened, a locked SQLite file) and a trial closed under this
    process by another one."""
    import sqlalchemy.exc

    optuna = require_optuna()
    try:
        yield
    except sqlalchemy.exc.SQLAlchemyError as exc:
        raise ConfigError("--storage", f"cannot use {storage!r}: {_reason(exc)}") from None
    except optuna.exceptions.UpdateFinishedTrialError as exc:
        raise ConfigError("--storage", f"{storage}: {exc}; another process closed this tune's trial: two "
                                       "`rlsched tune` ran one study at once") from None


def sqlite_file(storage: str | None) -> Path | None:
    """The database file of a ``sqlite:///PATH`` URL (None for other storages and in-memory SQLite)."""
    if not storage or not storage.startswith("sqlite:"):
        return None
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        database = make_url(storage).database
    except ArgumentError as exc:
        raise ConfigError("--storage", f"cannot open {storage!r}: {_reason(exc)}") from None
    return None if not database or database == ":memory:" else Path(database)


@contextlib.contextmanager
def study_lock(storage: str | None) -> Iterator[None]:
    """Hold ``DB.lock`` beside a SQLite study for the whole search, so a second ``rlsched tune``
    on the same file is refused at once. Two at once used to run more trials than asked,
    mark each other's running trials failed, or stop on "database is locked". The lock is
    the OS's (``flock``): a killed tune releases it, and its study resumes."""
    path = sqlite_file(storage)
    if path is None:
        yield
        return
    import fcntl

    if not path.parent.is_dir():
        raise ConfigError("--storage", f"cannot open {storage!r}: folder {path.parent} does not exist")
    lock = path.with_name(path.name + ".lock")
    check_output(path, "--storage")  # a FIFO or a link as the study: refused, not opened
    try:
        fh = stream_open(lock, "a", "--storage")
    except OSError as exc:
        raise ConfigError("--storage", f"cannot open {storage!r}: {exc.strerror or exc} ({lock})") from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError("--storage", f"{storage} is in use by another `rlsched tune` (lock {lock}); wait for "
                                           "it to finish (rerunning it then resumes the study), or give another "
                                           "--storage") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _existing_trials(optuna: Any, storage: Any, name: str) -> int:
    if storage is None:
        return 0
    try:
        return len(optuna.load_study(study_name=name, storage=storage).trials)
    except KeyError:  # no such study yet
        return 0


def _check_objective(study: Any, spec: TuneSpec, storage: str | None) -> None:
    saved = study.user_attrs.get("objective")
    if saved is None:
        study.set_user_attr("objective", spec.objective_id())
    elif saved != spec.objective_id():
        raise ConfigError("--study-name", f"study {study.study_name!r} in {storage} was tuned for {saved}, not "
                                          f"{spec.objective_id()}; give another --study-name or --storage")


def _fail_stale(optuna: Any, study: Any) -> None:
    """Trials left running by a stopped tune never finish; marking them failed lets TPE ignore them."""
    for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        study.tell(trial.number, state=optuna.trial.TrialState.FAIL)


def _enqueue_anchors(optuna: Any, study: Any, spec: TuneSpec) -> None:
    """Enqueue each anchor the study has neither scored nor queued (a resumed study keeps its own)."""
    TS = optuna.trial.TrialState
    scored = [t.params for t in study.get_trials(deepcopy=False, states=(TS.COMPLETE,))]
    queued = [t.system_attrs.get("fixed_params", {}) for t in study.get_trials(deepcopy=False, states=(TS.WAITING,))]
    seen = [_vector(params) for params in scored + queued if set(params) == set(PARAMS)]
    for vector in anchors(spec):
        if not any(np.array_equal(vector, other) for other in seen):
            study.enqueue_trial(_params(vector))


def _distributions(optuna: Any) -> dict[str, Any]:
    return {name: optuna.distributions.FloatDistribution(-1.0, 1.0) for name in PARAMS}


def _completed(optuna: Any, study: Any) -> list[Any]:
    return study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))


def search(spec: TuneSpec, on_trial: Callable[[int, float, float], None] | None = None, workers: int = 1,
           ray: str | None = None, storage: str | None = None, study_name: str | None = None) -> TuneResult:
    """Run the study until it holds ``spec.trials`` completed trials; ``on_trial(done, score, best)``
    reports each one (``done``: completed trials so far, those of a resumed study included).
    ``workers``/``ray`` say where simulations run (``rlsched.parallel``)."""
    from rlsched.agents.reproducible import seed_everything

    optuna = require_optuna()
    seed_everything(spec.search_seed, torch=False)  # the sampler has its own seed; nothing may draw from the globals
    with study_lock(storage):
        study = open_study(spec, storage, study_name)
        dists = _distributions(optuna)
        with storage_errors(storage):
            done = len(_completed(optuna, study))
            while done < spec.trials:
                asked = [study.ask(dists) for _ in range(min(spec.batch, spec.trials - done))]
                scores = score_vectors(spec, [_vector(t.params) for t in asked], workers, ray)
                for trial, score in zip(asked, scores):
                    study.tell(trial, score)
                    done += 1
                    if on_trial:
                        on_trial(done, score, study.best_value)
            return result_of(optuna, study)


def result_of(optuna: Any, study: Any) -> TuneResult:
    """Best completed trial (the earliest on ties, so the anchors win ties) and the default action's score."""
    trials = sorted(_completed(optuna, study), key=lambda t: t.number)
    best = max(trials, key=lambda t: t.value)
    default = default_vector()
    default_score = next((t.value for t in trials if np.array_equal(_vector(t.params), default)), float("nan"))
    return TuneResult(_vector(best.params), best.value, default_score, tuple(t.value for t in trials))


def to_json(spec: TuneSpec, result: TuneResult, study: str | None = None) -> dict[str, Any]:
    """What ``static:PATH`` reads (``action``), plus provenance."""
    return {"scenario": spec.scenario, "seeds": list(spec.seeds), "rate_scales": list(spec.rate_scales),
            "duration_s": spec.duration_s, **({"trace": spec.trace} if spec.trace is not None else {}),
            "trials": len(result.scores), "search_seed": spec.search_seed,
            "sampler": "optuna TPE", "batch": spec.batch, "study": study,
            "score": result.score, "default_score": result.default_score,
            "action": [round(float(x), 6) for x in result.action],
            "params": dataclasses.asdict(decode_action(result.action))}


# ------------------------------------------------------------------ CLI
