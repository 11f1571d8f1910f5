"""Online calibration: the cost profile refitted from what the GPU is seen to take.

Every decision reads a profile fitted offline; the GPU a user serves on differs (``rlsched.sim.truth``
measures the harm). ``CostCalibrator`` watches each batch's duration from start to end and refits the profile's
time coefficients per model:

* **Time.** A batch's duration under the current cost splits into ``O`` (the engine's overheads, which
  the profile does not hold), the attention part ``A`` (the ``c·ΣQ`` term over the steps), the fixed part
  ``F`` (what the step's floor and per-forward terms add: the time that does not grow with the batch's
  tokens), the encode ``E`` and the VAE decode ``D`` of the members that encode or decode in this batch (all
  of them in request mode; at their first and last step in step mode), the sequence- and CFG-parallel
  communication ``C`` (a layout of several GPUs: the all-to-alls and the guidance exchange) and the rest ``L``
  (the linear step terms). The observed duration is fitted as ``O + θ₁·L + θ₂·A + θ₃·F + θ₄·E + θ₅·D + θ₆·C``
  by weighted least squares on relative errors (a 30-minute video and a 3-second image count alike), so a
  uniformly slower GPU gives every θ alike, an attention kernel that scales worse than the profile's gives
  ``θ₂ > θ₁``, and a GPU of another *form* gives the term that scales apart its own θ: its FLOPs scaled but
  not its kernel launches (an A100 under an H200 profile, or a derived prior's fixed cost off: ``θ₃``), a VAE
  decode that is memory-bandwidth bound where the steps are FLOP bound (an L40S's 864 GB/s is a smaller share
  of its 362 TFLOPS than an H100's 3,350 GB/s of its 989: ``θ₅``), a text encoder on another stack (``θ₄``),
  PCIe where the profile had NVLink (``θ₆``). The profile's own form, every term re-weighted, rather than a
  residual model that would need features the scheduler does not have. What the batches cannot tell apart
  stays with θ₁ by the prior: in request mode a request's decode grows with its pixels as its linear step
  terms do, and on one layout the SP all-to-alls grow with the tokens as the linear terms do, so there only
  step mode (encode at the first step, decode at the last) or batches of several sizes separate them; a
  one-GPU layout has no communication at all. A form term (``FORMS``) is published as its ratio to θ₁ only
  once that ratio is off 1 by more than ``FORM_TOLERANCE`` and more than ``SIGNIFICANCE`` standard errors, so
  a GPU of the profile's form publishes the three scales it always did.
* **Memory** is learned from the two memory facts the engine has: the device's total memory, read before
  the first decision (``observe_capacity``: a GPU smaller than the profile's), and a batch that failed out
  of memory (``observe_oom``). That batch's true memory was more than the GPU holds, so the model's memory
  scale is at least the one at which its believed memory reaches the GPU's; it is raised to that bound and
  ``OOM_MARGIN`` more at once (a new version; no minimum of evidence: an OOM costs a whole batch), unless
  the batch was already believed too large (a request no GPU holds, started because nothing else could).
  No engine reads a batch's peak memory (NVML "used" holds PyTorch's cached blocks, near the peak of any
  batch seen so far), so nothing lowers it, and a batch that ran tells nothing — in the simulator too,
  which calibrates on what the engine observes.

It is bounded (every scale in ``[LOW, HIGH]``), robust (Huber weights once the fit has evidence; the first
``warmup`` batches of a model — compilation, autotuning — are not counted), anchored on the shipped
profile (a ridge prior of weight ``prior`` — a fiftieth of one batch's evidence by default, which decides
only what the batches cannot tell apart — pulls every other term's scale to the time scale, and
``ANCHOR`` of it the time scale to 1; with an attention ×2 truth, a prior of 0.1 took up to 232 batches on
``default`` and 533 per replica on ``qwen-image-8gpu`` to come within 5 % for good, since most batches there
hold little attention; 0.02 took 31 and 108 with the two scales, 150 and 543 (3 of 175 runs never) since the
fixed scale joined them (``scripts/belief_harm.py``) — its decisions within 2 points of the true profile's
all the same — and with 5 % noise on every duration fits four shapes as well as 0.1; one shape is left to
the prior at any weight), and quiet: a model's scales move only after ``min_batches``
batches and only when one changes by more than ``MOVE`` (a form term's applied ratio by more than
``MOVE_FORM``); each move is a new ``version`` of the
calibrated ``cost`` (the same class and layout as the profile, so every consumer reads it unchanged).
Old evidence fades (``forget`` per batch) so the fit follows a drifting GPU. Exact observations (the
profile is the truth) never move it.

Numbers the scheduler takes to be true of every request are unchanged: tokens, shapes, deadlines.
A state that adopts a new version re-costs its waiting and running records (``Recosting``, the one rule of the
simulator and the engine plugin): all at once, its journal restarted so a policy's queue index re-ranks them
once — or, in the engine with more live records than one ``slice``, memory at once and time a slice at a time
between decisions, so no decision pays for a version.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlsched.sim.cost import CostModel
from rlsched.sim.layout import LayoutCost
from rlsched.sim.request import RUNNING, WAITING, RequestRecord
from rlsched.sim.truth import MEMORY_TERMS, rescaled
from rlsched.sim.view import ENQUEUED, Journal

LOW, HIGH = 0.25, 4.0
"""Bounds on every scale: a profile off by more than 4x is the wrong profile, not one to calibrate."""
MOVE = 0.02
"""A scale moves (a new version) only when it changes by more than 2 %: decisions do not churn on noise."""
HUBER = 0.25
"""Relative residual past which an observation is down-weighted (a batch 25 % off the current fit)."""
ROOM_HIGH = 1000.0
"""Most the device's memory may scale activations (``observe_capacity``): past it no batch fits anyway (an
H200 profile's 75 GB of room down to 75 MB), and a published scale stays a number a router can check."""
ANCHOR = 0.01
"""Share of ``prior`` that pulls the time scale itself to 1 (the ties of the attention and fixed scales to it
take all of it): the batches always tell the overall scale, and a full-weight anchor leant on the one
direction they cannot tell apart (fixed against linear time, when the batches are alike), so a GPU uniformly
1.3x slower came out 1.28x in its linear and 1.35x in its fixed terms."""
MOVE_FORM = 0.05
"""A form term's ratio (fixed, encode, decode, communication) alone moves a version only past 5 %: a small share
of most batches, it wanders on noise."""
FORM_TOLERANCE = MOVE
"""A form ratio within 2 % of 1 is 1: the profile's form holds, and the calibration is the three scales it
published before the form terms existed (a uniformly slower GPU's fit leaves θ₃…θ₆ a few tenths of a percent
off θ₁ from the weak prior)."""
SIGNIFICANCE = 2.0
"""A form term applies its own scale only when it differs from the time scale by this many standard errors
(``_solve``): exact observations have none, so there only ``FORM_TOLERANCE`` gates it."""
OOM_MARGIN = 0.05
"""An OOM raises the memory scale 5 % past the least that explains it: the bound alone would leave the next
batch of the same size believed to fit exactly, and fail again."""


