# Effect Ledger. `make run` serves everything; `make test` installs what the tests need and runs them.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# Test-only secrets, whatever the caller's environment holds (`make run` generates real ones
# under var/). The tests take the same values, and scrub the rest, in tests/hermetic.py.
TEST_ENV := SECRET_KEY=test-secret-key-0123456789abcdef \
	LEDGER_KEYS=1:test-ledger-key-0123456789abcdef \
	LEDGER_WEBHOOK_SECRETS=sandbox-pay:test-webhook-secret-0123456789 \
	LEDGER_ENV_FILE=/nonexistent
# The development stack (devstack/, not in the server's wheel): embedded PostgreSQL and Redis
# when DATABASE_URL / REDIS_URL are unset.
STACK := $(PY) -m devstack.stack

.PHONY: run test bench crashtest crashtest-frameworks drills demo lint install install-test clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[embedded]'
	touch $@

$(VENV)/.installed-test: pyproject.toml client/pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[embedded,test]' -e 'client[langgraph,openai-agents,pydantic-ai,mcp,dbos,otel]'
# The browser tests drive Debian's Chromium: Playwright cannot download a browser here.
	if [ ! -x /usr/bin/chromium ]; then \
	  sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); \
	  apt="$$sudo env DEBIAN_FRONTEND=noninteractive apt-get"; \
	  $$apt install -y -q chromium || { $$apt update -q && $$apt install -y -q chromium; } || \
	  { echo "Could not install chromium, which the browser tests need." >&2; exit 1; }; \
	fi
	touch $@

# The alert rules' tests (tests/test_slo_pack.py) run promtool. Debian's prometheus package has
# it, beside a server that may start when the package is installed: only promtool is taken out of
# the package, into the venv, so no server is installed, let alone started.
$(VENV)/bin/promtool: | $(PY)
	dir=$$(mktemp -d) && ( cd $$dir && \
	  { apt-get download -q -o APT::Sandbox::User=root prometheus || \
	    { sudo=$$([ "$$(id -u)" -eq 0 ] || echo sudo); $$sudo apt-get update -q && \
	      apt-get download -q -o APT::Sandbox::User=root prometheus; }; } && \
	  dpkg-deb --fsys-tarfile prometheus_*.deb | tar -x ./usr/bin/promtool && \
	  install -m 0755 usr/bin/promtool $(CURDIR)/$@ ); rc=$$?; rm -rf $$dir; \
	[ $$rc -eq 0 ] || { echo "Could not take promtool from Debian's prometheus package; the alert rules' tests need it." >&2; exit 1; }

install: $(VENV)/.installed

install-test: $(VENV)/.installed-test $(VENV)/bin/promtool

run: install
	$(STACK) run

# Three pytest-xdist workers on two cores (much of the suite waits on its servers and agents;
# docs/testing.md has the measurement), each with a database and Redis databases of its own
# (tests/hermetic.py), handed whole files, the longest first (tests/scheduling.py);
# PYTEST_WORKERS=0 runs everything in one process. docs/testing.md has the rules.
PYTEST_WORKERS ?= 3
test: install-test
	$(TEST_ENV) $(STACK) exec -- $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS); \
	rc=$$?; if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; rc=0; fi; exit $$rc

bench: install-test
	$(PIP) install --quiet -e '.[bench]' || { echo "dbos did not install: the DBOS baselines need it" >&2; exit 1; }
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/lifecycle.py; a=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/recovery.py; b=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/pages.py; c=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/exports.py; d=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/payments.py; e=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/statements.py; f=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/growth.py; g=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/soak.py; h=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/adapters.py; i=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/stripe_report.py; j=$$?; \
	$(TEST_ENV) $(STACK) exec -- $(PY) bench/restore_listing.py; k=$$?; \
	exit $$((a | b | c | d | e | f | g | h | i | j | k))

# The crash test: SIGKILLs at every named point, then provider, ledger and expectation compared.
# CRASHTEST_ARGS, e.g. "--workflows 1000 --crashes 1010" or "--ignore-keys".
crashtest: install-test
	$(TEST_ENV) $(STACK) exec -- $(PY) manage.py crashtest $(CRASHTEST_ARGS)

