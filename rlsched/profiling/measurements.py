"""The measurement CSV: one published or measured number per row, with its source.

Columns (header required, in any order):

========== ==================================================================
model      model name in the profile (``qwen-image``)
gpu        GPU it ran on (``H100``, ``H200``)
stack      software stack (``sglang+compile``, ``vllm-omni 0.19.1``, ``diffusers eager``)
height     image / frame height, px
width      image / frame width, px
frames     frames (1 for images; sequence length for ``token_rule: sequence`` models)
batch      requests of this shape run together
steps      denoise steps
cfg        ``true`` when classifier-free guidance is on
metric     what ``value`` is: ``step_s`` (one denoise step of the batch, DiT only),
           ``diffuse_s`` (all denoise steps of one request), ``total_s`` (one request end to
           end: encode + steps + decode), ``attn_share`` (fraction of a DiT step spent in
           attention), ``peak_gb`` (peak GPU memory of the batch), ``decode_s`` (VAE decode
           of the batch), ``encode_s`` (text encode of one request)
value      the number
use        ``fit`` (the profile is fitted to it) or ``check`` (held out: reported, not fitted)
source     where the number comes from (URL or document + table); ``estimate:`` when it is not
           a measurement
========== ==================================================================

Optional columns (absent or empty: 1), for multi-GPU rows:

========== ==================================================================
ulysses    Ulysses sequence-parallel degree of one request (all-to-all over heads)
ring       ring-attention degree (``ulysses`` x ``ring`` GPUs per request)
replicas   independent engine replicas the number was measured on (each one request at a
           time); a per-request ``total_s`` of a replica does not depend on it
========== ==================================================================

Rows with ``ulysses·ring > 1`` are fitted only to a model's ``sp`` coefficients
(``rlsched.profiling.fit``); degree-1 coefficients come from degree-1 rows alone.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from rlsched.errors import TraceFormatError
from rlsched.sim.cost import SPLayout

METRICS = ("step_s", "diffuse_s", "total_s", "attn_share", "peak_gb", "decode_s", "encode_s")
COLUMNS = ("model", "gpu", "stack", "height", "width", "frames", "batch", "steps", "cfg", "metric", "value",
           "use", "source")
OPTIONAL_COLUMNS = ("ulysses", "ring", "replicas")


@dataclass(frozen=True, slots=True)
class Measurement:
    """One row of a measurement CSV."""

    model: str
    gpu: str
    stack: str
    height: int
    width: int
    frames: int
    batch: int
    steps: int
    cfg: bool
    metric: str
    value: float
    use: str
    source: str
    line: int = 0
    """1-based line in the CSV (for residual reports and errors)."""
    ulysses: int = 1
    ring: int = 1
    replicas: int = 1

    @property
    def shape(self) -> str:
        frames = f"x{self.frames}f" if self.frames > 1 else ""
        return f"{self.width}x{self.height}{frames}"

    @property
    def layout(self) -> SPLayout:
        """The row's sequence-parallel layout (degree 1 for single-GPU rows)."""
        return SPLayout(self.ulysses, self.ring)

    @property
    def parallel(self) -> str:
        """Label of the multi-GPU setting: ``1``, ``ulysses4``, ``ulysses2xring2``, ``2 replicas``."""
        label = str(self.layout)
        if self.replicas > 1:
            label = f"{self.replicas} replicas" if label == "1" else f"{label}, {self.replicas} replicas"
        return label


def read_measurements(path: Path) -> list[Measurement]:
    """Rows of ``path``; a malformed row raises ``TraceFormatError`` naming file, line and column."""
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceFormatError(str(path), 1, f"missing columns {missing}")
        return [_row(path, i, row) for i, row in enumerate(reader, start=2)]


def write_measurements(path: Path, rows: list[Measurement]) -> None:
    from rlsched.atomic import atomic_open

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w", "--out", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(COLUMNS)
        for r in rows:
            w.writerow([r.model, r.gpu, r.stack, r.height, r.width, r.frames, r.batch, r.steps,
                        str(r.cfg).lower(), r.metric, f"{r.value:.6g}", r.use, r.source])


def _row(path: Path, line: int, row: dict[str, str]) -> Measurement:
    def num(col: str, kind: type = int) -> float:
        try:
            v = kind(row[col])
        except (TypeError, ValueError):
            raise TraceFormatError(str(path), line, f"column {col!r}: not a number: {row[col]!r}") from None
        if not math.isfinite(v) or v < 0 or (kind is int and v < 1):
            raise TraceFormatError(str(path), line, f"column {col!r}: out of range: {row[col]!r}")
        return v

    metric, use, cfg = row["metric"].strip(), row["use"].strip(), row["cfg"].strip().lower()
    if metric not in METRICS:
        raise TraceFormatError(str(path), line, f"column 'metric': {metric!r} is not one of {METRICS}")
    if use not in ("fit", "check"):
        raise TraceFormatError(str(path), line, f"column 'use': {use!r} is not 'fit' or 'check'")
    if cfg not in ("true", "false"):
        raise TraceFormatError(str(path), line, f"column 'cfg': {cfg!r} is not true/false")
    if not row["source"].strip():
        raise TraceFormatError(str(path), line, "column 'source' is empty: every number names its source")
    extra = {c: int(num(c)) for c in OPTIONAL_COLUMNS if (row.get(c) or "").strip()}
    return Measurement(row["model"].strip(), row["gpu"].strip(), row["stack"].strip(), int(num("height")),
                       int(num("width")), int(num("frames")), int(num("batch")), int(num("steps")),
                       cfg == "true", metric, float(num("value", float)), use, row["source"].strip(), line, **extra)