TERMS = ("linear", "attention", "fixed", "encode", "decode", "comm")
"""The parts of a batch's time that the fit scales, θ₁…θ₆ (``CostCalibrator.parts``); θ₂… are tied to θ₁ by the
prior, θ₁ to 1 (``ANCHOR``)."""
FORMS = ("fixed", "encode", "decode", "comm")
"""The terms published as a ratio to θ₁ only when off 1 by more than ``FORM_TOLERANCE`` (``scales``), in
``rlsched.sim.truth.rescaled``'s order after ``(time, quadratic, memory)``."""


@dataclass
class _ModelFit:
    """The evidence on one model: ``S θ = b`` of the weighted least squares."""

    seen: int = 0
    counted: int = 0
    """Batches in the fit (``seen`` less the warm-up and the unreadable)."""
    s: np.ndarray = field(default_factory=lambda: np.zeros((len(TERMS), len(TERMS))))
    """Σ w·x̃x̃ᵀ, x̃ = (L, A, F, E, D, C) / (L + A + F + E + D + C)."""
    b: np.ndarray = field(default_factory=lambda: np.zeros(len(TERMS)))
    yy: float = 0.0
    """Σ w·ỹ² (the residual's variance, for the form terms' standard errors)."""
    n: float = 0.0
    """Σ w (faded as the rest)."""
    theta: tuple[float, ...] = (1.0,) * len(TERMS)
    """(θ₁ … θ₆) in the current version (relative to the shipped profile; ``TERMS``)."""
    forms: tuple[float, ...] = (1.0,) * len(FORMS)
    """The ratios θ₃…θ₆ / θ₁ that the current version applies: 1 where the fit does not tell the term from
    θ₁ (``_forms``)."""
    moved_at: int = 0
    """Batches seen when its scales last moved (0: never)."""
    moves: list[tuple[int, float, float]] = field(default_factory=list)
    """Every move: (batches seen, θ₁, θ₂) — how fast it converged (``summary``)."""
    memory: float = 1.0
    """Memory scale: 1 until an OOM raises it (``observe_oom``; ``scales``' third term, published)."""


