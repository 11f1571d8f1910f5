"""Routing: which replica of a multi-replica stage an arriving request joins (early binding).

``spec`` — a ``POLICY@ROUTER`` spec parsed once (``StageSpec``: the split and view rules, the router
names); ``routers`` — vLLM-Omni's own routers and the heuristics, the registry (``ROUTERS``, ``make_router``,
``run_spec``); ``views`` — what a deployed router knows of each replica (the ledger of what it bound,
corrected by the replicas' published states: the router plugin's view and the simulator's ``view=engine``);
``teachers`` — the look-ahead and hindsight routers, which fork the simulator's stage (offline ceilings).
Every router decides on a ``rlsched.sim.view.StageView``; the learned router is ``rlsched.learned.router``.
"""
