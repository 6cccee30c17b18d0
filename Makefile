# The README's two commands are `make smoke` and `make test`; both create .venv if missing. `make mini`
# (README, section "Results") reproduces the committed results/mini at reduced scale on real data.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.requirements-installed
OUT    ?= runs/smoke
# Idle OpenMP threads sleep instead of spinning: on a shared or oversubscribed CPU (two processes of a
# DDP test, several helpers) spinning threads slowed PyTorch's CPU kernels several times over.
export OMP_WAIT_POLICY ?= PASSIVE

# Every numbered script, in order (01 trains what 02 probes, ...), with 08_make_figures.py last: it reads every record.
SMOKE_SCRIPTS := $(filter-out 08_make_figures.py,$(sort $(wildcard [0-9][0-9]_*.py))) 08_make_figures.py

.PHONY: install smoke mini mini-readme claim-tables test lint clean-smoke slurm-up slurm-down slurm-status

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

## mini: install, then the whole chain with --preset mini (real CIFAR-10 images and Tiny Shakespeare at reduced
## scale; 01-08 took 4,756 s and 09-10 1,971 s on a 2-core CPU on 2026-12-04, a slow day: README, section "Results"), its records made portable, then 08's figures and claims report.
##   make mini IMAGES="--dataset npz --data-root X.npz" TEXT="--text-file Y.txt"   (no downloads)
## IMAGES goes to 01, 02, 03, 06, 07 and 09 (07 reads weights only: without --data-root), TEXT to 04, 05 and 10 (10 expands 05's L = 6 decoder); without
## them 01 downloads CIFAR-10 into data/ and 05 Tiny Shakespeare into data/tinyshakespeare.txt. Output: OUT.
## MINI_LAUNCH: how every script but 08 launches its runs; the default runs two at a time, one CPU thread each
## (--launcher local: a slot per core; docs/decisions.md, section "Mini preset"). MINI_LAUNCH="--launcher inline"
## runs them one at a time on every thread: the same runs, other bits (a CPU result depends on its thread count).
MINI_LAUNCH ?= --launcher local
mini: OUT = results/mini
mini: $(STAMP)
	@set -e; start=$$(date +%s); \
	images07=$$(set -- $(IMAGES); while [ $$# -gt 0 ]; do \
		case "$$1" in --data-root) [ $$# -gt 1 ] && shift ;; --data-root=*) ;; *) printf '%s ' "$$1" ;; esac; shift; done); \
	step() { t=$$(date +%s); echo "== $(PY) $$* --preset mini --out $(OUT)"; $(PY) "$$@" --preset mini --out $(OUT); \
		echo "mini: $$1 took $$(( $$(date +%s) - t )) s"; }; \
	step 01_train_resnet_sweep.py $(IMAGES) $(MINI_LAUNCH); \
	step 02_probe_ag.py $(IMAGES) $(MINI_LAUNCH); \
	step 03_growth_vs_scratch.py $(IMAGES) $(MINI_LAUNCH); \
	step 04_pythia_cpt.py $(TEXT) $(MINI_LAUNCH); \
	step 05_gpt2_ascend.py $(TEXT) $(MINI_LAUNCH); \
	step 06_matched_insertion.py $(IMAGES) $(MINI_LAUNCH); \
	step 07_weight_scaling.py $$images07 $(MINI_LAUNCH); \
	step 09_grow_by_criterion.py $(IMAGES) $(MINI_LAUNCH); \
	step 10_expand_decoder.py $(TEXT) $(MINI_LAUNCH); \
	$(PY) -c 'import sys; from common.runs.run_store import make_portable; print(f"mini: {len(make_portable(sys.argv[1]))} configs made portable")' $(OUT); \
	t=$$(date +%s); $(PY) -m common.power.power_table --out $(OUT) --preset mini --fresh; \
	echo "mini: the power table at the records' design took $$(( $$(date +%s) - t )) s"; \
	step 08_make_figures.py --figures-dir $(OUT)/figures; \
	echo "mini: the whole chain took $$(( $$(date +%s) - start )) s; records under $(OUT)/"; \
	echo "mini: claims report $(OUT)/figures/claims.md (mini scale: evidence at reduced scale, not the paper's)"

## mini-readme: copy the claims table of results/mini into the README's Results block (after committing a new make mini)
mini-readme: $(STAMP)
	$(PY) -c 'from common.report.claims_report import update_readme; update_readme("README.md", "results/mini/figures/claims.md")'

## claim-tables: after a new make mini, regenerate the claims report's power table at results/mini's own design
## and the generated tables of docs/claim-rules.md (then rebuild the report with 08); about a minute on 2 cores
claim-tables: $(STAMP)
	$(PY) -m common.power.power_table --out results/mini --preset mini --fresh
	$(PY) -m common.power.claim_rates --write-docs docs/claim-rules.md

## test: install, then run the whole test suite (ruff check and ruff format --check included, as tests), one test
## file at a time on each of TEST_WORKERS processes (pytest-xdist, --dist loadfile: a file's fixtures are made once;
## the SLURM tests share one file, so one worker owns the cluster); TEST_WORKERS=0 runs it in one process
TEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

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
	$(VENV)/bin/ruff format --check .

clean-smoke:
	rm -rf $(OUT)
