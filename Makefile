# hpu_lab: the two commands of the README, and what they need.
#   make lab    set everything up, then open JupyterLab on notebooks/  (PORT=..., IP=... optional)
#   make test   set everything up, then run the whole test suite (pytest, nbval, browser test)
#   make test-timing  the tests that read a wall or CPU clock to decide (left out of make test)
#   make bench  set everything up, then run the benchmark
#   make test-isa   the numerics and settings tests again on an older ISA, one core, one thread
#   make notebooks  run every notebook from its source (notebooks/NN_*.py) and store its outputs
#                   (NB=02 or NB="02 05": only these)
# Set-up is idempotent and works on a fresh machine: a venv in .venv, torch==2.13.0 (CPU build)
# installed FIRST -- a bare `torch` requirement resolved with no torch present can pull a multi-GB
# CUDA build -- then this package, editable, with its lab and test extras. It is redone when
# pyproject.toml changes (or `rm .venv/.installed`).

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip --disable-pip-version-check --no-input
TORCH  := torch==2.13.0
# Tools run from the venv (jupyter, and anything the tests start) must come first on PATH.
# OpenMP's idle workers sleep instead of spinning: three kernel-running threads (the user's, the
# device's, autograd's) each have a team, and spinning ones took the cores the emulator needs
# (hpu_lab/util/omp.py). A value set by the user is kept.
OMP_WAIT_POLICY ?= PASSIVE
RUN    := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)" OMP_WAIT_POLICY=$(OMP_WAIT_POLICY)
# Extra pytest arguments, e.g. make test PYTEST_ARGS='-m "not browser" -x'
PYTEST_ARGS ?=

.PHONY: help setup lab test test-timing test-isa bench notebooks bridge-suite client-suites fuzz chromium FORCE
FORCE:
.DEFAULT_GOAL := help

help:
	@echo "make lab    set up, then open JupyterLab on notebooks/ (optional PORT=8888 IP=127.0.0.1)"
	@echo "make test   set up, then run pytest on tests/ (browser test included) and nbval on notebooks/"
	@echo "make test-timing  the tests that read a wall or CPU clock (pytest -m timing; not in make test)"
	@echo "make test-isa  set up, then run the numerics and settings tests on an older ISA, pinned to one core"
	@echo "make bench  set up, then run python -m hpu_lab.lab.bench"
	@echo "make notebooks  set up, then run the notebooks from their .py sources into the .ipynb (NB=02 for one)"
	@echo "make bridge-suite BRIDGE=<gaudi-pytorch-bridge checkout>  run Intel's lazy-mode bridge tests on hpu_lab"
	@echo "make client-suites LIGHTNING_HABANA=<dir> DEEPSPEED=<dir> OPTIMUM_HABANA=<dir> [ACCELERATE=<dir>]"
	@echo "            run those libraries' own HPU tests unchanged on hpu_lab (installs the [clients] extra)"
	@echo "make fuzz   set up, then run every OpInfo sample (6 configs), 300 random programs of each kind vs CPU"
	@echo "            and the mutation audit (tests/mutation_audit.py)"

setup: $(VENV)/.installed chromium

# The editable install maps the top-level packages that exist when it runs; a package that appears
# later (say widgets/) is importable from the notebooks only after reinstalling. So the list of
# top-level packages is kept in .venv/.packages, rewritten only when it changes.
TOP_PACKAGES := $(sort $(patsubst %/__init__.py,%,$(wildcard hpu_lab/__init__.py widgets/__init__.py)))

$(VENV)/.packages: FORCE
	@mkdir -p $(VENV)
	@echo '$(TOP_PACKAGES)' | cmp -s - $@ || echo '$(TOP_PACKAGES)' > $@

$(VENV)/.installed: pyproject.toml $(VENV)/.packages
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "hpu_lab needs Python >= 3.11; run: make PYTHON=python3.11 ...")'
	@echo "== creating $(VENV) with $$($(PYTHON) --version)"
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	@echo "== installing $(TORCH) (CPU build) first"
	$(PIP) install -q --progress-bar off $(TORCH)
	@echo "== installing hpu_lab (editable) with its lab and test extras"
	$(PIP) install -q --progress-bar off -e '.[lab,test]'
	@touch $@

