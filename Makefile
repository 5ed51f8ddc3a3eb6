# V-Rex RTL. Two commands: `make demo` (set up, run the main job on the bundled trace) and
# `make test` (set up, run every test). Everything is installed into .venv from PyPI.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TRACE ?= data/carphone_cut.npz
JOBS ?= 2

export PATH := $(abspath $(VENV))/bin:$(PATH)
export AMARANTH_USE_YOSYS := builtin

.PHONY: all demo test golden bench setup clean help

all: demo

help:
	@echo "make demo     set up and run the main job on the bundled trace"
	@echo "make test     set up and run the whole test suite"
	@echo "make golden   [TRACE=path] every method on a trace -> build/golden/<trace>/"
	@echo "make bench    golden-model speed on the bundled trace -> build/bench/golden.json"

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
	@touch $@

demo: $(STAMP)
	$(PY) -m golden.cli --trace $(TRACE)

golden: $(STAMP)
	$(PY) -m golden.cli --trace $(TRACE)

bench: $(STAMP)
	$(PY) -m golden.bench --trace $(TRACE)

test: $(STAMP)
	$(PY) -m pytest -n $(JOBS) verif

clean:
	rm -rf build sim_build
