# The README's two commands are `make smoke` and `make test`; both create .venv if missing.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.requirements-installed
OUT    ?= runs/smoke
# Idle OpenMP threads sleep instead of spinning: on a shared or oversubscribed CPU (two processes of a
# DDP test, several helpers) spinning threads slowed PyTorch's CPU kernels several times over.
export OMP_WAIT_POLICY ?= PASSIVE

# Every numbered script, in order (01 trains what 02 probes, ...).
SMOKE_SCRIPTS := $(sort $(wildcard 0[1-8]_*.py))

.PHONY: install smoke test lint clean-smoke slurm-up slurm-down slurm-status

$(STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.txt
	touch $(STAMP)

install: $(STAMP)

## smoke: install, then run every numbered script on the offline default (--preset smoke);
## 08_make_figures.py comes last and draws the figures and the claims report from their records
smoke: $(STAMP)
	@set -e; for script in $(SMOKE_SCRIPTS); do \
		echo "== $(PY) $$script --preset smoke --out $(OUT)"; \
		$(PY) $$script --preset smoke --out $(OUT); \
	done; echo "smoke: all $(words $(SMOKE_SCRIPTS)) scripts finished; results under $(OUT)/"; \
	echo "smoke: figures and tables in $(OUT)/figures/, claims report $(OUT)/figures/claims.md (smoke scale: not evidence about the paper)"

## test: install, then run the whole test suite (ruff included, as a test)
test: $(STAMP)
	$(PY) -m pytest

## slurm-up / slurm-down: a real single-node SLURM cluster on this Debian machine (as root;
## installs munge and slurm if missing; state under /tmp/ds-slurm-<uid>; see slurm/README.md).
## `make test` brings it up and down by itself for the tests marked slurm.
slurm-up:
	bash slurm/cluster.sh up

slurm-down:
	bash slurm/cluster.sh down

slurm-status:
	bash slurm/cluster.sh status

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean-smoke:
	rm -rf $(OUT)
