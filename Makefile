# The two commands:  make figures   (run every notebook, quick profile -> figures/)
#                    make test      (unit tests + the notebooks under nbval)
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export MPLBACKEND := Agg

.PHONY: all venv .venv figures test test-unit test-notebooks check-figures lab help
all: test

help:
	@echo "make figures   run notebooks/*.ipynb with the quick profile, writing figures/"
	@echo "make test      unit tests, then the notebooks under pytest --nbval-lax"
	@echo "make check-figures  fail if running the notebooks changed figures/ (after make figures or make test)"
	@echo "make lab       open the notebooks in JupyterLab"

# The environment. torch/torchvision are pinned to the releases this machine has on disk
# (other versions would be multi-GB downloads); the stamp makes this re-run only when
# pyproject.toml changes. ipykernel ships a `python3` kernelspec that jupyter_client
# resolves to the venv's own interpreter, so Papermill and nbval use this environment.
$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(VENV)/bin/pip install torch==2.14.1 torchvision==0.29.1
	$(VENV)/bin/pip install -e '.[test]'
	touch $(STAMP)

venv .venv: $(STAMP)

figures: $(STAMP)
	$(VENV)/bin/paper-repro notebooks run --profile quick

UNIT := $(PY) -m pytest tests -q
NBVAL := $(PY) -m pytest --nbval-lax --nbval-current-env -p no:cacheprovider notebooks/ -q
# nbval collects nothing (pytest exit 5) when there are no notebooks yet: skip it then.
HAVE_NOTEBOOKS := compgen -G 'notebooks/*.ipynb' > /dev/null

# Both suites always run; the target fails if either failed.
test: $(STAMP)
	@status=0; \
	echo "$(UNIT)"; $(UNIT) || status=1; \
	if $(HAVE_NOTEBOOKS); then echo "$(NBVAL)"; $(NBVAL) || status=1; \
	else echo "no notebooks/*.ipynb yet: nbval skipped"; fi; \
	exit $$status

test-unit: $(STAMP)
	$(UNIT)

test-notebooks: $(STAMP)
	@if $(HAVE_NOTEBOOKS); then echo "$(NBVAL)"; $(NBVAL); \
	else echo "no notebooks/*.ipynb yet: nbval skipped"; fi

# Every committed figure is reproducible and the timing-dependent ones are git-ignored, so after
# the notebooks have run (make figures, or make test: nbval runs them too) figures/ is unchanged.
check-figures:
	@dirty=$$(git status --porcelain -- figures); \
	if [ -n "$$dirty" ]; then echo "running the notebooks changed figures/:"; echo "$$dirty"; exit 1; fi; \
	echo "figures/ unchanged"

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/
