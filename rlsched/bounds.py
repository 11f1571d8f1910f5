"""One table of numeric bounds: every scenario field (``rlsched.sim.schema``), every numeric
command-line flag (``rlsched.argtypes``) and every plugin setting (``PluginConfig``,
``extras.rlsched``) takes its range from here, so a value the schema refuses is refused by the
flag and the setting that mean the same thing.

The bounds lie far beyond any real deployment; they keep every derived time, count and memory
figure finite and every loop bounded (issue 18 and issue 34: ``--replicas 10**6`` ran until
killed, ``--sp 2000000000`` was reported as a result, ``time_scale: 1e300`` put every deadline
at its arrival). Standard library only: the CLI's argument types and the plugin's settings
import this without pydantic or numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral, Real
from typing import Any

from rlsched.errors import ConfigError


@dataclass(frozen=True)
class Bound:
    """A closed range [``low``, ``high``] (``low_open``: ``low`` itself excluded) of integers
    (``integer``) or finite numbers; with ``values``, only those integers."""

    low: float
    high: float
    integer: bool = False
    low_open: bool = False
    values: tuple[int, ...] = ()

    def describe(self) -> str:
        """What a value must be, as error messages say it (``an integer >= 1 and <= 1024``)."""
        if self.values:
            return "one of " + ", ".join(map(str, self.values))
        if self.integer:
            return f"an integer >= {int(self.low)} and <= {int(self.high)}"
        low = f"{'>' if self.low_open else '>='} {self.low:g}"
        return f"a finite number {low}" + ("" if self.high == math.inf else f" and <= {self.high:g}")

    def holds(self, value: float) -> bool:
        """``value`` (a number already of the right kind) lies in the range."""
        if self.values:
            return value in self.values
        if not isinstance(value, int) and not math.isfinite(value):
            return False
        low_ok = value > self.low if self.low_open else value >= self.low
        return low_ok and value <= self.high

    def check(self, value: Any, where: str) -> Any:
        """``value`` if it is of the bound's kind and in range, else ``ConfigError(where, ...)``.

        A bool is never a number here (``count: true`` is not one replica), and an integer bound
        takes only integers (not ``2.0``)."""
        number = _as_number(value, self.integer or bool(self.values))
        if number is None or not self.holds(number):
            raise ConfigError(where, f"must be {self.describe()}, not {value!r}")
        return number


def _as_number(value: Any, integer: bool) -> int | float | None:
    if isinstance(value, bool) or not isinstance(value, Real):
        return None
    if integer:
        return int(value) if isinstance(value, Integral) else None
    try:
        return float(value)
    except OverflowError:  # an int past float's range (10**400)
        return None


def ints(low: int, high: int) -> Bound:
    return Bound(low, high, integer=True)


def floats(low: float, high: float = math.inf, *, low_open: bool = False) -> Bound:
    return Bound(low, high, low_open=low_open)


# ------------------------------------------------------------------ time and rates
MAX_DURATION_S = 1e9
"""Longest arrival window (about 32 years); also the longest timeout or look-ahead in seconds."""
DURATION_S = floats(0, MAX_DURATION_S, low_open=True)
PHASE_S = floats(-MAX_DURATION_S, MAX_DURATION_S)
MIN_PERIOD_S = 1e-3
PERIOD_S = floats(MIN_PERIOD_S, MAX_DURATION_S)
"""An on/off sojourn or a diurnal period: at least a millisecond."""
MIN_CV, MAX_CV = 1e-3, 100.0
CV = floats(MIN_CV, MAX_CV)
"""A renewal process's coefficient of variation (ServeGen windows are clamped at 1e-3 too)."""
BURST_FACTOR = floats(1, 1e6)
FRACTION = floats(0, 1)
POSITIVE = floats(0, low_open=True)
"""Any finite number > 0: rates, class shares and mix weights (shares and weights are relative;
a rate's request count is capped from rate x window instead)."""
SCALE_RANGE = (1e-9, 1e9)
SCALE = floats(*SCALE_RANGE)
"""A rate or time multiplier (``rate_scale``, a trace's ``time_scale``, ``--rate-scale``)."""
TRUTH_SCALE = floats(0.01, 100)
"""A scenario's ``truth:`` scale (how far the real cost is from the profile): a 100x error either way is
far past any stack difference measured (2x)."""
MAX_SLO_SCALE = 1e6
SLO_SCALE = floats(0, MAX_SLO_SCALE, low_open=True)
MAX_CLASS_WEIGHT = 1e6
CLASS_WEIGHT = floats(0, MAX_CLASS_WEIGHT, low_open=True)
"""A class's weight in the weighted SLO attainment (relative: eight classes of the largest still sum finite)."""
MAX_MS = 3_600_000.0
"""An hour in milliseconds: the longest engine overhead, batching wait or decision budget."""
MILLIS = floats(0, MAX_MS)
DECISION_MS = floats(0, MAX_MS, low_open=True)
"""A decision's budget or deadline (plugin, router, central pool)."""
PLUGIN_TIME_SCALE = floats(1e-3, 1e3)
"""Plugin seconds per wall second (``extras.rlsched.time_scale``, ``deploy --time-scale``): a replay
runs at most 1000x faster than real time. Past that a millisecond of engine overhead is longer than
a small image's SLO, and 1e300 put every deadline at its arrival."""
TELEMETRY_INTERVAL_S = floats(0, 3600, low_open=True)
NONNEGATIVE_S = floats(0, MAX_DURATION_S)
"""A span of seconds that may be 0 (``label --future``)."""
TIMEOUT_S = DURATION_S
DRR_QUANTUM_S = floats(1e-9, MAX_DURATION_S)
"""``drr:QUANTUM``: GPU seconds each key earns per round (DRR adds the rounds a batch needs in one step)."""

