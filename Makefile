# GPU Ledger. `make demo` and `make test` do all set-up on a fresh machine.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
MANAGE := $(PY) manage.py
DEMO_DAYS ?= 7
DEMO_SEED ?= 42
HOST ?= 127.0.0.1
PORT ?= 8000
# Two test workers (pytest-xdist), a test file per worker at a time so module fixtures (a real
# Prometheus, Chromium, the Kubernetes API server) start once per file; each worker has its own
# test database. `make test PYTEST_ARGS=tests/alerts` runs one folder in one process.
PYTEST_ARGS ?= -n 2 --dist loadfile

.PHONY: demo run worker beat test lint format bench system-deps venv vendor clean

# Local runs (demo, run, worker, beat) are development runs: DEBUG on, a secret key created once
# in .demo-secret-key (git-ignored) so logins survive restarts, and an in-process cache for the
# single dev server. Production sets its own environment (README "Running it for real").
DEV_ENV = DEBUG=$${DEBUG:-true} SECRET_KEY="$${SECRET_KEY:-$$(cat .demo-secret-key)}" \
	CACHE_URL=$${CACHE_URL:-locmem://}
# Checks that load the settings without serving anything (lint, migrations check).
CHECK_ENV = DJANGO_SETTINGS_MODULE=config.settings_test

.demo-secret-key:
	$(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))' > $@
	chmod 600 $@

$(VENV)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -r requirements-dev.txt
	touch $@

