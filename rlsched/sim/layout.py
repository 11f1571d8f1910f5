"""A profile as one replica on several GPUs sees it: the cost model at a sequence-parallel
(and optionally CFG-parallel) layout.

``at_layout(cost, layout)`` is the ``CostModel`` a replica of ``layout.gpus`` GPUs
runs on: every request's figures (step time, standalone time, per-GPU memory) and every
batch's step come from the profile's ``sp`` and ``cfg_parallel`` coefficients
(``ModelCost.step_time_sp``, ``ModelCost.request_memory_gb``). One GPU returns the profile itself, so a one-GPU
replica is exactly today's simulator. Everything downstream — the simulator, the
policies' batching caps, the routers' predicted finishes — reads the replica's
``CostModel`` and so sees its layout without knowing about it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from rlsched.errors import ConfigError
from rlsched.sim.cost import CostModel, SPLayout
from rlsched.sim.request import Request, RequestRecord


@dataclass(frozen=True, slots=True)
class LayoutCost(CostModel):
    """``CostModel`` of a replica on ``layout`` (see the module docstring)."""

    layout: SPLayout = SPLayout()

    def record(self, req: Request, deadline_s: float = math.inf) -> RequestRecord:
        rec = CostModel.record(self, req, deadline_s)
        rec.step_s = self.batch_step_time([rec])
        rec.work_s = rec.encode_s + req.num_inference_steps * rec.step_s + rec.decode_s
        mpx = req.height * req.width * req.num_frames / 1e6
        m = self.model(req.model)
        rec.mem_gb = m.request_memory_gb(rec.tokens, mpx, self.layout, m.passes(req))
        return rec

    def batch_step_time(self, records: Sequence[RequestRecord]) -> float:
        return self.batch_step_time_sp(records, self.layout)


def at_layout(cost: CostModel, layout: SPLayout | int | str, cfg: int = 1) -> CostModel:
    """``cost`` on ``layout`` (an ``SPLayout``, a degree in the profile's method, or ``"u2r2"``,
    ``"u2c2"``, ``"c2"``) with CFG-parallel degree ``cfg`` (or the layout's own); every model of
    the profile must support it. One GPU: ``cost`` itself."""
    methods = {m.sp.method for m in cost.models.values() if m.sp is not None} or {"ulysses"}
    chosen = layout if isinstance(layout, SPLayout) else SPLayout.parse(str(layout), next(iter(sorted(methods))))
    if cfg != 1:
        if chosen.cfg not in (1, cfg):
            raise ConfigError("cfg-parallel degree", f"{cfg} and layout {chosen}'s cfg {chosen.cfg} disagree")
        chosen = dataclasses.replace(chosen, cfg=cfg)  # each model's sp_layout checks the degree
    if chosen.gpus == 1:
        return cost
    for m in cost.models.values():
        m.sp_layout(chosen)  # refuses a layout the profile has no coefficients for
    base = {f.name: getattr(cost, f.name) for f in dataclasses.fields(CostModel)}
    return LayoutCost(**{**base, "name": f"{cost.name}@{chosen}"}, layout=chosen)


__all__ = ["LayoutCost", "at_layout"]
