# Every target sets up .venv itself, so a fresh clone needs only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: demo test e2e lint typecheck generate stubs bench chaos image venv clean

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $@

venv: $(STAMP)

## demo: run the main job on a simulated node (fixture host, fake kubelet, real agent)
demo: $(STAMP)
	$(VENV)/bin/erdma sim
	$(VENV)/bin/erdma sim --variant gpu

## test: lint, type-check and run the whole suite (3 pytest-xdist workers; tests/conftest.py)
test: $(STAMP) lint typecheck
	$(PY) -m pytest -q -ra -n 3

## e2e: only tests/e2e: the real agent against a real kubelet, containerd and API server (root)
e2e: $(STAMP)
	$(PY) -m pytest tests/e2e -q -ra

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

## generate: regenerate docs/configuration.md and the chart's schema from the settings models
generate: $(STAMP)
	$(PY) scripts/generate_settings.py

## stubs: regenerate src/erdma/api from proto/ (the generated files are committed)
stubs: $(STAMP)
	$(PY) proto/generate.py

## bench: the agent and controller benchmarks (results go in bench/RESULTS.md)
bench: $(STAMP)
	$(PY) -m bench.bench_agent
	$(PY) -m bench.bench_controller_cloud --nodes 1000
	$(PY) -m bench.bench_node_ready --nodes 50
	$(PY) -m bench.bench_controller_scale --nodes 5000
	$(PY) -m bench.bench_leader --rounds 5
	$(PY) -m bench.bench_dra_slices --rounds 20

## chaos: the fault suite at full trial counts; rewrites the table in docs/reliability.md
chaos: $(STAMP)
	$(PY) -m bench.chaos --write-docs

IMAGE ?= erdma-k8s/erdma:0.1.0
## image: the one container image for all programs (needs a Docker engine)
image:
	docker build -f deploy/docker/Dockerfile -t $(IMAGE) .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