# The deep backfill's C XOR chunk decoder, built in place for the virtualenv's Python
# (ledger/deep/build_native.py; without it the chunks are decoded with numpy, slower).
XOR_MODULE := ledger/deep/_xor$(shell $(PYTHON) -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
$(XOR_MODULE): ledger/deep/_xor.c ledger/deep/build_native.py $(VENV)/.installed
	$(PY) ledger/deep/build_native.py

venv: $(VENV)/.installed $(XOR_MODULE)

# plotly.js is served from static/vendor/, copied from the pinned `plotly` package (no CDN).
static/vendor/plotly.min.js: $(VENV)/.installed
	mkdir -p static/vendor
	cp "$$($(PY) -c 'import plotly, os; print(os.path.join(os.path.dirname(plotly.__file__), "package_data", "plotly.min.js"))')" $@

vendor: static/vendor/plotly.min.js

## demo: venv, install, migrate, simulate a 7-day fleet on two clusters (one on Kueue, one on
## Volcano), create demo users, serve on :8000 while both fleets keep moving (one simulated
## window a minute, stopped with the server)
# One end for the histories and the followers, so each follower replays the same fleet.
DEMO_END := $(shell date -u +%Y-%m-%dT%H:%M:%S+00:00)
DEMO_SIM = simulate --days $(DEMO_DAYS) --seed $(DEMO_SEED) --end $(DEMO_END)
DEMO_VOLCANO_SEED ?= 43
DEMO_VOLCANO = simulate --days $(DEMO_DAYS) --seed $(DEMO_VOLCANO_SEED) --end $(DEMO_END) \
	--cluster demo-volcano --scheduler volcano
demo: venv vendor .demo-secret-key
	$(DEV_ENV) $(MANAGE) migrate --no-input
	$(DEV_ENV) $(MANAGE) $(DEMO_SIM) --reset
	$(DEV_ENV) $(MANAGE) $(DEMO_VOLCANO) --reset
	$(DEV_ENV) $(MANAGE) demo_users --url http://$(HOST):$(PORT)/
	$(DEV_ENV) $(MANAGE) $(DEMO_SIM) --follow & follower=$$!; \
	$(DEV_ENV) $(MANAGE) $(DEMO_VOLCANO) --follow & volcano=$$!; \
	trap 'kill -TERM $$follower $$volcano 2>/dev/null; wait $$follower $$volcano' EXIT; \
	$(DEV_ENV) $(MANAGE) runserver $(HOST):$(PORT)

## run: the web server on the current database
run: venv vendor .demo-secret-key
	$(DEV_ENV) $(MANAGE) migrate --no-input
	$(DEV_ENV) $(MANAGE) runserver $(HOST):$(PORT)

worker: venv .demo-secret-key
	$(DEV_ENV) $(VENV)/bin/celery -A config worker --loglevel=INFO

beat: venv .demo-secret-key
	$(DEV_ENV) $(VENV)/bin/celery -A config beat --loglevel=INFO

# System packages the integration tests drive: Prometheus, Alertmanager, Chromium, docker-compose
# (validation only).
system-deps:
	@missing=""; \
	command -v prometheus >/dev/null || missing="$$missing prometheus"; \
	command -v prometheus-alertmanager >/dev/null || missing="$$missing prometheus-alertmanager"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v docker-compose >/dev/null || missing="$$missing docker-compose"; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi

## test: install what the tests need, start what they need, run the whole suite
test: venv vendor system-deps
	# Compose refuses to render without SECRET_KEY and POSTGRES_PASSWORD (from .env); any validates.
	SECRET_KEY=compose-config-validation-only POSTGRES_PASSWORD=compose-config-validation-only \
	  docker-compose -f docker-compose.yml config -q
	bash scripts/services.sh
	# Bytecode is written even where the environment says not to (PYTHONDONTWRITEBYTECODE, as in
	# containers): every worker and every child process a test starts would compile the project
	# and the rewritten test modules again, about 6 CPU-seconds each.
	PYTHONDONTWRITEBYTECODE= $(VENV)/bin/pytest $(PYTEST_ARGS)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(CHECK_ENV) $(VENV)/bin/mypy .

format: venv
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

## bench: every benchmark at full scale (hours; figures in bench/RESULTS.md), on PostgreSQL at
## 127.0.0.1:5432 with a database of its own each; `make bench BENCH_ARGS=--small` runs the same
## steps at a scale of seconds. Prometheus (collect, chargeback) comes with system-deps.
BENCH_ARGS ?=
BENCH_PG := postgres://postgres@127.0.0.1:5432
bench: venv system-deps
	DATABASE_URL=$(BENCH_PG)/postgres bash scripts/services.sh
	DATABASE_URL=$(BENCH_PG)/gpuledger_bench $(PY) bench/ingest_pure.py $(BENCH_ARGS)
	$(PY) bench/collect.py $(BENCH_ARGS)
	$(PY) bench/collect.py --deep $(BENCH_ARGS)
	$(PY) bench/serving_hours.py --database gpuledger_bench_serving $(BENCH_ARGS)
	$(PY) bench/rollup.py --database-url $(BENCH_PG)/gpuledger_bench_rollup $(BENCH_ARGS)
	DATABASE_URL=$(BENCH_PG)/gpuledger_bench_sync $(PY) bench/sync.py $(BENCH_ARGS)
	DATABASE_URL=$(BENCH_PG)/gpuledger_bench_sync $(PY) bench/sync.py --scheduler volcano \
	  $(BENCH_ARGS)
	DATABASE_URL=$(BENCH_PG)/gpuledger_bench_sync $(PY) bench/sync.py --scheduler kai $(BENCH_ARGS)
	$(PY) bench/pages.py --database-url $(BENCH_PG)/gpuledger_bench_pages $(BENCH_ARGS)
	$(PY) bench/pages_usage.py --database-url $(BENCH_PG)/gpuledger_bench_usage $(BENCH_ARGS)
	$(PY) bench/chargeback.py --database-url $(BENCH_PG)/gpuledger_bench_chargeback $(BENCH_ARGS)
	$(PY) bench/alerts.py --database-url $(BENCH_PG)/gpuledger_bench_alerts --runs 5 \
	  --backfill-hours 24 $(BENCH_ARGS)
	$(PY) bench/storage.py --database-url $(BENCH_PG)/gpuledger_bench_storage $(BENCH_ARGS)
	$(PY) bench/queue_levels.py --database-url $(BENCH_PG)/gpuledger_bench_queue_levels $(BENCH_ARGS)
	$(PY) bench/metrics.py --database-url $(BENCH_PG)/gpuledger_bench_metrics $(BENCH_ARGS)

clean:
	rm -rf $(VENV) staticfiles .pytest_cache .ruff_cache .mypy_cache gpuledger.sqlite3*
	rm -f ledger/deep/_xor.*.so
