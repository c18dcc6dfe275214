# Everyday commands. Prerequisites (Python 3.11 with its venv module, Go >= 1.24, the Debian packages for
# `make test`) are listed in CONTRIBUTING.md, "Prerequisites"; .ci/run checks them and installs the Debian ones.
PYTHON ?= python3.11
VENV   := .venv
PY     := $(VENV)/bin/python
# The venv is installed with uv (PyPI, pinned): the locked set, Airflow and all, in seconds where
# pip takes minutes. `make venv INSTALLER=pip` (or no uv on the index) installs with pip.
UV_VERSION := 0.13.8
INSTALLER ?= uv
MINIO_VERSION := v0.0.0-20260212201848-7aac2a2c5b7c
MINIO  := .cache/bin/minio
S5CMD_VERSION := v2.3.0
S5CMD  := .cache/bin/s5cmd
TOXIPROXY_VERSION := v2.12.0
TOXIPROXY := .cache/bin/toxiproxy-server
RCLONE_VERSION := v1.72.0
RCLONE := .cache/bin/rclone

.PHONY: demo airflow airflow-celery typecheck test test-fast compat reliability screenshot bench bench-scale bench-scale-celery bench-backfill venv minio minio-background s5cmd bench-tools lock clean synthetic-s3 bench-synthetic-s3 bench-scale-10m

# The venv: requirements-test.txt pinned by constraints.txt, then the project (engine s3arch and
# Airflow glue s3arch_airflow) in editable mode, with its plugin entry point.
$(VENV)/.installed: requirements.txt requirements-test.txt constraints.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if [ "$(INSTALLER)" = uv ] && $(VENV)/bin/pip install --quiet uv==$(UV_VERSION); then \
	  echo "$(VENV)/bin/uv pip install -r requirements-test.txt -c constraints.txt -e ."; \
	  $(VENV)/bin/uv pip install --quiet --python $(PY) -r requirements-test.txt -c constraints.txt \
	    --upgrade-package pip pip \
	  && $(VENV)/bin/uv pip install --quiet --python $(PY) --no-deps -e .; \
	else \
	  echo "installing with pip (a few minutes)"; \
	  $(VENV)/bin/pip install --quiet --upgrade pip \
	  && $(VENV)/bin/pip install --quiet -r requirements-test.txt -c constraints.txt \
	  && $(VENV)/bin/pip install --quiet --no-deps -e .; \
	fi
	touch $@

# Bytecode for every installed module, once: pip wrote it at install, uv leaves it to the first
# import, which suits `make demo` (it waits for neither); where PYTHONDONTWRITEBYTECODE is set no
# import writes it, and every process the suite starts would compile Airflow again. Up-to-date
# files are skipped, so on a venv pip made this only writes the stamp.
$(VENV)/.compiled: $(VENV)/.installed
	$(PY) -m compileall -qq -j0 $(VENV)/lib || true
	touch $@

venv: $(VENV)/.installed $(VENV)/.compiled

# MinIO built from the Go module proxy at a pinned version, cached in .cache/bin
# (devtools/build_minio.sh: one build at a time; this waits for a build under way).
$(MINIO):
	@devtools/build_minio.sh $(MINIO_VERSION) $(CURDIR)/$(MINIO)

minio: $(MINIO)

# `make demo` starts the MinIO build in the background (niced, log in .cache/minio-build.log) and
# does not wait for it: until it is built the demo runs on moto server, and says so.
minio-background:
	@devtools/build_minio.sh --background $(MINIO_VERSION) $(CURDIR)/$(MINIO)