class CostCalibrator:
    """The profile refitted online (see the module docstring): ``observe`` each batch, read ``cost``."""

    def __init__(self, cost: CostModel, *, warmup: int = 2, min_batches: int = 8, prior: float = 0.02,
                 forget: float = 0.995) -> None:
        self.base = cost
        """The shipped profile (the prior)."""
        self.cost = cost
        """The calibrated profile of the current ``version`` (the shipped one at version 0)."""
        self.version = 0
        self.published: tuple[int, tuple[tuple[Any, ...], ...]] | None = None
        """What a replica publishes of this version (``routing.views.calibration_of``): the version and per
        model ``(name, time, quadratic, memory[, fixed, encode, decode, comm])``, sorted; None before the first
        move."""
        self.warmup, self.min_batches, self.prior, self.forget = warmup, min_batches, prior, forget
        self.room = 1.0
        """The profile's room for activations over the device's (``observe_capacity``; 1: as believed)."""
        self._fits: dict[str, _ModelFit] = {}
        self._applied: dict[str, tuple[float, ...]] = {}
        """Per model, the scales of ``TERMS`` that ``cost`` applies over the shipped profile (a form term
        within ``FORM_TOLERANCE`` applies θ₁, not its own θ); absent: all 1."""
        self._tie = _ties(prior)
        self._derived(cost)

    # ------------------------------------------------------------------ reading a batch
    def _derived(self, cost: CostModel) -> None:
        # the same cost without its attention term, without its fixed step terms, and (on several GPUs) without
        # its SP/CFG communication; the overheads, encode and decode are read off the batch's records
        self._no_attention = rescaled(cost, {m: (1.0, 0.0, 1.0) for m in cost.models}, "no-attention")
        self._no_fixed = rescaled(cost, {m: (1.0, 1.0, 1.0, 0.0) for m in cost.models}, "no-fixed")
        self._no_comm = (rescaled(cost, {m: (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0) for m in cost.models}, "no-comm")
                         if isinstance(cost, LayoutCost) and cost.layout.gpus > 1 else None)

    def parts(self, batch: Sequence[RequestRecord], step_mode: bool, overhead_ms: float, overhead_ms_per_mpx: float,
              steps_done: Sequence[int]) -> tuple[float, ...]:
        """``(O, L, A, F, E, D, C)`` of ``batch`` (records at the current version) relative to the shipped
        profile: its predicted duration now is ``O + θ₁·L + θ₂·A + θ₃·F + θ₄·E + θ₅·D + θ₆·C`` (``TERMS``).
        ``O`` is the engine's overheads, ``E`` and ``D`` the members' encode and decode in this batch (at the
        first and the last step in step mode), ``C`` the SP/CFG communication, ``A`` the attention and ``F``
        the fixed step terms' share, ``L`` the rest (the linear step terms)."""
        args = (step_mode, overhead_ms, overhead_ms_per_mpx, steps_done)
        full = self.cost.batch_duration(batch, *args)
        overhead, encode, decode = _ends(batch, step_mode, overhead_ms, overhead_ms_per_mpx, steps_done)
        attention = max(full - self._no_attention.batch_duration(batch, *args), 0.0)
        fixed = max(full - self._no_fixed.batch_duration(batch, *args), 0.0)
        comm = 0.0 if self._no_comm is None else max(full - self._no_comm.batch_duration(batch, *args), 0.0)
        linear = max(full - overhead - attention - fixed - encode - decode - comm, 0.0)
        applied = self._applied.get(batch[0].request.model, _ONES)
        return overhead, *(v / t for v, t in zip((linear, attention, fixed, encode, decode, comm), applied))

    # ------------------------------------------------------------------ evidence
    def _fit(self, model: str) -> _ModelFit:
        fit = self._fits.get(model)
        if fit is None:
            fit = self._fits[model] = _ModelFit()
        return fit

    def observe(self, model: str, parts: tuple[float, ...], seconds: float) -> bool:
        """A batch of ``model`` whose ``parts`` (``parts``' ``(O, L, A, F, E, D, C)``) took ``seconds``; True
        when the calibrated cost moved."""
        overhead, *terms = parts
        total = sum(terms)
        fit = self._fit(model)
        fit.seen += 1
        if fit.seen <= self.warmup or not total > 0 or not math.isfinite(seconds) or seconds < 0:
            return False
        x, y = np.array(terms) / total, (seconds - overhead) / total
        w = 1.0
        fit.counted += 1
        if fit.counted > self.min_batches:
            residual = abs(y - sum(t * v for t, v in zip(fit.theta, terms)) / total)
            w = 1.0 if residual <= HUBER else HUBER / residual
        r = self.forget
        fit.s = r * fit.s + w * np.outer(x, x)
        fit.b = r * fit.b + (w * y) * x
        fit.yy, fit.n = r * fit.yy + w * y * y, r * fit.n + w
        if fit.counted < self.min_batches:
            return False
        theta, forms = _solve(fit, self._tie, self.prior * ANCHOR)
        return self._move(model, fit, theta, forms, fit.memory)

    def observe_oom(self, batch: Sequence[RequestRecord]) -> bool:
        """``batch`` (records at the current version) failed out of memory; True when the calibrated cost
        moved (its model's memory scale raised: the module docstring)."""
        cost, model = self.cost, batch[0].request.model
        activations = sum(r.mem_gb for r in batch)
        if not activations > 0:
            return False
        fit = self._fit(model)
        scale = fit.memory * self.room  # the memory scale ``cost`` holds now
        bound = scale * (cost.gpu_memory_gb - cost.weights_gb) / activations
        if bound <= scale:  # already believed not to fit (a request no GPU holds, run as nothing else could):
            return False    # the belief explains the OOM; raising it would creep at each such request
        return self._move(model, fit, fit.theta, fit.forms, _clip(bound * (1 + OOM_MARGIN) / self.room))

    def observe_capacity(self, total_gb: float) -> bool:
        """The GPU's memory as the device reports it (NVML's total: a hardware fact, unlike its "used"). When
        it is less than the profile's by more than ``MOVE``, every model's memory scale is multiplied by
        ``room``: the room for activations the profile believes over the room there is, ``(C − W) / (total −
        W)`` (W the weights), so exactly the batches that fit the device fit the calibrated cost — one
        number the replica already publishes, bounded by ``ROOM_HIGH``, not ``HIGH`` (a hardware fact, not a
        fit). True when
        the cost moved. A device larger than the profile's is left as it is: the profile's capacity may hold
        a reserve the engine keeps."""
        base = self.base
        if not (math.isfinite(total_gb) and base.weights_gb < total_gb < base.gpu_memory_gb * (1 - MOVE)):
            return False
        room = min((base.gpu_memory_gb - base.weights_gb) / (total_gb - base.weights_gb), ROOM_HIGH)
        if abs(room / self.room - 1) <= MOVE:
            return False
        self.room = room
        self._new_version()
        return True

    # ------------------------------------------------------------------ versions
    def _move(self, model: str, fit: _ModelFit, theta: tuple[float, ...], forms: tuple[float, ...],
              memory: float) -> bool:
        # what the cost applies, not the fit's every θ: a form term the fit cannot tell from θ₁ moves nothing
        old = (*fit.theta[:2], *fit.forms, fit.memory)
        new = (*theta[:2], *forms, memory)
        if all(abs(n / o - 1) <= limit for n, o, limit in zip(new, old, _LIMITS)):
            return False
        fit.theta, fit.forms, fit.memory, fit.moved_at = theta, forms, memory, fit.seen
        fit.moves.append((fit.seen, theta[0], theta[1]))
        self._new_version()
        return True

    def _new_version(self) -> None:
        self.version += 1
        scales = self.scales()
        self.cost = rescaled(self.base, scales, f"calibrated-v{self.version}")
        self.published = self.version, tuple((m, *s) for m, s in sorted(scales.items()))
        self._applied = {m: _applied(s) for m, s in scales.items()}
        self._derived(self.cost)

    def scales(self) -> dict[str, tuple[float, ...]]:
        """Per model ``(time, quadratic, memory[, fixed, encode, decode, comm])`` scales of the current version
        over the shipped profile (``rlsched.sim.truth.rescaled``'s terms: time scales every time coefficient,
        quadratic the attention term once more, and each of ``FORMS`` its part once more — 1 when within
        ``FORM_TOLERANCE`` of θ₁, and left off the end when it and those after it are 1, so a fit of the
        profile's form publishes the three scales it always did; memory holds the device's ``room``)."""
        out: dict[str, tuple[float, ...]] = {}
        for m in self.base.models:
            f = self._fits.get(m) or _ModelFit()
            forms = list(f.forms)
            while forms and forms[-1] == 1.0:
                forms.pop()
            s = (f.theta[0], f.theta[1] / f.theta[0], f.memory * self.room, *forms)
            if s != (1.0, 1.0, 1.0):
                out[m] = s
        return out

    def summary(self) -> dict[str, Any]:
        """Version, the device's memory ``room``, per-model scales (memory: the one decisions use, ``room``
        included) and evidence (batches seen), for logs and results."""
        return {"version": self.version, "room": self.room, "models": {
            m: {"time": f.theta[0], "attention": f.theta[1], **dict(zip(FORMS, f.theta[2:])),
                "memory": f.memory * self.room, "batches": f.seen,
                "last_moved_at_batch": f.moved_at, "moves": list(f.moves)}
            for m, f in self._fits.items()}}


