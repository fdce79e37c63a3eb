# Every target sets up .venv itself, so a fresh clone needs only python3 (>= 3.11) and make.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: help demo test e2e lint typecheck generate stubs bench chaos image push lock venv clean

$(STAMP): pyproject.toml
	@echo "Setting up $(VENV) (1-2 minutes; reused until pyproject.toml changes):"
	@test -x $(PY) || { echo "  creating the virtualenv $(VENV)"; $(PYTHON) -m venv $(VENV); }
	@echo "  installing erdma-k8s and its test tools with pip"
	@$(PY) -m pip install -q --upgrade pip
	@$(PY) -m pip install -q -e '.[test]'
	@rm -f $(VENV)/.installed-*
	@touch $@

## help: list the targets and what each does
help:
	@awk '/^## [a-z0-9-]+: / { name = $$2; sub(/:$$/, "", name); text = $$0; \
		sub(/^## [^:]*: /, "", text); printf "  %-10s %s\n", name, text }' $(MAKEFILE_LIST)

## venv: only set up .venv (every other target does it first)
venv: $(STAMP)

## demo: run the main job on simulated nodes (the real agent, a fake kubelet)
demo: $(STAMP)
	$(VENV)/bin/erdma sim
	$(VENV)/bin/erdma sim --variant gpu

## test: lint, type-check and run the whole suite (3 pytest-xdist workers; tests/conftest.py)
test: $(STAMP) lint typecheck
	$(PY) -m pytest -q -ra -n 3

## e2e: only tests/e2e: the real agent against a real kubelet, containerd and API server (root)
e2e: $(STAMP)
	$(PY) -m pytest tests/e2e -q -ra

## lint: ruff check, ruff format --check and the import layer contracts
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/lint-imports

## typecheck: mypy
typecheck: $(STAMP)
	$(VENV)/bin/mypy

## generate: regenerate docs/configuration.md, the install guide's values table and the chart's values.yaml defaults and schema from the settings models
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
	$(PY) -m bench.bench_allocate_cpu
	$(PY) -m bench.bench_ecs_transport --calls 2000
	$(PY) -m bench.bench_dra_slices --rounds 20

## chaos: the fault suite at full trial counts; rewrites the table in docs/reliability.md
chaos: $(STAMP)
	$(PY) -m bench.chaos --write-docs

REGISTRY ?= docker.io
## image: the one image, docker.io/erdma-k8s/erdma:<version> (or IMAGE=...), built offline from deploy/docker/*.lock (root, mmdebstrap, Docker)
image: $(STAMP)
	$(PY) scripts/image.py build $(if $(IMAGE),--tag $(IMAGE))

## push: tag the image as REGISTRY/erdma-k8s/erdma:<version> and push it (make push REGISTRY=registry.example.com)
push: image
	$(PY) scripts/image.py push --registry $(REGISTRY) $(if $(IMAGE),--image $(IMAGE))

## lock: rewrite deploy/docker/*.lock from the registries (Debian packages; Python wheels with hashes)
lock: $(STAMP)
	$(PY) -m pip install -q uv==0.13.8
	$(PY) scripts/image.py lock

## clean: remove .venv and the tool caches
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