# The benches' synthetic S3 source (bench/synthetic_s3, Go standard library only, so no module
# download): a virtual bucket of N objects computed from their keys, other buckets proxied to
# MinIO (--upstream). bench/synthetic_source.py builds it the same way when missing or stale.
SYNTHETIC_S3 := .cache/bin/synthetic-s3
$(SYNTHETIC_S3): $(filter-out %_test.go,$(wildcard bench/synthetic_s3/*.go)) bench/synthetic_s3/go.mod
	mkdir -p $(@D)
	cd bench/synthetic_s3 && GOTOOLCHAIN=local GOFLAGS=-trimpath GOWORK=off CGO_ENABLED=0 go build -o $(CURDIR)/$@ .

synthetic-s3: $(SYNTHETIC_S3)

# How fast the synthetic source answers (GETs/s, LIST pages/s); bench/results/synthetic-s3-speed.json.
bench-synthetic-s3: venv $(SYNTHETIC_S3)
	$(PY) -m bench.synthetic_s3_speed $(ARGS)

# A 10,000,000-object day from the synthetic source archived into MinIO and verified: by the CLI's
# one process (bench/scale_synthetic.py), then by the archive DAG's segment tasks on the Celery
# stack beside it (bench/scale_celery.py --source synthetic). ARGS go to the first.
bench-scale-10m: venv minio $(SYNTHETIC_S3)
	$(PY) -m bench.scale_synthetic --objects 10000000 --runs processes-1 $(ARGS)
	$(PY) -m bench.scale_celery --source synthetic --objects 10000000 --cli recorded

# The benchmark's reference pipeline uses s5cmd, built from the Go module proxy at a pinned version.
$(S5CMD):
	bench/build_s5cmd.sh $(S5CMD_VERSION) $(CURDIR)/$(S5CMD)

s5cmd: $(S5CMD)

# The benchmark's latency proxy (Shopify's toxiproxy) and second reference (rclone's
# `archive create`), both from the Go module proxy at pinned versions.
$(TOXIPROXY):
	GOBIN=$(CURDIR)/.cache/gobin GOFLAGS=-trimpath go install github.com/Shopify/toxiproxy/v2/cmd/server@$(TOXIPROXY_VERSION)
	mv .cache/gobin/server $@

$(RCLONE):
	@echo "building rclone $(RCLONE_VERSION) from the Go module proxy (a few minutes, once)"
	GOBIN=$(CURDIR)/.cache/bin GOFLAGS=-trimpath go install github.com/rclone/rclone@$(RCLONE_VERSION)

bench-tools: $(S5CMD) $(TOXIPROXY) $(RCLONE)

# Ours against `s5cmd cp + tar | pigz | s5cmd pipe` on an embedded MinIO; prints and saves JSON.
bench: venv minio bench-tools
	$(PY) -m bench.bench

# A 1,000,000-object day archived with the defaults and with --processes 1, then verified:
# wall, client CPU per object, peak RSS of the process tree (bench/scale.py). Seeding the day
# takes ~15 minutes once; it stays in .cache/bench-minio.
bench-scale: venv minio
	$(PY) -m bench.scale

# A 1M-object day as segment tasks of the archive DAG on the Celery stack (two workers), against
# `s3arch archive --processes 1` on the same day (bench/scale_celery.py): the synthetic endpoint's
# day, or with ARGS=--source seeded bench/scale.py's. ARGS: --objects N, --segments K, --source.
bench-scale-celery: venv minio $(SYNTHETIC_S3)
	$(PY) -m bench.scale_celery $(ARGS)

# A year of days of 500 small logs on the Celery stack: a date-range run and Airflow's Backfill
# against the CLI, one process per day (bench/backfill.py). ARGS: --days N for fewer days.
bench-backfill: venv minio
	$(PY) -m bench.backfill $(ARGS)

# From a fresh clone about 2 minutes to the first archive: the venv with uv, and the demo on moto
# server while MinIO builds in the background (devtools/demo.py says which S3 it runs on, and why).
demo: minio-background $(VENV)/.installed
	$(PY) -m devtools.demo

# The Airflow UI on http://127.0.0.1:8080 against an embedded MinIO with sample logs. Ctrl-C,
# SIGTERM or SIGHUP stops every process it started, however often it arrives. ARGS: more options
# of devtools/airflow_ui.py (--home DIR, --port N).
airflow: venv minio
	$(PY) -m devtools.airflow_ui $(ARGS)

# The production topology, natively: PostgreSQL and Redis from Debian, the CeleryExecutor with
# two workers, the same UI and sample data (one day large enough for segment tasks).
airflow-celery: venv minio
	$(PY) -m devtools.airflow_ui --celery $(ARGS)

# The oldest Airflow supported (pyproject.toml's lower bounds): the wheel with Airflow 3.1.8 and
# its amazon provider in a fresh venv under .cache/compat, and the DAG tests against MinIO
# (devtools/compat.py; about 10 minutes). Not part of `make test`.
compat: venv minio
	$(PY) -m devtools.compat

typecheck: venv
	mkdir -p .cache/typecheck && ln -sfn ../../tasks .cache/typecheck/s3arch
	MYPYPATH=.cache/typecheck:plugins $(PY) -m mypy -p s3arch -p s3arch_airflow

# The type check first (seconds), then the suite. Only a failed test's tmp_path is kept: it is
# on tmpfs where there is room (tests/conftest.py), where a kept one holds memory.
test: venv minio typecheck
	$(PY) -m pytest -o tmp_path_retention_policy=failed

# The loop to run after each change: the type check, then the suite without the tests marked
# slow (Airflow stacks, the browser, package and venv builds, stopping the stacks, and the
# engine tests that take more than about 10 s each; pytest.ini says which). It keeps the
# crash-safety tests: SIGKILL at chosen points, source deletion, leases lost and taken over,
# and writes whose answer was lost.
# Two pytest workers (pytest-xdist), each with its own servers: the tier waits on S3 and leases
# more than it computes, so two halve its time on two cores. TEST_WORKERS=1 for one.
TEST_WORKERS ?= 2
test-fast: venv minio typecheck
	$(PY) -m pytest -o tmp_path_retention_policy=failed -m "not slow" -n $(TEST_WORKERS)

# The fault table (docs/appendix/FAULTS.md): the tests that inject faults (the files that call
# reliability.record), and when they all pass the doc's table is rewritten from what they
# recorded. `make test` writes the same table to .cache/reliability/ only, leaving the tree clean.
RELIABILITY_TESTS = $(shell grep -lF 'reliability.record' tests/test_*.py)
reliability: venv minio
	S3ARCH_WRITE_RELIABILITY_DOC=1 $(PY) -m pytest $(RELIABILITY_TESTS)

# docs/catalog.png, the README's picture of the catalog: taken by the browser test, which under
# `make test` saves it to .cache/ only.
screenshot: venv minio
	S3ARCH_WRITE_SCREENSHOT=1 $(PY) -m pytest tests/test_catalog_browser.py

lock:
	rm -rf .cache/lockvenv && $(PYTHON) -m venv .cache/lockvenv
	.cache/lockvenv/bin/pip install --quiet -r requirements-test.txt
	{ echo "# Full lock of requirements-test.txt, made with 'make lock' (pip freeze of a clean venv)."; \
	  .cache/lockvenv/bin/pip freeze; } > constraints.txt

clean:
	rm -rf $(VENV) .cache .pytest_cache
