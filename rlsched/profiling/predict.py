"""``rlsched profile predict``: what a profile says one request (or a batch) costs, alone,
on one GPU or split over ``--sp`` GPUs with sequence parallelism, and over two CFG groups
with ``--cfg-parallel 2`` (or ``--sp u2c2``; the profile's ``cfg_parallel`` block, derived).

Latency is the request-mode wave of ``CostModel.batch_duration_sp``: encode, every denoise
step (split over the SP group), VAE decode; no queueing and no engine overhead. Memory is
per GPU: the profile's weights (replicated on every GPU of the group) plus each request's
activations / degree and its decode peak. Inputs are checked here, each error a
``ConfigError`` naming the flag.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlsched import bounds
from rlsched.errors import ConfigError, InvalidRequest
from rlsched.sim.cost import PROFILE_DIR, CostModel, SPLayout, load_profile
from rlsched.sim.request import Request

LIMITS = {"--height": bounds.MAX_SIDE_PX, "--width": bounds.MAX_SIDE_PX, "--frames": bounds.MAX_FRAMES,
          "--steps": bounds.MAX_STEPS, "--batch": bounds.MAX_NUM_SEQS}
"""Largest value of each integer flag (``rlsched.bounds``: past any real deployment; keeps every figure finite)."""
MAX_SP_DEGREE = 4096


@dataclass(frozen=True, slots=True)
class Prediction:
    profile: str
    gpu: str
    model: str
    height: int
    width: int
    frames: int
    steps: int
    batch: int
    cfg: bool
    layout: SPLayout
    latency_s: float
    """Standalone seconds of the batch: encode + steps x step + decode (no queueing)."""
    step_s: float
    peak_gb_per_gpu: float
    gpu_memory_gb: float

    def as_dict(self) -> dict[str, Any]:
        return {"profile": self.profile, "gpu": self.gpu, "model": self.model, "height": self.height,
                "width": self.width, "frames": self.frames, "steps": self.steps, "batch": self.batch,
                "cfg": self.cfg, "sp": str(self.layout), "sp_degree": self.layout.degree,
                "cfg_parallel": self.layout.cfg, "gpus": self.layout.gpus,
                "latency_s": self.latency_s, "step_s": self.step_s, "peak_gb_per_gpu": self.peak_gb_per_gpu,
                "gpu_memory_gb": self.gpu_memory_gb, "fits_in_memory": self.peak_gb_per_gpu <= self.gpu_memory_gb}


def int_flag(flag: str, value: object) -> int:
    """``value`` (as typed on the command line) as an integer in [1, LIMITS[flag]]."""
    text = str(value).strip()
    try:
        n = int(text)
    except ValueError:
        raise ConfigError(flag, f"must be a whole number, not {value!r}") from None
    limit = LIMITS[flag]
    if not 1 <= n <= limit:
        raise ConfigError(flag, f"must be between 1 and {limit}, not {n}")
    return n


def _cfg_flag(value: object) -> int:
    text = str(value).strip()
    if text not in ("1", "2"):
        raise ConfigError("--cfg-parallel", f"must be 1 or 2 (one GPU group per guidance branch), not {value!r}")
    return int(text)


def resolve_profile(name: str) -> CostModel:
    """A shipped profile by name, or a profile file by path (errors name the PROFILE argument)."""
    path = Path(name)
    if not path.suffix and not (PROFILE_DIR / f"{name}.yaml").is_file():
        shipped = sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))
        raise ConfigError("PROFILE", f"{name!r} is neither a shipped profile ({', '.join(shipped)}) nor a .yaml file")
    return load_profile(name)


def predict_request(cost: CostModel, *, height: int, width: int, frames: int = 1, steps: int, sp: str = "1",
                    batch: int = 1, model: str | None = None, cfg: bool = False,
                    cfg_parallel: int | str = 1) -> Prediction:
    """What ``cost`` predicts for ``batch`` same-shape requests run alone on an ``sp`` layout
    (``4``: the profile's SP method; ``ulysses4``, ``ring2``, ``u2r2``, ``u2c2``) with CFG-parallel
    degree ``cfg_parallel`` (or the layout's own ``c``)."""
    if model is None:
        if len(cost.models) != 1:
            raise ConfigError("--model", f"profile {cost.name!r} serves {sorted(cost.models)}: choose one")
        model = next(iter(cost.models))
    if model not in cost.models:
        raise ConfigError("--model", f"{model!r} is not in profile {cost.name!r} ({sorted(cost.models)})")
    m = cost.models[model]
    try:
        layout = SPLayout.parse(sp, m.sp.method if m.sp is not None else "ulysses")
    except ConfigError as exc:
        raise ConfigError("--sp", str(exc).split(": ", 1)[-1]) from None
    if layout.degree > MAX_SP_DEGREE:
        raise ConfigError("--sp", f"at most {MAX_SP_DEGREE} GPUs, not {layout.degree}")
    c = _cfg_flag(cfg_parallel)
    if c != 1:
        if layout.cfg not in (1, c):
            raise ConfigError("--cfg-parallel", f"{c} and --sp {sp!r}'s CFG degree {layout.cfg} disagree")
        layout = dataclasses.replace(layout, cfg=c)
    try:
        m.sp_layout(layout)
    except ConfigError as exc:
        flag = "--cfg-parallel" if "cfg_parallel" in str(exc) else "--sp"
        raise ConfigError(flag, f"profile {cost.name!r}: {exc}") from None
    try:
        m.check_frames(frames)
        reqs = [Request(i, 0.0, model, m.modality, height, width, frames, steps, cfg, "batch", float("inf"))
                for i in range(batch)]
    except InvalidRequest as exc:
        flag = {"height": "--height", "width": "--width", "num_frames": "--frames",
                "num_inference_steps": "--steps"}.get(exc.field, exc.field)
        raise ConfigError(flag, str(exc)) from None
    recs = [cost.record(r) for r in reqs]
    return Prediction(cost.name, cost.gpu, model, height, width, frames, steps, batch, cfg, layout,
                      cost.batch_duration_sp(recs, layout), cost.batch_step_time_sp(recs, layout),
                      cost.batch_memory_gb_sp(recs, layout), cost.gpu_memory_gb)
