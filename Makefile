# The two commands:  make figures   (run every notebook, quick profile -> figures/)
#                    make test      (unit tests + the notebooks under nbval, in 2 processes)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# No MPLBACKEND here: a notebook kernel's default backend (inline) is what shows figures in
# JupyterLab and embeds them in the executed copies; the tests set Agg for themselves.

.PHONY: all venv .venv figures test test-unit test-notebooks check-figures lab help lock selfcheck
all: test

help:
	@echo "make figures   run notebooks/*.ipynb with the quick profile, writing figures/"
	@echo "make test      unit tests and the notebooks under pytest --nbval-lax, JOBS=2 processes"
	@echo "make check-figures  fail if running the notebooks changed figures/ (after make figures or make test)"
	@echo "make lab       open the notebooks in JupyterLab"
	@echo "make lock      re-resolve requirements.lock from pyproject.toml"
	@echo "make selfcheck the GPU self-check (DEVICE=cpu to try it without a GPU), report in out/"

# The environment: exactly the versions in requirements.lock (the same file CI, the Docker
# image and environment.yml install), then the project itself without resolving anything
# again. The stamp makes this re-run only when the lock or pyproject.toml changes.
# ipykernel ships a `python3` kernelspec that jupyter_client resolves to the venv's own
# interpreter, so Papermill and nbval use this environment.
$(STAMP): requirements.lock pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install -r requirements.lock
	$(VENV)/bin/pip install --no-deps -e .
	touch $(STAMP)

# requirements.lock: pyproject.toml's dependencies plus the [test] extra, resolved with uv for
# CPython 3.11.7 on Linux x86_64 (glibc >= 2.34). Versions already in the lock are kept
# (they are passed as constraints); `make lock UPGRADE=1` re-resolves everything to the
# newest allowed releases. uv lives in a throwaway venv outside the project; the
# extra package indexes of this machine's pip configuration are passed on to it.
LOCK_TOOL ?= /tmp/paper-repro-lock-tool
UV := $(LOCK_TOOL)/bin/uv
LOCK_INDEXES = $(foreach u,$(shell pip config get global.extra-index-url 2>/dev/null),--extra-index-url $(u))
LOCK_KEEP = $(if $(UPGRADE),,-c requirements.lock.old)
lock:
	test -x $(UV) || { python3 -m venv $(LOCK_TOOL) && $(LOCK_TOOL)/bin/pip install -q uv==0.13.9; }
	sed -n '1,/^$$/p' requirements.lock > requirements.lock.new
	sed '/^#/d; /^ /d; /^$$/d' requirements.lock > requirements.lock.old
	$(UV) pip compile pyproject.toml --extra test --python-version 3.11.7 \
	    --python-platform x86_64-manylinux_2_34 --index-strategy unsafe-best-match \
	    --no-emit-index-url --no-header --no-annotate $(LOCK_INDEXES) $(LOCK_KEEP) \
	    -o requirements.lock.body
	cat requirements.lock.body >> requirements.lock.new
	mv requirements.lock.new requirements.lock
	rm -f requirements.lock.old requirements.lock.body

venv .venv: $(STAMP)

# figures/MACHINE names the CPU model and torch version the committed figures were drawn with.
figures: $(STAMP)
	$(VENV)/bin/paper-repro notebooks run --profile quick
	$(PY) -m paper_repro.hardware > figures/MACHINE

UNIT := $(PY) -m pytest tests -q
NBVAL_FLAGS := --nbval-lax --nbval-current-env -p no:cacheprovider
NBVAL := $(PY) -m pytest $(NBVAL_FLAGS) notebooks/ -q

# make test: the unit tests and the notebooks under nbval in one pytest run, spread over JOBS
# processes (pytest-xdist); --dist loadfile keeps a file's tests, and a notebook's cells, in one
# process, in order. JOBS=1 runs them one after another.
JOBS ?= 2
test: $(STAMP)
	$(PY) -m pytest -q -n $(JOBS) --dist loadfile $(NBVAL_FLAGS) tests notebooks

test-unit: $(STAMP)
	$(UNIT)

test-notebooks: $(STAMP)
	$(NBVAL)

# Every committed figure is reproducible and the timing-dependent ones are git-ignored, so after
# the notebooks have run (make figures, or make test: nbval runs them too) figures/ is unchanged.
# The quick runs are bitwise repeatable on one CPU model, not across models: on another machine
# than figures/MACHINE names, changed figures are listed and not failed. The machine is read
# from the committed figures/MACHINE (HEAD), which drew the committed figures: `make figures`
# has just rewritten the copy in the work tree with this machine.
check-figures: $(STAMP)
	@dirty=$$(git status --porcelain -- figures); \
	drawn=$$(git show HEAD:figures/MACHINE 2>/dev/null || cat figures/MACHINE 2>/dev/null || echo unknown); \
	here=$$($(PY) -m paper_repro.hardware); \
	if [ -z "$$dirty" ]; then echo "figures/ unchanged"; exit 0; fi; \
	echo "running the notebooks changed figures/:"; echo "$$dirty"; \
	if [ "$$drawn" != "$$here" ]; then \
	  echo "(figures/ were drawn on '$$drawn', this is '$$here': the quick runs differ in the last"; \
	  echo " bits across CPU models and torch versions, so this is not a failure here)"; exit 0; fi; \
	echo "(figures/MACHINE is this machine: the notebooks are not deterministic, or the figures"; \
	echo " were not redrawn after a change; run 'make figures', look at the figures and commit them)"; exit 1

# jupyter refuses to run as root (as in a container) without --allow-root. LAB_ENV drops an
# MPLBACKEND of the caller's shell (the Docker image sets Agg): with it the kernels draw nothing.
LAB_ENV := env -u MPLBACKEND
lab: $(STAMP)
	$(LAB_ENV) $(VENV)/bin/jupyter lab notebooks/ $(if $(filter 0,$(shell id -u)),--allow-root,)

# The self-check of a GPU server (each piece in its own process, at most 10 minutes).
DEVICE ?= cuda
selfcheck: $(STAMP)
	mkdir -p out
	$(PY) -m paper_repro.selfcheck --device $(DEVICE) --json out/selfcheck.json --time-limit 600