def refresh(records: Iterable[RequestRecord], cost: CostModel) -> None:
    """Waiting and running records' cost figures at ``cost`` (a new calibration version)."""
    for rec in records:
        if rec.status not in (WAITING, RUNNING):
            continue
        fresh = cost.record(rec.request)
        _take_times(rec, fresh)
        rec.mem_gb = fresh.mem_gb


def _take_times(rec: RequestRecord, fresh: RequestRecord) -> None:
    """``rec``'s time figures (encode, decode, standalone work, step) from ``fresh``, the same shape at another cost."""
    rec.encode_s, rec.decode_s, rec.work_s, rec.step_s = fresh.encode_s, fresh.decode_s, fresh.work_s, fresh.step_s


class Recosting:
    """How a state takes a new cost (a calibration version): the one rule of the simulator and the engine plugin.

    * **At once** (``slice`` None, the simulator; or no more live records than ``slice``): every live record
      re-costed (``refresh``) and the journal restarted, so every reader of it (a policy's ``QueueIndex``)
      re-ranks the queue at its next read — O(queue) in that read.
    * **In slices** (the engine plugin, more live records than ``slice``): what a version costs must not land
      in a decision (issue 47: at 4,096 waiting, each version's re-ranking overran the decision budget and
      handed the call to the fallback). Memory at once, when the version moved it: each live record's
      ``mem_gb`` (one figure that no reader ranks on: nobody re-ranks), so every admission check reads the
      current calibrated memory. The time figures ``advance`` ``slice`` records at a time between decisions
      (oldest first: the waiting queue's order), each waiting one journaled as re-enqueued, which a reader
      re-ranks alone: the next decision replays O(slice) entries, not O(queue). A version that comes during a
      pass starts a new pass when this one ends, and a record that arrives during a pass takes its times
      (``joined``): the live records hold two versions' times at most, so a policy's groups by standalone
      work split in two at most (arrivals at every new version's times split them in as many as came, and
      made the candidate policies' work grow with the queue).

    ``recosted`` counts the records whose time figures were re-costed (at once or in slices).
    """

    def __init__(self, journal: Callable[[], Journal], live: Callable[[], Collection[RequestRecord]],
                 slice: int | None = None) -> None:
        self._journal, self._live, self.slice = journal, live, slice
        self.recosted = 0
        self._target: CostModel | None = None
        """The cost of the pass in progress (None: no pass)."""
        self._newest: CostModel | None = None
        self._pending: list[RequestRecord] = []
        """The records the pass has still to re-cost, the next one last."""
        self._figures: dict[int, tuple[CostModel, dict[tuple, RequestRecord]]] = {}
        """Cost figures by cost (the newest two) and request shape (``_shape``)."""

    @property
    def pending(self) -> int:
        """Records the pass in progress has still to re-cost."""
        return len(self._pending)

    @property
    def passing(self) -> bool:
        """A pass is in progress (``advance`` has work: this pass's records, or the next pass's)."""
        return self._target is not None

    def adopt(self, old: CostModel, cost: CostModel) -> None:
        """Decide on ``cost`` from now on (the state's cost was ``old``)."""
        live = self._live()
        if self.slice is None or (self._target is None and len(live) <= self.slice):
            refresh(live, cost)
            self._journal().restart()
            self.recosted += len(live)
            return
        if any(_memory(m) != _memory(old.models.get(name)) for name, m in cost.models.items()):
            for rec in live:
                if rec.status in (WAITING, RUNNING):
                    rec.mem_gb = self._shape(cost, rec).mem_gb
        self._newest = cost
        if self._target is None:
            self._start(cost)

    def joined(self, rec: RequestRecord) -> None:
        """``rec`` was just made at the state's (newest) cost: during a pass its time figures are the pass's, as
        every record it has reached (so the live records hold two versions' times at most; memory the newest)."""
        target = self._target
        if target is not None and target is not self._newest:
            _take_times(rec, self._shape(target, rec))

    def advance(self) -> int:
        """Re-cost the time figures of up to ``slice`` records of the pass in progress; how many."""
        done, journal = 0, None
        while self._target is not None and done < (self.slice or 0):
            if not self._pending:  # the pass is over: the next one, if a version came during it
                ended, self._target = self._target, None
                if self._newest is not ended:
                    self._start(self._newest)
                continue
            rec = self._pending.pop()
            if rec.status not in (WAITING, RUNNING):
                continue
            _take_times(rec, self._shape(self._target, rec))
            if rec.status == WAITING:  # a reader re-ranks it alone (a re-enqueue replaces its entry)
                journal = journal or self._journal()
                journal.append(ENQUEUED, rec)
            done += 1
        self.recosted += done
        return done

    def _start(self, cost: CostModel | None) -> None:
        self._target = cost
        self._pending = list(self._live()) if cost is not None else []
        self._pending.reverse()  # popped from the end: oldest first

    def _shape(self, cost: CostModel, rec: RequestRecord) -> RequestRecord:
        """``cost``'s figures for ``rec``'s shape (``Request.key``: every field ``CostModel.record`` reads),
        computed once per shape and cost (the two costs in use: a pass's and the newest)."""
        held = self._figures.get(id(cost))
        if held is None or held[0] is not cost:
            if len(self._figures) >= 2:
                self._figures.pop(next(iter(self._figures)))
            held = self._figures[id(cost)] = (cost, {})
        figures, key = held[1], rec.request.key()
        fresh = figures.get(key)
        if fresh is None:
            fresh = figures[key] = cost.record(rec.request)
        return fresh


