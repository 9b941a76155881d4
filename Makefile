# The two set-up commands: `make demo` and `make test`. Each creates .venv with
# the machine's python3 (3.11+) when missing and installs the project into it.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint schema bench soak scale load fleet notebooks clean postgres-binaries dropin-kills

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is required, found " + sys.version.split()[0])'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,bench,nb,langchain,openai-agents,service,iii,postgres,dask]'
	$(BIN)/python -m pip install --quiet --no-deps 'bfcl-eval==2026.3.23'
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ctxfold demo

# The PostgreSQL backend's tests start a throwaway server (tests/support/postgres_server.py)
# from Debian's postgresql binaries, installed here when missing (as root, with apt-get);
# CTXFOLD_TEST_POSTGRES=off leaves the backend out, =postgresql://... uses that server.
postgres-binaries:
	@if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null \
	    && [ -z "$${CTXFOLD_TEST_POSTGRES:-}" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing Debian's postgresql for the PostgreSQL backend's tests"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -q postgresql >/dev/null 2>&1 || \
	      { apt-get update -q >/dev/null && apt-get install -y -q postgresql >/dev/null; }; \
	  fi; \
	  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || \
	    echo "no PostgreSQL binaries: the PostgreSQL backend's tests will fail, saying why"; \
	fi

test: $(STAMP) postgres-binaries
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy folding solvers context_manager foldbench

# the request machine, long: at least SOAK_COMPILES compiles across every solver (and
# SOAK_PG_COMPILES with every store an agent's in PostgreSQL)
SOAK_COMPILES ?= 100000
SOAK_PG_COMPILES ?= 10000
# and threads sharing one manager: at least SOAK_APPENDS appends, all found after reopening
SOAK_APPENDS ?= 10000
# and damaged stores: SOAK_FUZZ seeded trials of flipped bytes, each answered by a typed error
SOAK_FUZZ ?= 200
# run the notebooks and save them with their outputs (small scale, small figures)
notebooks: $(STAMP)
	$(BIN)/python notebooks/execute.py

soak: $(STAMP) postgres-binaries
	$(BIN)/python tests/soak.py $(SOAK_COMPILES)
	$(BIN)/python tests/soak.py $(SOAK_PG_COMPILES) --postgres
	$(BIN)/python tests/soak_threads.py $(SOAK_APPENDS)
	FUZZ_TRIALS=$(SOAK_FUZZ) $(BIN)/python -m pytest -q -p no:cacheprovider tests/context_manager/store/test_damaged_store.py

# the framework drop-ins SIGKILLed mid-write: DROPIN_KILLS trials per integration, each
# reopened and checked (every acknowledged item once, the history agreeing with it)
DROPIN_KILLS ?= 50
dropin-kills: $(STAMP)
	DROPIN_KILL_TRIALS=$(DROPIN_KILLS) $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/integrations/test_dropin_kills.py

schema: $(STAMP)
	$(BIN)/python -c 'from folding.schema import write_schema; print(write_schema())'

bench: $(STAMP)
	$(BIN)/asv machine --yes > /dev/null && $(BIN)/asv run --python=same --quick --show-stderr

# ctxfold serve under load on loopback: LOAD_AGENTS agent loops of LOAD_TURNS turns with a
# configuration reload midway (out/load.json), then LOAD_KILLS SIGKILL trials, each
# restarted and checked: every acknowledged message found, every store audited
# (out/load-kills.json)
LOAD_AGENTS ?= 32
LOAD_TURNS ?= 200
LOAD_KILLS ?= 20
load: $(STAMP)
	$(BIN)/python benchmarks/load.py --agents $(LOAD_AGENTS) --turns $(LOAD_TURNS) --reload --out out/load.json
	$(BIN)/python benchmarks/load.py --agents 8 --kill-trials $(LOAD_KILLS) --out out/load-kills.json

# the agent loop's per-call cost against history length, ours and the peers:
# out/scale.json, out/scale.md and out/scale.png (SCALE_ARGS=--million adds 1M messages)
SCALE_SIZES ?= 1000 10000 100000
SCALE_UNIFIED_SIZES ?= 1000 5000 20000
SCALE_ARGS ?=
scale: $(STAMP)
	$(BIN)/python benchmarks/scale.py --fresh --method kv-stable --sizes $(SCALE_SIZES) --solve 75000 $(SCALE_ARGS)
	$(BIN)/python benchmarks/scale.py --method kv-unified --sizes $(SCALE_UNIFIED_SIZES) --peers none --plot out/scale.png

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis

# the store on PostgreSQL against SQLite: FLEET_WORKERS processes serving FLEET_AGENTS agents
# (FLEET_TURNS turns each) on a throwaway server, then the same on store files, per-call
# p50/p99 side by side; then a worker SIGKILLed every 10 s, FLEET_KILLS times; after each
# run every acknowledged message is checked and every store audited (out/fleet.json)
FLEET_WORKERS ?= 8
FLEET_AGENTS ?= 64
FLEET_TURNS ?= 100
FLEET_KILLS ?= 10
fleet: $(STAMP) postgres-binaries
	$(BIN)/python benchmarks/fleet.py --workers $(FLEET_WORKERS) --agents $(FLEET_AGENTS) --turns $(FLEET_TURNS) --kills $(FLEET_KILLS) --kill-every 10 --out out/fleet.json