# Debian's Chromium, for the real-browser test (playwright drives /usr/bin/chromium; no browser
# download). Needs root; elsewhere warn, and the browser test skips itself.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "== installing Debian's chromium for the browser test"; \
	    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	      || echo "WARNING: could not install chromium; the browser test will be skipped"; \
	  else \
	    echo "WARNING: chromium not found and not root: install it (apt-get install chromium)" \
	         "or the browser test will be skipped"; \
	  fi; }

# lab/jupyter_lab_config.py: notebooks/ as root, and JupyterLab's own settings overrides
# (lab/settings/overrides.json): no news prompt, no update check. Nothing installed is patched.
lab: setup
	$(RUN) $(VENV)/bin/jupyter lab --config=lab/jupyter_lab_config.py --no-browser \
	  $(if $(PORT),--port=$(PORT)) $(if $(IP),--ServerApp.ip=$(IP)) \
	  $(if $(filter 0,$(shell id -u)),--allow-root)

# Both suites run even if the first fails, so one run shows every failure; the exit code is the
# first failure's.
test: setup
	@status=0; \
	$(RUN) $(PY) -m pytest tests/ $(PYTEST_ARGS) || status=$$?; \
	if ls notebooks/*.ipynb >/dev/null 2>&1; then \
	  $(RUN) $(PY) -m pytest --nbval --nbval-sanitize-with notebooks/sanitize.cfg notebooks/ \
	    $(PYTEST_ARGS) || { rc=$$?; [ $$status != 0 ] || status=$$rc; }; \
	else echo "== no notebooks yet: nbval skipped"; fi; \
	exit $$status

# Tests whose outcome depends on a clock (a panel's redraw throttle runs on wall time): run on a
# quiet machine, not in make test, which must pass on any machine, busy or idle.
test-timing: setup
	$(RUN) $(PY) -m pytest tests/ -m timing $(PYTEST_ARGS)

# The tests whose results come from this CPU's kernels (oneDNN convolutions and matmuls, bf16
# paths, reductions split by thread), run again on another CPU: oneDNN capped at an older ISA
# (ONEDNN_MAX_CPU_ISA), ATen's vector kernels at another width (ATEN_CPU_CAPABILITY), one core and
# one thread. A test that assumes what the machine it was written on does (AMX, avx512_bf16, many
# cores) fails here first, not in a user's first `make test`. CI runs it after `make test`.
# ISA_ONEDNN / ISA_ATEN override the levels (e.g. make test-isa ISA_ONEDNN=SSE41 ISA_ATEN=default).
ISA_TESTS := tests/integration/test_run_settings.py tests/runtime/test_thread_count.py tests/kernels/test_amp.py tests/hpex/test_hmp.py \
  tests/hpex/test_hmp_shape_inference.py tests/kernels/test_linear_ce.py tests/compiler/test_channels_last.py tests/compiler/test_layouts.py \
  tests/dispatch/test_gradients_like_cpu.py tests/lab/test_core_training.py tests/hpex/test_fused_sdpa.py tests/kernels/test_sdpa_one_node.py \
  tests/kernels/test_scaled_mm.py tests/kernels/test_quant_ops.py
ifeq ($(shell uname -m),aarch64)
ISA_ONEDNN ?= ADVANCED_SIMD
ISA_ATEN ?= default
else
ISA_ONEDNN ?= AVX2
ISA_ATEN ?= avx2
endif
ISA_ENV := ONEDNN_MAX_CPU_ISA=$(ISA_ONEDNN) ATEN_CPU_CAPABILITY=$(ISA_ATEN) OMP_NUM_THREADS=1
test-isa: setup
	@cpu=$$($(PY) -c 'import os; print(min(os.sched_getaffinity(0)))'); \
	if command -v taskset >/dev/null 2>&1; then pin="taskset -c $$cpu"; \
	else pin=""; echo "WARNING: taskset not found: the ISA run is not pinned to one core"; fi; \
	$(RUN) $(ISA_ENV) $$pin $(PY) -c 'import os, sys, torch; \
	print("== test-isa: ATen", torch.backends.cpu.get_cpu_capability(), "| threads", torch.get_num_threads(), \
	"| cores", sorted(os.sched_getaffinity(0)), flush=True); torch._C._verbose.mkldnn_set_verbose(1); \
	torch.nn.functional.conv2d(torch.randn(8, 16, 32, 32), torch.randn(16, 16, 3, 3))' | grep -E "^== test-isa|isa:"; \
	$(RUN) $(ISA_ENV) $$pin $(PY) -m pytest $(ISA_TESTS) $(PYTEST_ARGS)

bench: setup
	$(RUN) $(PY) -m hpu_lab.lab.bench

# The notebooks' sources are notebooks/NN_*.py (jupytext percent format); this runs them in order
# with nbclient and writes each NN_*.ipynb with its outputs (no widget state: static pictures).
notebooks: $(VENV)/.installed
	$(RUN) $(PY) notebooks/run_notebooks.py $(NB)

# Intel's own bridge tests (tests/pytest_working: lazy/ + any_mode/, --mode lazy, their skip list), one
# pytest process per file, 2 at a time. BRIDGE is a checkout of HabanaAI/gaudi-pytorch-bridge, kept
# outside this project. BRIDGE_ARGS: e.g. --files test_hpu_abs --out /tmp/r.json (see --help).
BRIDGE_ARGS ?=
bridge-suite: setup
	@test -n "$(BRIDGE)" || { echo "usage: make bridge-suite BRIDGE=<path of a gaudi-pytorch-bridge checkout>"; exit 2; }
	$(RUN) $(PY) -m hpu_lab.tools.bridge_suite "$(BRIDGE)" $(BRIDGE_ARGS)

# The HPU tests of the libraries Gaudi users train with (lightning-habana, DeepSpeed, accelerate,
# optimum-habana), unchanged: checkouts kept outside this project (accelerate's test script ships in
# its package: ACCELERATE is optional). The libraries are the [clients] extra, installed here with torch
# pinned (a constraint) so that no client can replace it. Results go to docs/client_suites.md.
# CLIENT_ARGS: e.g. --suites fabric --files test_accelerator (see --help).
CLIENT_ARGS ?=
client-suites: setup
	@test -n "$(LIGHTNING_HABANA)$(DEEPSPEED)$(OPTIMUM_HABANA)$(ACCELERATE)" || { echo "usage: make client-suites LIGHTNING_HABANA=<checkout> DEEPSPEED=<checkout> OPTIMUM_HABANA=<checkout> [ACCELERATE=<checkout>]"; exit 2; }
	@echo "$(TORCH)" > $(VENV)/torch-constraint.txt
	$(PIP) install -q --progress-bar off -c $(VENV)/torch-constraint.txt -e '.[clients]'
	$(RUN) $(PY) -m hpu_lab.tools.client_suites $(if $(LIGHTNING_HABANA),--lightning-habana "$(LIGHTNING_HABANA)") \
	  $(if $(DEEPSPEED),--deepspeed "$(DEEPSPEED)") $(if $(OPTIMUM_HABANA),--optimum-habana "$(OPTIMUM_HABANA)") \
	  $(if $(ACCELERATE),--accelerate "$(ACCELERATE)") --doc docs/client_suites.md $(CLIENT_ARGS)

# The full differential runs (tests/ runs a sample of each): every sample of every OpInfo op in
# float32, bfloat16 and with gradients, lazy and eager; then random programs of both kinds (tensor
# programs; module programs: BatchNorm/dropout/RNN modules, discarded outputs, statistics read
# mid-step, save/load round trips), shrunk when they fail; then the mutation audit (which aten ops
# write arguments their schema does not declare: hpu_lab/ops/__init__.py HIDDEN_WRITES must list them).
# FUZZ_ARGS / PROGRAMS narrow it, e.g. make fuzz FUZZ_ARGS='f32-lazy --per-op 3' PROGRAMS=50;
# FUZZ_ARGS='grad-eager --shard 2/4' runs the second of four interleaved parts of the ops (in pieces).
FUZZ_ARGS ?=
PROGRAMS ?= 300
fuzz: $(VENV)/.installed
	@status=0; \
	$(RUN) $(PY) tests/opinfo_diff.py --isolate $(FUZZ_ARGS) || status=$$?; \
	$(RUN) $(PY) tests/fuzz_programs.py --programs $(PROGRAMS) || { rc=$$?; [ $$status != 0 ] || status=$$rc; }; \
	$(RUN) $(PY) tests/mutation_audit.py || { rc=$$?; [ $$status != 0 ] || status=$$rc; }; \
	exit $$status
