# Two entry points for a fresh machine: `make run` and `make test`.
# The venv is created on first use; torch comes from the local CPU wheel when it
# exists (never an unpinned, multi-GB CUDA download).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
UV := $(VENV)/bin/uv
TORCH_WHEEL := $(firstword $(wildcard /opt/wheels/torch-2.13.0+cpu-cp311-*.whl))
export OMP_NUM_THREADS ?= 1
export MKL_NUM_THREADS ?= 1

.PHONY: run test test-vllm test-ray lint typecheck bench bench-plugin bench-router results results-replicas results-plan docs-reference help

help:
	@echo "Every target, with its rough wall time on the 2-core development machine (first run: + the venv install)."
	@echo "make run              - compare policies on the default scenario (~5 s)"
	@echo "make test             - install (first time) and run the test suite (~12-14 min on 2 cores)"
	@echo "make lint             - ruff over rlsched and tests (~1 s)"
	@echo "make typecheck        - mypy on rlsched; its error and type-ignore counts may only fall (~1 min)"
	@echo "make test-vllm        - plugin tests against the real vLLM-Omni classes (own venv; ~2.5 min)"
	@echo "make test-e2e         - a real vllm serve --omni with the plugin, on CPU (own venv; 10-14 min, docs/e2e.md)"
	@echo "make test-e2e-loops   - every multi-replica e2e test under both of vLLM-Omni's orchestration loops (~15 min)"
	@echo "make test-ray         - eval grid, tuning and labels on a local Ray instance (adds the ray extra; < 1 min)"
	@echo "make bench            - speed benchmarks (~1.5 min; plus bench-plugin when $(VLLM_VENV) is built)"
	@echo "make bench-plugin     - schedule() cost in vLLM-Omni's schedulers, every policy vs native (own venv; ~3 min)"
	@echo "make bench-router     - the engine's router pool on 8/64/1,024 fake replicas: decision cost (own venv; ~1 min)"
	@echo "make results          - the one-GPU results table and plots (results/default; docs/results.md; ~6 min)"
	@echo "make results-replicas - routers x replica policies on the multi-replica scenarios (results/replicas; ~34 min)"
	@echo "make results-plan     - plan's layout choice on the pools, re-checked on evaluation seeds (~19 min)"
	@echo "make results-fleet    - default as one pool of 64/256/1,024 replicas, every router (results/fleet; ~25 min)"
	@echo "make docs-reference   - regenerate the scenario file reference in docs/workload.md from the schema (~1 s)"

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q uv
	@if [ -n "$(TORCH_WHEEL)" ]; then \
	  $(UV) pip install --python $(PY) -q "$(TORCH_WHEEL)"; \
	else \
	  $(VENV)/bin/pip install -q torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu; \
	fi
	$(UV) pip install --python $(PY) -q -e ".[rl,dev,serve,nvml,profile]"
	@$(PY) -c "import torch; assert not torch.version.cuda, 'CUDA torch on a CPU machine'"
	touch $@

run: $(VENV)/.installed
	$(VENV)/bin/rlsched simulate --scenario default --seed 1000 \
	  --compare "fifo,edf,seed-composite,static:agents/tuned/default.json,rl:checkpoints/default,pick:checkpoints/pick;static=agents/tuned/default.json"

# Bounded overall too (about 5 minutes here): a hang after the last test fails in 25 minutes, not at CI's 90.
test: $(VENV)/.installed
	timeout --kill-after=30 1500 $(PY) -m pytest -q

# mypy on rlsched with a ratchet (~1 min): its error count and the `type: ignore` count may only fall
# (tests/data/mypy_ratchet.json; `$(PY) scripts/mypy_ratchet.py --update` keeps a gain).
typecheck: $(VENV)/.installed
	$(PY) scripts/mypy_ratchet.py

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check rlsched tests

# The scenario file reference (docs/workload.md's last section) from rlsched.sim.schema; a test
# (tests/sim/test_scenario_reference.py) fails when the page and the schema disagree.
docs-reference: $(VENV)/.installed
	$(PY) -m rlsched.sim.reference --write docs/workload.md

bench: $(VENV)/.installed
	@for b in sim projection env decision route backlog stage calibration; do echo "== rlsched bench $$b"; $(VENV)/bin/rlsched bench $$b --json; done
	@if [ -f $(VLLM_VENV)/.installed ]; then echo "== rlsched bench plugin"; $(VLLM_VENV)/bin/rlsched bench plugin --rounds 3 --json; \
	echo "== rlsched bench router"; $(VLLM_VENV)/bin/rlsched bench router --json; \
	else echo "== rlsched bench plugin, router: skipped, need the vLLM tier (make $(VLLM_VENV)/.installed; make bench-plugin)"; fi

# The Ray tier: a local Ray instance (2 CPUs, no dashboard) runs a small eval grid, tuning trials
# and labels, checked bit-identical to local runs. Ray is an extra, added to the main venv here only.
# Bounded twice (pytest-timeout per test, `timeout` overall); no Ray process may outlive it.
$(VENV)/.ray-installed: $(VENV)/.installed
	$(UV) pip install --python $(PY) -q -e ".[rl,dev,serve,nvml,ray]"
	touch $@

test-ray: $(VENV)/.ray-installed
	RLSCHED_REQUIRE_RAY=1 timeout --kill-after=30 600 $(PY) -m pytest -q -m ray tests/ray -p no:cacheprovider --timeout 300
	@sleep 2; ! pgrep -fa "[r]ay::|$(abspath $(VENV))/lib/.*/ray/core/src/ray/([r]aylet|[g]cs)" || { echo "orphan Ray processes"; exit 1; }

# The plugin tier: vLLM 0.30.0 + vLLM-Omni 0.30.0 (CPU torch) in their own venv, installed
# --no-deps plus a pinned list of their pure-Python dependencies, so no CUDA wheel is pulled.
VLLM_VENV ?= .venv-vllm
VLLM_PY := $(VLLM_VENV)/bin/python
VLLM_UV := $(VLLM_VENV)/bin/uv pip install --python $(VLLM_PY) -q

$(VLLM_VENV)/.installed: pyproject.toml requirements/vllm-omni-cpu.txt
	python3 -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install -q uv
	@if [ -n "$(TORCH_WHEEL)" ]; then \
	  $(VLLM_UV) "$(TORCH_WHEEL)"; \
	else \
	  $(VLLM_VENV)/bin/pip install -q torch==2.13.0 --extra-index-url https://download.pytorch.org/whl/cpu; \
	fi
	$(VLLM_UV) --no-deps vllm==0.30.0 vllm-omni==0.30.0
	$(VLLM_UV) -r requirements/vllm-omni-cpu.txt
	$(VLLM_UV) --no-deps -e .
	$(VLLM_UV) pyyaml rich pydantic numpy prometheus_client pytest pytest-timeout hypothesis
	@$(VLLM_PY) -c "import torch; assert not torch.version.cuda, 'CUDA torch on a CPU machine'"
	touch $@

test-vllm: $(VLLM_VENV)/.installed
	RLSCHED_REQUIRE_VLLM=1 timeout --kill-after=30 900 $(VLLM_PY) -m pytest -q -m vllm tests/vllm

# schedule() in the real RequestScheduler/StepScheduler, every shipped policy vs vLLM-Omni's own, at
# 16-4,096 waiting, three rounds pooled (~2 min on 2 cores). E.g. BENCH_PLUGIN_ARGS="--json" or "--modes step --calls 200".
BENCH_PLUGIN_ARGS ?=
bench-plugin: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/rlsched bench plugin --rounds 3 $(BENCH_PLUGIN_ARGS)

# The engine's router pool (RouterStagePool) routing 4,000 requests (ten per replica at 1,024) over 8, 64 and
# 1,024 fake replicas that publish their states (docs/benchmarks.md). E.g. BENCH_ROUTER_ARGS="--replicas 256".
BENCH_ROUTER_ARGS ?=
bench-router: $(VLLM_VENV)/.installed
	$(VLLM_VENV)/bin/rlsched bench router --json $(BENCH_ROUTER_ARGS)

# The one-GPU results (docs/results.md): every policy on held-out seeds (1000-1009), 5 loads (x0.5-x1.5), 5 scenarios.
RESULT_POLICIES := fifo,sjf,edf,priority,drr,seed-memory,seed-priority,seed-composite,static:agents/tuned/{scenario}.json,rl:checkpoints/default,pick:checkpoints/pick;static=agents/tuned/{scenario}.json
results: $(VENV)/.installed
	$(VENV)/bin/rlsched eval --scenarios default,video-mix,omni-mix,trace-azure,bursty \
	  --policies "$(RESULT_POLICIES)" --seeds 1000,1001,1002,1003,1004,1005,1006,1007,1008,1009 \
	  --loads 0.5,0.75,1.0,1.25,1.5 --workers 2 --out results/default

# The multi-replica results (docs/replicas.md): every router x replica policy on each
# multi-replica scenario, held-out seeds 1000-1004, x0.5-x3 (x2 and x3: overload, issue 37), every router on the deployed router's
# information (view=engine, the default); rlsched's router on the replicas' true state (view=replica: a
# ceiling) and on the ledger alone (view=ledger: the router before replicas published their state) beside it. The tuned action each scenario's
# static runs is its one-GPU counterpart's (none is tuned on a stage yet); video-8gpu also runs its own
# learned router (checkpoints/router-video).
STAGE_PLAIN := fifo@round-robin,fifo@least-queue,fifo@random,edf@least-queue,edf@least-work,edf@affinity,sjf@least-work
results-replicas: $(VENV)/.installed
	@for sc in qwen-image-8gpu qwen-image-hetero video-8gpu azure-8gpu; do \
	  case $$sc in qwen-image-8gpu|qwen-image-hetero) t=default;; video-8gpu) t=video-mix;; azure-8gpu) t=trace-azure;; esac; \
	  s=static:agents/tuned/$$t.json; own=; [ $$sc = video-8gpu ] && own=",$$s@router:checkpoints/router-video"; \
	  $(VENV)/bin/rlsched eval --scenarios $$sc --seeds 1000,1001,1002,1003,1004 \
	    --loads 0.5,0.75,1.0,1.25,1.5,2,3 --workers 2 --out results/replicas/$$sc \
	    --policies "$$s@rlsched,$$s@router$$own,$(STAGE_PLAIN),$$s@round-robin,$$s@least-work,$$s@central,edf@central,$$s@rlsched;view=replica,$$s@rlsched;view=ledger" || exit 1; \
	done

# plan's recommendation on each homogeneous pool, chosen on training seeds 0-2 and re-checked on
# evaluation seeds 1000-1004 against the best layout in hindsight (results/replicas/plan-*/).
results-plan: $(VENV)/.installed
	@for pair in qwen-image-8gpu:default azure-8gpu:trace-azure; do sc=$${pair%%:*}; t=$${pair#*:}; \
	  $(VENV)/bin/rlsched plan --scenario $$sc --policy static:agents/tuned/$$t.json@rlsched --seeds 0,1,2 \
	    --check-seeds 1000,1001,1002,1003,1004 --workers 2 --out results/replicas/plan-$$sc || exit 1; \
	done

# The fleet results (docs/replicas.md, "Past one node"): one-GPU `default` as one pool of 64, 256 and 1,024
# replicas (arrivals x replicas), 600 s of arrivals, evaluation seeds 1000-1002, x0.5-x1.5: every deployable
# router beside vLLM-Omni's own (fifo@round-robin, fifo@least-queue) and the true-state ceiling
# (scripts/fleet_table.py run: eval's grid and report, plus each run's row for the paired table). At 1,024
# the learned router and static@least-work are left out (over 50 s of CPU a run each there).
FLEET_TUNED := static:agents/tuned/default.json
FLEET_1024 := $(FLEET_TUNED)@rlsched,$(FLEET_TUNED)@central,edf@central,$(FLEET_TUNED)@round-robin,fifo@round-robin,fifo@least-queue,edf@least-queue,$(FLEET_TUNED)@rlsched;view=replica
.PHONY: results-fleet
results-fleet: $(VENV)/.installed
	$(PY) scripts/fleet_table.py run --replicas 64 --out results/fleet/default-64
	$(PY) scripts/fleet_table.py run --replicas 256 --out results/fleet/default-256
	$(PY) scripts/fleet_table.py run --replicas 1024 --policies "$(FLEET_1024)" --out results/fleet/default-1024
	$(PY) scripts/fleet_table.py --doc docs/replicas.md

# The end-to-end tier: a real `vllm serve MODEL_DIR --omni` (tiny local model, no download) with the
# stage `rlsched deploy` writes, CostProfileExecutor instead of a GPU worker, requests over HTTP; one
# replica and two (the replicas' stage processes are multiprocessing children of the API server: the
# orphan check looks for those too).
# Adds the serve path's pinned pure-Python packages to the plugin venv (cache-dit --no-deps).
$(VLLM_VENV)/.e2e-installed: $(VLLM_VENV)/.installed requirements/vllm-omni-e2e.txt
	$(VLLM_UV) -r requirements/vllm-omni-e2e.txt
	$(VLLM_UV) --no-deps cache-dit==1.5.0
	@$(VLLM_PY) -c "import torch; assert not torch.version.cuda, 'CUDA torch on a CPU machine'"
	touch $@

.PHONY: test-e2e
test-e2e: $(VLLM_VENV)/.e2e-installed
	RLSCHED_REQUIRE_E2E=1 timeout --kill-after=60 1500 $(VLLM_PY) -m pytest -q -m e2e tests/e2e -p no:cacheprovider --timeout 600
	@! pgrep -f "[v]llm serve .*e2e-model|$(abspath $(VLLM_VENV))/bin/python -B -c from [m]ultiprocessing" >/dev/null \
	  || { echo "orphan vllm serve processes (API server or replica stage processes)"; exit 1; }

.PHONY: test-e2e-loops
test-e2e-loops: $(VLLM_VENV)/.e2e-installed
	RLSCHED_E2E_BOTH_LOOPS=1 RLSCHED_REQUIRE_E2E=1 timeout --kill-after=60 1800 $(VLLM_PY) -m pytest -q -m e2e \
	  tests/e2e/test_replicas.py tests/e2e/test_memory_fallback.py tests/e2e/test_serve_cpu.py -p no:cacheprovider --timeout 600
	@! pgrep -f "[v]llm serve .*e2e-model|$(abspath $(VLLM_VENV))/bin/python -B -c from [m]ultiprocessing" >/dev/null \
	  || { echo "orphan vllm serve processes (API server or replica stage processes)"; exit 1; }
