# nvshmem-dsl: the two set-up commands are `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
# The CUDA flavour of the NVSHMEM wheel and numba-cuda to install: cu12 or cu13.
CUDA   ?= cu12
EXTRAS ?= $(CUDA),cute,triton,mpi,test,docs

.PHONY: demo test test-all generate check-generated docs gpu-test bench bench-check clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[$(EXTRAS)]" mpich
	touch $@

demo: $(VENV)/.installed generate
	$(PY) -m nvshmem_dsl demo

test: $(VENV)/.installed check-generated
	$(PY) -m pytest -q -m "not gpu"

generate: $(VENV)/.installed
	$(PY) -m codegen generate

check-generated: $(VENV)/.installed
	$(PY) -m codegen check

docs: $(VENV)/.installed
	$(PY) -m sphinx -W -q -b html docs docs/_build/html

clean:
	rm -rf $(VENV) docs/_build build dist *.egg-info

# On a GPU machine: the whole GPU suite under our launcher and mpirun, 2 PEs (MPS started when
# they share a GPU); e.g. GPU_TEST_ARGS="--pes 1,2,4,8" for every PE count.
gpu-test: $(VENV)/.installed
	$(PY) tests/gpu/run_suite.py $(GPU_TEST_ARGS)

bench: $(VENV)/.installed
	$(PY) bench/run.py
	$(PY) bench/comm_run.py $(COMM_BENCH_ARGS)

bench-check: $(VENV)/.installed
	$(PY) bench/check.py