def _memory(m: Any) -> tuple[float, ...] | None:
    return None if m is None else tuple(getattr(m, k) for k in MEMORY_TERMS)


def _ties(prior: float) -> np.ndarray:
    """The ridge prior's matrix: ``prior``·(``ANCHOR``·(θ₁ − 1)² + Σⱼ (θⱼ − θ₁)²) is θᵀPθ − 2·``prior``·``ANCHOR``·θ₁
    + const."""
    n = len(TERMS)
    tie = np.zeros((n, n))
    for j in range(1, n):
        tie[0, 0] += prior
        tie[j, j] += prior
        tie[0, j] = tie[j, 0] = -prior
    tie[0, 0] += prior * ANCHOR
    return tie


def _solve(fit: _ModelFit, tie: np.ndarray, anchor: float) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """(θ, the form ratios to apply) of ``fit``: θ = argmin Σ w(ỹ − θ·x̃)² + prior·(``ANCHOR``·(θ₁ − 1)² + Σⱼ₌₂..₆
    (θⱼ − θ₁)²), each θ clipped to [LOW, HIGH] (``tie``: ``_ties(prior)``; ``anchor``: prior·``ANCHOR``); a
    form ratio θⱼ/θ₁ (j ≥ 3) is applied only when it is off 1 by more than ``FORM_TOLERANCE`` and θⱼ − θ₁ by
    more than ``SIGNIFICANCE`` standard errors, else 1.

    The prior pulls the time scale to the profile's and every other term's scale to the time scale: where the
    batches seen do not tell the terms apart (one shape, or every step on the floor; no SP, so no
    communication), a GPU that is uniformly slower stays uniformly slower rather than half-way back to the
    profile's form. Every term's tie weighs the same: stronger on the fixed scale (tried up to 50 times)
    slowed a GPU of another form (an A100 under an H200 profile: fixed ×0.26 of time) for hundreds of batches,
    its attention held at the bound. The standard errors keep the terms with little evidence quiet: a batch's
    decode is in one step of fifty in step mode, and with 5 % noise on every duration a uniformly slower
    GPU's decode ratio wandered 6 % off 1 (a version at each wander) before they gated it."""
    inverse = np.linalg.inv(fit.s + tie)
    rhs = fit.b.copy()
    rhs[0] += anchor
    raw = inverse @ rhs
    theta = tuple(_clip(float(t)) for t in raw)
    ratios = [t / theta[0] for t in theta[2:]]
    if all(abs(r - 1.0) <= FORM_TOLERANCE for r in ratios):  # the usual case: no standard error needed
        return theta, _ONES[2:]
    rss = max(fit.yy - 2 * float(raw @ fit.b) + float(raw @ fit.s @ raw), 0.0)
    variance = rss / max(fit.n - len(TERMS), 1.0)
    forms = []
    for j, ratio in enumerate(ratios, 2):
        spread = variance * (inverse[j, j] + inverse[0, 0] - 2 * inverse[0, j])
        off = abs(ratio - 1.0) > FORM_TOLERANCE and (raw[j] - raw[0]) ** 2 > SIGNIFICANCE ** 2 * spread
        forms.append(ratio if off else 1.0)
    return theta, tuple(forms)


