"""Integrations with serving engines. Only ``vllm_omni`` imports vLLM, and only lazily."""
