# imagesvc: `make run` serves the demo library; `make test` runs the whole suite. Both set themselves up.
VENV ?= .venv
PYTHON ?= python3.11
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml scripts/bootstrap.sh | cksum | cut -d' ' -f1)

.PHONY: run test lint bench system-deps clean

$(STAMP): pyproject.toml scripts/bootstrap.sh
	PYTHON=$(PYTHON) bash scripts/bootstrap.sh $(VENV)
	rm -f $(VENV)/.installed-*
	touch $@

run: $(STAMP)
	$(VENV)/bin/imagesvc demo
	$(VENV)/bin/imagesvc serve

system-deps:
	bash scripts/install-system-deps.sh
	bash scripts/install-viewer.sh

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: $(STAMP) system-deps lint
	$(VENV)/bin/pytest

bench: $(STAMP) system-deps
	$(VENV)/bin/python benchmarks/tiers.py
	$(VENV)/bin/python benchmarks/access.py

clean:
	rm -rf $(VENV) data .pytest_cache .ruff_cache