# ------------------------------------------------------------------ request shapes
MAX_SIDE_PX, MAX_FRAMES, MAX_STEPS = 1_000_000, 1_000_000, 100_000
SIDE_PX = ints(1, MAX_SIDE_PX)
FRAMES = ints(1, MAX_FRAMES)
STEPS = ints(1, MAX_STEPS)
MAX_PREFIX_GROUPS = 1 << 30
PREFIX_GROUPS = ints(0, MAX_PREFIX_GROUPS)
"""Prompt-prefix ids are drawn from [0, 2^30)."""
MAX_NUM_SEQS = 65_536
NUM_SEQS = ints(1, MAX_NUM_SEQS)
"""A batch's size (``max_num_seqs``, ``profile predict --batch``)."""

# ------------------------------------------------------------------ stages and layouts
MAX_REPLICAS = 1024
"""Most replicas of a whole stage (every group together, or ``--replicas``): far beyond any one
stage's GPUs; a stage of 10**6 replicas ran until killed or ended in a numpy MemoryError."""
REPLICAS = ints(1, MAX_REPLICAS)
SP_DEGREES = (1, 2, 4, 8)
SP_DEGREE = Bound(1, 8, integer=True, values=SP_DEGREES)
"""Sequence-parallel degrees a replica may have (a profile's ``sp`` block calibrates these)."""
CFG_PARALLEL = Bound(1, 2, integer=True, values=(1, 2))
STAGE_GPUS = ints(1, MAX_REPLICAS)
"""``plan --gpus``: every layout of N GPUs includes N one-GPU replicas, so N is capped as a stage's replicas."""
STAGE_ID = ints(0, 1023)
PORT = ints(0, 65535)
"""A TCP port; 0: off."""
DEVICE = ints(-1, 1023)
"""An NVML device index; -1: the first of ``CUDA_VISIBLE_DEVICES``."""

# ------------------------------------------------------------------ runs and tools
MAX_SEED = 2**63 - 1
SEED = ints(0, MAX_SEED)
"""numpy's generators take integers >= 0 only."""
MAX_PROCESSES = 4096
WORKERS = ints(1, MAX_PROCESSES)
"""Worker processes or concurrent connections (each is a process or a thread and a socket)."""
ENVS = ints(1, 1024)
"""Parallel training environments."""
MAX_TIMESTEPS = 10**12
TIMESTEPS = ints(1, MAX_TIMESTEPS)
TIMESTEPS_OR_NONE = ints(0, MAX_TIMESTEPS)
"""``learn --timesteps``: 0 skips PPO."""
COUNT = ints(1, 10**6)
"""Trials, episodes, repeats, rounds, a labelling stride, a tuning batch."""
CALLS = ints(1, 10**9)
MAX_ARRIVALS = 20_000_000
"""More arrivals than this in one run is a typo in the rate or window (and would exhaust memory)."""
REQUESTS = ints(1, MAX_ARRIVALS)
MAX_TRACE_ROWS = 2_000_000
"""Most rows a trace may hold: reading one takes ~20 us a row on one core, so a trace at the bound
is read in under a minute; a longer one is refused before its first row is parsed."""
MAX_TRACE_BYTES = 1 << 30
"""Largest trace file read (it is read whole; 1 GiB is ~500 bytes a row at the row bound)."""
REPLY_MB = floats(0, 2**20, low_open=True)

# ------------------------------------------------------------------ a replica's published state
MAX_STATE_SEQ = 2**63 - 1
STATE_SEQ = ints(0, MAX_STATE_SEQ)
"""A published state's ``seq`` and its calibration's ``version`` (``rlsched.routing.views``): a signed 64-bit
count, 292,000 years of a million states a second; a ``seq`` of 10**30 locked its replica out of the router."""
MAX_STATE_REMAINING_S = 86_400.0
STATE_REMAINING_S = floats(0, MAX_STATE_REMAINING_S)
"""A running batch's predicted time left, as published: at most a day (a replica publishes no more,
``replica_state``); a ``remaining_s`` of 1e300 kept its replica from ever being stale."""
STATE_STEPS_DONE = ints(0, MAX_STEPS)
"""A published request's denoise steps done."""

# ------------------------------------------------------------------ cost profiles
MAX_STEP_S = 3600.0
STEP_S = floats(0, MAX_STEP_S)
"""A fixed per-step time (``floor_s``, ``a_s``)."""
MAX_REQUEST_S = 86400.0
REQUEST_S = floats(0, MAX_REQUEST_S)
"""A per-request encode, or decode per megapixel-frame."""
MAX_COEFF = 1e6
COEFF = floats(0, MAX_COEFF)
"""A per-token or per-megapixel coefficient (seconds or GB), or a GPU's TFLOP/s."""
MAX_GPU_GB = 1e6
WEIGHTS_GB = floats(0, MAX_GPU_GB)
GPU_GB = floats(0, MAX_GPU_GB, low_open=True)
LINEAR_GFLOP = floats(0, 1e9)
ATTN_FLOP = floats(0, 1e15)
PATCH_PX = ints(1, 4096)
TEMPORAL_STRIDE = ints(1, 1024)
CFG_PASSES = ints(1, 16)
