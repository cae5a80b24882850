# imagesvc: `make run` serves the demo library; `make test` runs the whole suite. Both set themselves up.
VENV ?= .venv
PYTHON ?= python3.11
SUM := $(shell cat pyproject.toml scripts/bootstrap.sh scripts/uv_install.py scripts/arabic-dictionary.sh | cksum | cut -d' ' -f1)
# Two installs: `make run` gets what serving needs (no torch, CLIP or test tools), `make test` everything. A full
# install also serves, so `make run` after `make test` installs nothing more.
STAMP := $(VENV)/.installed-test-$(SUM)
SERVE_STAMP := $(VENV)/.installed-serve-$(SUM)

.PHONY: run test test-fast lint bench system-deps clean

$(STAMP): pyproject.toml scripts/bootstrap.sh scripts/uv_install.py scripts/arabic-dictionary.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh $(VENV) test
	rm -f $(VENV)/.installed-*
	touch $@ $(SERVE_STAMP)

$(SERVE_STAMP): pyproject.toml scripts/bootstrap.sh scripts/uv_install.py scripts/arabic-dictionary.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh $(VENV) serve
	rm -f $(VENV)/.installed-*
	touch $@

run: $(SERVE_STAMP)
	$(VENV)/bin/python scripts/install-openseadragon.py
	$(VENV)/bin/imagesvc models
	$(VENV)/bin/imagesvc demo
	$(VENV)/bin/imagesvc serve

system-deps:
	bash scripts/install-system-deps.sh
	bash scripts/install-viewer.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) system-deps lint
	$(VENV)/bin/imagesvc models
	$(VENV)/bin/pytest --durations=30

# The edit-test loop: every test not marked slow (docs/testing.md), stopping at the first failure.
test-fast: $(STAMP)
	$(VENV)/bin/pytest -m "not slow" -x -q --durations=20

bench: $(STAMP) system-deps
	$(VENV)/bin/python benchmarks/tiers.py
	$(VENV)/bin/python benchmarks/access.py

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache
