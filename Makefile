# The two commands of the Quick start: `make demo` and `make test`; `make docs` builds the site.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
CORE := $(VENV)/.installed
CHROMIUM := /usr/bin/chromium
SDK_VENVS := .venv-conformance .venv-cozepy .venv-openai
SDK_STAMPS := $(SDK_VENVS:%=%/.toolbridge-sdk-stamp)
# pytest-xdist workers: the tests wait on real servers and processes more than on the CPU,
# so twice the cores of a 2-core machine, with work stealing: an idle worker takes queued tests
# from a busy one, so a few long tests never hold back a worker's share (measured on 3,972
# tests: 284 s, against 338 s with the default distribution and 304 s with six workers).
TEST_WORKERS ?= 4

.PHONY: demo test test-setup lint docs bench clean postgresql-server sdk-venvs

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP) $(CORE)

# The demo needs the package and its trace exporter (`otel`), not the test tools.
$(CORE): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[otel]'
	touch $(CORE)

# The web console's browser test drives Debian's chromium (never a downloaded browser).
$(CHROMIUM):
	@if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
		apt-get update -qq && apt-get install -y -qq chromium; \
	else \
		echo "warning: $(CHROMIUM) is missing and apt-get (as root) is not available:" \
			"the console browser test will fail; install Debian's chromium" >&2; \
	fi

# The PostgreSQL tests start their own throwaway server from Debian's binaries, which
# live in /usr/lib/postgresql/<version>/bin (a version-numbered path, hence a check, not a file
# target). The package also sets up Debian's default cluster; the tests never use it.
# (After chromium's check: two apt-get runs at once would fight over dpkg's lock.)
postgresql-server: | $(CHROMIUM)
	@if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1; then \
		if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
			apt-get update -qq && apt-get install -y -qq postgresql; \
		else \
			echo "warning: /usr/lib/postgresql/*/bin/postgres is missing and apt-get (as root)" \
				"is not available: the PostgreSQL tests will be skipped; install Debian's" \
				"postgresql" >&2; \
		fi; \
	fi

# The official SDKs the conformance tests drive (appbuilder-sdk, cozepy, openai), each in its
# own venv (tests/support/sdk_venv.py; standard library only), built once and kept, three at a
# time. A bare `pytest` builds a missing one itself, under the same lock.
sdk-venvs:
	@$(MAKE) --no-print-directory -j3 $(SDK_STAMPS)

$(SDK_STAMPS): %/.toolbridge-sdk-stamp: tests/support/sdk_venv.py
	$(PYTHON) -m tests.support.sdk_venv $*
	touch $@

demo: $(CORE)
	$(BIN)/toolbridge demo

# What the tests need, side by side: the project's venv, the SDK venvs (built by the system
# Python, not the project's venv) and the Debian packages are independent of each other.
test-setup:
	@$(MAKE) --no-print-directory -j5 $(STAMP) postgresql-server $(SDK_STAMPS)

# pytest, then the documentation build and the linters side by side; any failure fails it.
test: test-setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal
	@$(MAKE) --no-print-directory -j2 docs lint

lint: $(STAMP)
	$(BIN)/ruff check bridge tests examples bench manifests
	$(BIN)/ruff format --check bridge tests examples bench manifests
	$(BIN)/mypy --strict bridge

# The documentation site (mkdocs.yml, docs/), built by Zensical in strict mode: a broken link or
# anchor, or an API page whose name no longer resolves, fails the build. Output in site/.
docs: $(STAMP)
	$(BIN)/zensical build --strict --clean

bench: $(STAMP)
	$(BIN)/python bench/run_all.py

clean:
	rm -rf site .cache $(VENV) $(SDK_VENVS) .mypy_cache .pytest_cache .ruff_cache