# The frameworks' crash matrix at size: a LangGraph agent under its defaults, a Pydantic AI
# agent saving its history after each node and an Agents SDK agent in its SQLiteSession,
# SIGKILLed around each charge and resumed the framework's own way, the guarded MCP proxy
# SIGKILLed and restarted under an MCP host that re-issues its calls, DBOS workflows recovered
# by DBOS; a line per framework, provider mode and latency (LangGraph also against a provider
# known by its statements alone).
CRASH_PAYMENTS ?= 200
CRASH_KILL_P ?= 0.15
crashtest-frameworks: install-test
	@mkdir -p var
	$(TEST_ENV) $(STACK) exec -- $(PY) -m pytest tests/adapters/test_langgraph_crashes.py \
	  tests/adapters/test_pydantic_ai_crashes.py tests/adapters/test_openai_agents_crashes.py \
	  tests/adapters/test_mcp_crashes.py tests/adapters/test_dbos_crashes.py \
	  -q -s -p no:cacheprovider --crash-matrix=full \
	  --crash-payments=$(CRASH_PAYMENTS) --crash-kill-p=$(CRASH_KILL_P) \
	  > var/crashtest-frameworks.log 2>&1; rc=$$?; \
	  grep -E "^CRASH-MATRIX|passed|failed" var/crashtest-frameworks.log; exit $$rc

# Fault drills under load, on a private PostgreSQL and Redis: each restarted, then the web
# process SIGKILLed; then, on clusters of its own, the primary of a synchronous pair killed and
# its standby promoted. Prints the counts. DRILLS_ARGS, e.g. "--seconds 60 --outage 20".
# Outside any stack, with settings and free ports of their own (devstack/drills/environment.py):
# nothing of `make run` (its database, keys, var/run.env, ports) is needed or read.
drills: install-test
	$(PY) -m devstack.drills postgres redis web failover-sync failover-async restore $(DRILLS_ARGS)

# The multi-agent demo, against a running `make run` (its settings come from var/run.env; PORT,
# SANDBOX_PAYMENTS_PORT and SANDBOX_MESSAGING_PORT as given to it). One agent identity per role,
# each with a fresh key.
demo: install-test
	for role in planner validator executor fulfilment; do \
	  export LEDGER_$$(echo $$role | tr a-z A-Z)_KEY=$$($(PY) manage.py createagent demo-$$role | tail -1); \
	done; \
	$(PY) demo/run.py --ledger http://127.0.0.1:$${PORT:-8000} \
	  --payments http://127.0.0.1:$${SANDBOX_PAYMENTS_PORT:-8101} \
	  --messaging http://127.0.0.1:$${SANDBOX_MESSAGING_PORT:-8102}

# The framework examples (examples/<framework>/agent.py), each against a whole stack started for
# the purpose (embedded PostgreSQL and Redis when DATABASE_URL / REDIS_URL are unset) and the
# sandbox providers; non-zero if any fails. EXAMPLES="langgraph dbos" runs only those. The stack
# is its own (files under var/examples, free ports unless PORT, SANDBOX_PAYMENTS_PORT or
# SANDBOX_MESSAGING_PORT are given), so it runs beside `make run`. It needs the frameworks, not
# the test toolchain (no browser, no promtool).
.PHONY: examples
$(VENV)/.installed-examples: pyproject.toml client/pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[embedded,examples]' -e 'client[langgraph,openai-agents,pydantic-ai,mcp,dbos]'
	touch $@

examples: $(VENV)/.installed-examples
	$(PY) -m devstack.examples $(EXAMPLES)

# The guides' screenshots (docs/operators.md, docs/auditors.md): the browser test that checks the
# pages they show saves them under docs/screenshots/ (in `make test` it writes to a temporary
# directory instead).
.PHONY: docs-screenshots
docs-screenshots: install-test
	LEDGER_DOCS_SCREENSHOTS=docs/screenshots $(TEST_ENV) $(STACK) exec -- \
	  $(PY) -m pytest tests/browser/test_docs_screenshots.py -q

# The documentation site (docs/, Sphinx with MyST Markdown and Furo) into docs/_build/html. Warnings
# are errors: a link to a missing page, heading anchor or file fails the build. -E reads every page
# afresh, so a warning in a page that did not change is reported again.
.PHONY: docs docs-serve
$(VENV)/.installed-docs: pyproject.toml | $(PY)
	$(PIP) install --quiet -e '.[docs]'
	touch $@

docs: $(VENV)/.installed-docs
	$(VENV)/bin/sphinx-build -E -W --keep-going -n -b html docs docs/_build/html

# The same site on http://127.0.0.1:8001/, rebuilt on every save (bench/README.md included).
docs-serve: $(VENV)/.installed-docs
	$(VENV)/bin/sphinx-autobuild -W -n --watch bench --host 127.0.0.1 --port 8001 \
	  docs docs/_build/html

lint: install-test
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) var
