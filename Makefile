# VoiceFactory: `make demo` runs the product end to end, `make test` runs every test.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):/usr/local/go/bin:$(PATH)
# libssl-dev zlib1g-dev pkg-config: deploy/tools/install.py builds kcat with librdkafka 2.12.1
DEBIAN_PACKAGES := espeak-ng sox libsndfile1 kcat maven ffmpeg nginx chromium libssl-dev zlib1g-dev pkg-config
STAMP := $(VENV)/.installed

.PHONY: help setup demo test unit integration test-cluster lint check-deploy bench down clean

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

setup: $(STAMP)  ## Debian packages (and Node.js with npm, for ajv) + .venv with the project, dev tools and the CosyVoice extra (idempotent)

$(STAMP): pyproject.toml constraints.txt
	@missing=""; for p in $(DEBIAN_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || missing="$$missing $$p"; \
	done; \
	command -v npm >/dev/null 2>&1 || missing="$$missing nodejs npm"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -c constraints.txt -e '.[dev,cosyvoice]'
	@# Resemblyzer's wheel carries the GE2E weights; its metadata pins packages that no longer
	@# install (typing, webrtcvad), so it goes in without them: pyproject lists its real needs.
	$(BIN)/pip install -q --no-deps 'resemblyzer==0.1.4'
	@touch $(STAMP)

demo: setup  ## start the local stack, register a voice, synthesize zh/yue/en lines, print where the audio is
	$(BIN)/voicefactory demo

test: setup lint check-deploy  ## lint, type-check, deploy checks, unit, CosyVoice real-code and integration tests (starts and stops the real stack), then the cluster suite
	$(BIN)/pytest -q
	$(MAKE) --no-print-directory test-cluster

unit: setup  ## unit tests only (no servers)
	$(BIN)/pytest -q tests/unit

integration: setup  ## integration tests only (real Kafka + S3)
	$(BIN)/pytest -q -m integration tests/integration

test-cluster: setup  ## the three-node SASL_SSL cluster suite: security refusals, leader kill -9 under load through the gateway and kcat (starts and stops `dev up --cluster` unless it runs)
	$(BIN)/python -m deploy.tools.install kcat
	$(BIN)/pytest -q -m cluster tests/integration/cluster

bench: setup  ## quick benchmarks on the local stack (about 13 min): .vf/bench/quick.json + report.md
	@# Kafka's log in RAM on a first start, as the recorded runs had it (docs/benchmarks.md,
	@# "Machine and conditions"); a store already on disk is kept, since tmpfs would hide it.
	if [ -e "$${VF_STATE_DIR:-.vf}/kafka/data" ]; then $(BIN)/voicefactory dev up; \
	else $(BIN)/voicefactory dev up --kafka-tmpfs; fi
	$(BIN)/voicefactory bench --quick --json .vf/bench/quick.json --plots-dir .vf/bench/img

lint: setup  ## ruff and mypy --strict
	$(BIN)/ruff check .
	$(BIN)/mypy

check-deploy: setup  ## install the deploy checkers (cached) and validate manifests, rules, dashboard, Dockerfiles, compose, the docs' event examples (ajv)
	$(BIN)/python -m deploy.tools.install
	$(BIN)/python -m deploy.checks

down:  ## stop the local stack started from this checkout
	@test -x $(BIN)/voicefactory && $(BIN)/voicefactory dev down || true

clean: down  ## remove the local state (.vf/) and the virtualenv
	rm -rf .vf $(VENV)
