"""Pure discrete-event core: numpy + stdlib + yaml only (no gym, torch or vLLM)."""

from rlsched.sim.cost import CostModel, load_profile
from rlsched.sim.request import MODALITIES, PRIORITY_CLASSES, Request, RequestRecord
from rlsched.sim.scenario import Scenario, load_scenario, scenario_names
from rlsched.sim.simulator import WAIT, Decision, ServingConfig, Simulator

__all__ = [
    "MODALITIES", "PRIORITY_CLASSES", "WAIT", "CostModel", "Decision", "Request", "RequestRecord",
    "Scenario", "ServingConfig", "Simulator", "load_profile", "load_scenario", "scenario_names",
]
