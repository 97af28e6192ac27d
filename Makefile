# Each target bootstraps .venv from the pinned requirements on first use.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python

# Test processes; --dist loadfile keeps each file's module fixtures in one process. Three on
# 2 cores, because every process waits at times (on the commands tests start, on the shared
# fixtures' lock): 8 min 41 s -> 8 min 22 s and 9 min 41 s -> 7 min 53 s, AMD EPYC, 2 cores.
# --no-loadscope-reorder: files in the order tests/conftest.py gives, longest first.
TEST_WORKERS ?= 3

DEMO_DIR ?= runs/demo
# Sized for 2 CPU cores and < 10 minutes: ELECTRA-Small, short schedule, learned 8k vocab.
# The probe shows, beside a random encoder, whether the encoder is becoming useful for
# the bundled sentiment task.
DEMO_FLAGS ?= --preset small --vocab_size 8192 --batch_size 32 --train_steps 200 \
	--warmup_steps 100 --learning_rate 2e-4 --checkpoint_every 50 --eval_batches 10 \
	--probe_task data/demo/sentiment/train.jsonl --probe_eval_file data/demo/sentiment/dev.jsonl

.PHONY: pretrain test clean-demo

# The package itself is installed editable, with its console commands (electra-pretrain, ...).
$(VENV)/.runtime: requirements.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements.txt
	$(PY) -m pip install -q --disable-pip-version-check --no-deps -e .
	touch $@

$(VENV)/.dev: $(VENV)/.runtime requirements-dev.txt requirements-beam.txt
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $@

pretrain: $(VENV)/.runtime
	$(PY) pretrain.py --corpus 'data/demo/corpus/*.txt' --model_dir $(DEMO_DIR) $(DEMO_FLAGS)

test: $(VENV)/.dev
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder tests

clean-demo:
	rm -rf $(DEMO_DIR)
