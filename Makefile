# outbox-relay developer entry points. Everything runs on this machine: no Docker.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
SERVICES := scripts/services
CARGO ?= cargo

.PHONY: test test-matrix demo services-up services-down lint bench fmt soak

## make test: start PostgreSQL + Kafka, run the whole suite, stop them, exit with the suite's status.
test:
	@scripts/test

## make test-matrix: the replication and end-to-end tests on PostgreSQL 14, 15, 16, 17 and 18
## (fresh cluster each, release builds fetched once), results to docs/compatibility.md. Not in CI.
test-matrix:
	@scripts/test-matrix

## make demo: services up, outbox set up, the relay turns five orders into CloudEvents on Kafka;
## fails, naming the step and its log, unless those five events come back from Kafka.
demo:
	@scripts/demo

services-up:
	@$(SERVICES) up

services-down:
	@$(SERVICES) down

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings

fmt:
	$(CARGO) fmt --all

## make bench: decoder microbenchmark, then the backlog drain beside pg_recvlogical.
bench:
	$(CARGO) bench --bench decode -- --warm-up-time 1 --measurement-time 5
	scripts/bench-drain

## make soak: mixed faults under steady load (SOAK_SECS, default 300; SOAK_SEED), then the checker.
soak:
	$(CARGO) build --all-targets
	@env_lines="$$($(SERVICES) up)"; eval "$$env_lines"; \
	  status=0; $(CARGO) test --test it -- soak:: --ignored --nocapture || status=$$?; \
	  exit $$status
