# Two commands on a fresh machine:  make run  (published grid -> report)  and  make test.
# Both create .venv when it is missing or stale: make run from requirements-run.lock (what running needs, so any
# Python 3.11 installs it, Debian 12's 3.11.2 included), make test and the rest from requirements.lock on top of it
# (tests, docs, Ray; the docs' packages need Python 3.11.5 or later).

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP := $(VENV)/.installed

.PHONY: run test test-lowest test-all test-profile bench calibration docs docs-serve notebook blocks rejudge reference reference-100 reference-until-decided reference-temporal reference-scale reference-overoptimization lint format clean

# The version file too: the editable install's metadata (a manifest's package list) carries the version.
$(RUN_STAMP): requirements-run.lock pyproject.toml harness/common/version.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-run.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements.lock
	$(BIN)/python -m pip install --quiet -r requirements.lock
	touch $(STAMP)

run: $(RUN_STAMP)
	$(BIN)/coevolab run conditions/paper.toml

# Two test processes, one file (or the files that share a grid) each at a time, so module fixtures train their grid
# once, the longest files first (see tests/conftest.py): much of a test's time is XLA compiling, which keeps one core
# busy, so two processes use a 2-core machine. Tests marked heavy and the benchmarks are make test-all's. A test process
# that dies (a native crash) fails its test by name and is not replaced: pytest-xdist's file scheduling hangs, idle,
# after replacing a crashed worker (pytest-xdist issue 784).
SUITE := -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart=0 -m "not heavy"
test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest $(SUITE)
	$(MAKE) test-lowest

# coevolab at the oldest versions pyproject.toml's ranges allow (lowest-direct: each direct dependency at its floor,
# theirs resolved by pip), in .venv-lowest: the built-in grid tiny run and verified there (tools/lowest_direct.py).
test-lowest: $(STAMP)
	$(BIN)/python -m tools.lowest_direct --venv .venv-lowest

# Where make test's time goes: the same run with tools/test_profile.py recording each test's wall time and its process's
# JAX compile work (tracing, lowering, XLA compiles), then the tables by test file and by compiled program, and what
# sets each grid program's shapes apart (artifacts/bench/test-profile/, not committed: a profile is of one machine).
# Run it on a fresh clone with an empty HOME to see a cold compile cache.
PROFILE := artifacts/bench/test-profile
test-profile: $(STAMP)
	rm -rf $(PROFILE)
	COEVOLAB_TEST_PROFILE_DIR=$(PROFILE) $(BIN)/python -m pytest $(SUITE) -p tools.test_profile
	$(BIN)/python -m tools.test_profile $(PROFILE)

# Everything: the tests marked heavy (the published grid's claims) and every benchmark body, run once untimed at
# their smallest size (pyproject's addopts disable benchmarking).
test-all: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest tests benchmarks -n 2 --dist loadfile --no-loadscope-reorder --max-worker-restart=0

bench: $(STAMP)
	$(BIN)/python -m pytest benchmarks --benchmark-enable -q -p no:xdist

# The documentation site, into site/ (ignored). --strict: a broken link, a stale name in the API reference or a page
# missing from the navigation fails the build; tests/test_docs.py runs the same build in make test.
# Both variables silence a notice about MkDocs 2.0 that mkdocs-material and mkdocs-gen-files print at every build.
DOCS_ENV := NO_MKDOCS_2_WARNING=1 DISABLE_MKDOCS_2_WARNING=true
docs: $(STAMP)
	$(DOCS_ENV) $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	$(DOCS_ENV) $(BIN)/mkdocs serve

# The quickstart notebook executed in place (minutes): the repository and the site show it with these outputs.
notebook: $(STAMP)
	$(BIN)/python -m tools.notebook

# The generated blocks of the README and the docs pages, rewritten from the committed reference runs (seconds, nothing
# is trained): after a change of how a block or a verdict is rendered; and the reference pages docs/reference/ from
# the code (tools/reference_pages.py). tools/blocks.py lists every block, its pages and
# its command; tests/test_generated_blocks.py fails while a page differs from what its blocks render.
blocks: $(STAMP)
	$(BIN)/python -m tools.blocks
	$(BIN)/python -m tools.reference_pages

