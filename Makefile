# lengen: two commands for a fresh machine with Python >= 3.11.
#   make test   install into .venv, then run the unit tests and every notebook (strict nbval, twice:
#               native CPU kernels, then portable ones)
#   make study  install, then execute every notebook in place (trains only what results/ lacks; an
#               unchanged study leaves the files as they were: no cell timings, stable widget ids)
#   make test-fast   lint and the fast unit tests, for the edit-run loop
#   make lab    open the notebooks in JupyterLab
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test test-fast test-browser lab lint format study sweep sync bench clean-venv

install: $(STAMP)

$(STAMP): requirements.txt pyproject.toml
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Python >= 3.11 is needed, found " + sys.version'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

# The notebooks run twice: as they are, then with PyTorch and MKL forced onto other CPU kernels
# (a reader's CPU may lack AVX-512 or AVX2); their checked outputs must not change.
PORTABLE := ATEN_CPU_CAPABILITY=default MKL_ENABLE_INSTRUCTIONS=SSE4_2

test: install lint
	$(BIN)/python -m pytest --nbval tests notebooks
	$(PORTABLE) $(BIN)/python -m pytest --nbval notebooks

# the edit-run loop: lint and the unit tests that neither train nor start processes (under a minute)
test-fast: install lint
	$(BIN)/python -m pytest -m "not slow" tests

# the explorer as a reader sees it: JupyterLab serves notebook 05, headless Chromium (Debian's
# chromium package; .ci/run installs it) opens it, runs it and moves the widgets
test-browser: install
	$(BIN)/python -m pytest -s browser_tests

# open the study in JupyterLab (widgets render; jupytext keeps each .ipynb and its .py in sync)
lab: install
	$(BIN)/jupyter lab --allow-root notebooks  # --allow-root: JupyterLab refuses root otherwise (containers, CI)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

study: install
	for nb in notebooks/*.ipynb; do \
		$(BIN)/jupyter nbconvert --to notebook --execute --inplace --ExecutePreprocessor.timeout=-1 \
			--ExecutePreprocessor.record_timing=False $$nb || exit 1; \
		$(BIN)/python tools/tidy_notebooks.py $$nb >/dev/null || exit 1; \
		$(BIN)/jupytext --sync $$nb >/dev/null || exit 1; \
	done

sweep: install
	$(BIN)/python -m lengen_helpers sweep

bench: install
	$(BIN)/python -m lengen_helpers bench-train
	$(BIN)/python -m lengen_helpers bench-kv

sync: install
	$(BIN)/jupytext --sync notebooks/*.ipynb

clean-venv:
	rm -rf $(VENV)
