"""Frozen learned policies, numpy only: the observation encoder, the checkpoint format, the
observing base they share, and the two policies — ``rl`` (``knob``: a network sets the
projection's action) and ``pick`` (a scorer chooses among the projection's candidate batches).

Above the heuristics (``rlsched.policies``), below training (``rlsched.envs``,
``rlsched.agents``): serving imports this wing and never gymnasium or torch.
"""
