"""Plugin tests against the real vLLM-Omni classes (make test-vllm)."""