# Every committed reference judged again under the verdict rule as it now stands, from its own files (minutes, nothing
# is trained): each grid's report re-rendered (coevolab report), each study's (its shapes' reports, then the study's,
# which reads their verdicts), the grid grown until decided re-judged look by look from its finished stages (its manifest
# keeps the earlier calls' time) and its stages' reports re-rendered, then every generated block.
REJUDGED := paper paper-original paper-100 temporal
STUDIES := scale overoptimization
rejudge: $(STAMP)
	for run in $(REJUDGED); do $(BIN)/coevolab report artifacts/reference/$$run || exit 1; done
	for study in $(STUDIES); do $(BIN)/coevolab report artifacts/reference/$$study || exit 1; done
	$(BIN)/coevolab run --resume artifacts/reference/paper-until-decided --until-decided
	$(BIN)/coevolab report artifacts/reference/paper-until-decided
	$(BIN)/python -m tools.blocks

# The verdict rule's calibration table (artifacts/reference/calibration/): families of the published grid's claims
# under nulls A, B, C and two true effects at 20, 100 and 200 seeds through the rule as shipped (200 families each:
# 12 minutes on the 2-core Xeon beside other work), then the blocks that show it (the README's summary, the verdict
# rule's page).
calibration: $(STAMP)
	$(BIN)/python -m tools.calibration
	$(BIN)/python -m tools.blocks

# Each reference-* target reruns a committed reference run, then rewrites its blocks and the findings, one line per
# run, in the README and the results page (docs/results/index.md).
FINDINGS := $(BIN)/python -m tools.readme_tables --findings artifacts/reference README.md docs/results/index.md

# The published grid under our streams and under the original lab's: the reproduced table.
reference: $(STAMP)
	$(BIN)/coevolab run conditions/paper.toml --out artifacts/reference/paper --force --no-compile-cache
	$(BIN)/coevolab run conditions/paper-original.toml --out artifacts/reference/paper-original --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables artifacts/reference/paper README.md docs/results/index.md --original artifacts/reference/paper-original
	$(FINDINGS)

# The published grid at 100 seeds and the verdicts on its claims (about an hour on two cores).
reference-100: $(STAMP)
	$(BIN)/coevolab run conditions/paper-100.toml --out artifacts/reference/paper-100 --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables --claims artifacts/reference/paper-100 docs/results/index.md
	$(FINDINGS)

# The published grid's claims decided by adding seeds, on seeds no earlier verdict saw (1000 on; paper-100's are
# 0-99): the looks (50 and 100 seeds) and their α (Pocock-type spending of 0.05) are planned before the first look
# trains. Look 1 runs all 18 conditions at seeds 1000-1049 (about 30 minutes on two cores); look 2 grows only the
# conditions of the claims still open, at seeds 1050-1099. See harness/inference/sequential.py and
# docs/how-to/until-decided.md.
reference-until-decided: $(STAMP)
	$(BIN)/coevolab run conditions/paper.toml --seed-list 1000-1049 --until-decided --max-seeds 100 --spending pocock --out artifacts/reference/paper-until-decided --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables --until-decided artifacts/reference/paper-until-decided docs/results/index.md
	$(FINDINGS)

# The follow-up work's mechanisms (temporal contrast, anchored rejection, look-ahead, meta-judging, judge strength)
# at 20 seeds, with exact audits of their training pairs (about 10 minutes on two cores).
reference-temporal: $(STAMP)
	$(BIN)/coevolab run conditions/temporal.toml --out artifacts/reference/temporal --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables --temporal artifacts/reference/temporal docs/results/index.md
	$(FINDINGS)

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf $(VENV) .venv-lowest .pytest_cache .ruff_cache site

# The scale study: the published conditions in larger worlds, a rugged q*, a larger judge and attention networks
# (conditions/scale.toml, about an hour on two cores), and the results page's "Does it survive scale?" block.
reference-scale: $(STAMP)
	$(BIN)/coevolab run conditions/scale.toml --out artifacts/reference/scale --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables --study artifacts/reference/scale docs/results/index.md
	$(FINDINGS)

# The overoptimization study: best-of-n and RL against frozen judges of three sizes, less and noisier pretraining
# data, a KL penalty (conditions/overoptimization.toml, about 10 minutes on two cores), and the results page's block.
# Each shape is one seed block, which keeps the shape's best-of-n table (best_of_n.parquet; no merged copy).
reference-overoptimization: $(STAMP)
	$(BIN)/coevolab run conditions/overoptimization.toml --out artifacts/reference/overoptimization --force --no-compile-cache
	$(BIN)/python -m tools.readme_tables --overoptimization artifacts/reference/overoptimization docs/results/index.md
	$(FINDINGS)
