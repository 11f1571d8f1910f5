"""The engine router predicts each replica at the stage's layout, CFG parallelism included."""

from __future__ import annotations

from rlsched.integrations.vllm_omni.routing import stage_layout
from rlsched.sim import load_profile
from rlsched.sim.layout import at_layout


class Stage:
    def __init__(self, **parallel: int) -> None:
        self.parallel_config = parallel


def test_the_layout_reads_sp_and_cfg_parallel_sizes() -> None:
    assert stage_layout(Stage()) == 1
    assert stage_layout(Stage(sequence_parallel_size=2)) == 2
    assert stage_layout(Stage(ulysses_degree=2, ring_degree=2)) == 4
    assert stage_layout(Stage(cfg_parallel_size=2)) == "1c2"
    assert stage_layout(Stage(sequence_parallel_size=2, cfg_parallel_size=2)) == "2c2"
    cost = load_profile("qwen-image-h200-vllm-omni")
    assert at_layout(cost, stage_layout(Stage(cfg_parallel_size=2))).layout.gpus == 2  # type: ignore[attr-defined]
