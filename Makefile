# Kafka delivery auditor: the two quick-start commands are `make run` and `make test`.
SHELL := /bin/bash
PY := .venv/bin/python
BROKERS ?=
export PYTHONUNBUFFERED := 1

.PHONY: help bootstrap up down status run stop test test-fast test-faults lint fmt lab broker-stop broker-kill broker-start broker-pause broker-resume bench

help:
	@echo "make run      set up and run the auditor (stack, migrations, demo pipeline, dashboard)"
	@echo "make test     set up and run the test suite (separate test stack, 3 brokers)"
	@echo "make test-faults  the long fault scenarios make test leaves out (same test stack)"
	@echo "make up       start only the backing services (Kafka, PostgreSQL, Redis); BROKERS=3 for 3 brokers"
	@echo "make down     stop the auditor and the backing services"
	@echo "make stop     stop the auditor's own processes (web, worker, beat, canary, demo)"
	@echo "make status   show what is running"
	@echo "make broker-stop|broker-kill|broker-start|broker-pause|broker-resume ID=n   fault-inject one broker"
	@echo "make lab      run the fault lab on the dev stack (needs 3 brokers: make up BROKERS=3); SCENARIOS=... to pick"

bootstrap:
	@stack/bootstrap.sh

up: bootstrap
	@STACK=dev stack/stack.sh up $(if $(BROKERS),--brokers $(BROKERS))

down:
	@-stack/run.sh stop
	@STACK=dev stack/stack.sh down

status:
	@STACK=dev stack/stack.sh status
	@stack/run.sh status

run: up
	@stack/run.sh start

stop:
	@stack/run.sh stop

# Two passes on one test stack. First, the tests that leave the brokers alone, in TEST_WORKERS
# pytest-xdist workers (a test file stays on one worker, so its module fixtures are made once);
# then the tests marked `alone` (they stop, pause or kill brokers, or flush the test database), alone. Each pass has its own
# test databases. TEST_WORKERS=0: one pass, in one process. A pass that selects no test
# (PYTEST_ARGS naming only tests of the other) is not a failure.
TEST_WORKERS ?= 2
test:
	@stack/bootstrap.sh --with-browser --with-old-clients
	@STACK=test stack/stack.sh up --brokers 3
	@set -a; . var/test/stack.env; set +a; \
	if [ "$(TEST_WORKERS)" = 0 ]; then exec $(PY) -m pytest -m "not long_fault" $(PYTEST_ARGS); fi; \
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile -m "not alone and not long_fault" $(PYTEST_ARGS); parallel=$$?; \
	$(PY) -m pytest -m "alone and not long_fault" $(PYTEST_ARGS); alone=$$?; \
	for rc in $$parallel $$alone; do [ $$rc = 0 ] || [ $$rc = 5 ] || exit $$rc; done; \
	[ $$parallel = 0 ] || [ $$alone = 0 ] || exit 5

# The long fault scenarios make test leaves out (marked long_fault: nine lab scenarios, which
# make lab runs too, and three of the executor-loss tests on the Spark cluster), one at a time
# on the same test stack.
test-faults:
	@stack/bootstrap.sh --with-browser --with-old-clients
	@STACK=test stack/stack.sh up --brokers 3
	@set -a; . var/test/stack.env; set +a; $(PY) -m pytest -m long_fault $(PYTEST_ARGS)

# mypy loads the Django settings (django-stubs' plugin): the test stack's env when there is
# one, else placeholders that serve type checking only (mypy connects to nothing).
lint:
	@.venv/bin/ruff check .
	@if [ -f var/test/stack.env ]; then set -a; . var/test/stack.env; set +a; fi; \
	DJANGO_SECRET_KEY="$${DJANGO_SECRET_KEY:-type-checking-only}" \
	DATABASE_URL="$${DATABASE_URL:-postgresql://type-checking@127.0.0.1/type_checking_only}" \
	.venv/bin/mypy auditor spark_jobs benchmarks

fmt:
	@.venv/bin/ruff format .

# The fault lab kills, pauses and restarts the dev stack's brokers: it needs all three up.
lab:
	@[ -f .env ] || { echo "make lab needs a 3-broker stack: make up BROKERS=3" >&2; exit 2; }
	@set -a; . ./.env; set +a; \
	if [ "$${KAFKA_BROKERS:-1}" -lt 3 ] || [ "$$(STACK=dev stack/stack.sh status | grep -c '^kafka-[0-9] *up')" -lt 3 ]; then \
	  echo "make lab needs a 3-broker stack: make up BROKERS=3 (fewer than 3 brokers are up)" >&2; exit 2; fi; \
	$(PY) manage.py migrate --noinput -v0 && $(PY) manage.py audit lab $(SCENARIOS) $(LAB_ARGS)

broker-stop broker-kill broker-start broker-pause broker-resume:
	@STACK=$${STACK:-dev} stack/stack.sh broker $(subst broker-,,$@) $(ID)

bench:
	@echo "see benchmarks/README.md"