def _clip(v: float) -> float:
    return min(max(v, LOW), HIGH)


def _ends(batch: Sequence[RequestRecord], step_mode: bool, overhead_ms: float, overhead_ms_per_mpx: float,
          steps_done: Sequence[int]) -> tuple[float, float, float]:
    """(overheads, encode, decode) of ``batch`` as ``CostModel.batch_duration`` adds them (``cost._wave``):
    every member's in request mode; in step mode a member's encode at its first step, its decode and host time
    at its last."""
    overhead, encode, decode = overhead_ms / 1e3, 0.0, 0.0
    for r, done in zip(batch, steps_done):
        q = r.request
        if not step_mode or done == 0:
            encode += r.encode_s
        if not step_mode or done + 1 == q.num_inference_steps:
            decode += r.decode_s
            overhead += q.height * q.width * q.num_frames / 1e6 * overhead_ms_per_mpx / 1e3
    return overhead, encode, decode


def _applied(scales: tuple[float, ...]) -> tuple[float, ...]:
    """The scales of ``TERMS`` that ``rescaled(…, scales)`` applies to a model (``CostCalibrator.scales``)."""
    time, quad, _, *forms = scales
    forms += [1.0] * (len(FORMS) - len(forms))
    return (time, time * quad, *(time * f for f in forms))


_ONES = (1.0,) * len(TERMS)
_LIMITS = (MOVE, MOVE, *(MOVE_FORM,) * len(FORMS), MOVE)
"""How far each of θ₁…θ₆ and the memory scale must change to move a version (``_move``)."""


__all__ = ["HIGH", "LOW", "MOVE", "OOM_MARGIN", "ROOM_HIGH", "CostCalibrator", "Recosting", "refresh"]
