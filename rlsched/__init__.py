"""rlsched: a learned adaptive batch scheduler for vLLM-Omni's diffusion stage."""

__version__ = "0.1.0"
