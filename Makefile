# outbox-relay developer entry points. Everything runs on this machine: no Docker.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
SERVICES := scripts/services
CARGO ?= cargo

.PHONY: test test-matrix test-reference-long demo services-up services-down lint bench bench-quick fmt soak

## make test: start PostgreSQL + Kafka, run the whole suite, stop them, exit with the suite's status.
test:
	@scripts/test

## make test-matrix: the replication and end-to-end tests on PostgreSQL 14, 15, 16, 17 and 18
## (fresh cluster each, release builds fetched once), results to docs/compatibility.md. Not in CI.
test-matrix:
	@scripts/test-matrix

## make test-reference-long: the differential tests (tests/reference.rs) with a million generated
## cases per format instead of make test's 10,000 (OUTBOX_REFERENCE_SEED picks the seed). Needs no
## service: the reference implementations run in scripts/services' Python virtualenv.
test-reference-long:
	OUTBOX_REFERENCE_CASES=$${OUTBOX_REFERENCE_CASES:-1000000} $(CARGO) test --release --test reference -- --nocapture

## make demo: services up, outbox set up, the relay turns five orders into CloudEvents on Kafka;
## fails, naming the step and its log, unless those five events come back from Kafka.
demo:
	@scripts/demo

services-up:
	@$(SERVICES) up

services-down:
	@$(SERVICES) down

## make lint: formatting, clippy, the structure guard (tests/layers.rs: every import runs
## down the layer order docs/design.md draws, no import circle), and cargo-deny (scripts/deny:
## licences, duplicate versions and sources by deny.toml; advisories where the RustSec database
## can be fetched; installs cargo-deny on first use, about five minutes).
lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --workspace -- -D warnings
	$(CARGO) test --test layers
	scripts/deny

fmt:
	$(CARGO) fmt --all

## make bench: decoder microbenchmark, then benches/run.py: the relay beside its ceilings
## (pg_recvlogical, Kafka's producer perf test) and Debezium on latency (W1), max rate (W2),
## backlog drain (W3), one big transaction (W4) and cost; writes benches/RESULTS.md.
## Runs on this checkout's own services (scripts/services up; stop with scripts/services down).
bench:
	$(CARGO) bench --bench decode -- --warm-up-time 1 --measurement-time 5
	python3 benches/run.py

## make bench-quick: the same with small sizes and one repeat (a smoke run of the harness).
bench-quick:
	$(CARGO) bench --bench decode -- --warm-up-time 1 --measurement-time 2
	python3 benches/run.py --quick

## make soak: every soak (tests/it/soak.rs), one after the other: mixed faults under steady
## load for SOAK_SECS each (default 300; SOAK_SEED), then the checker. SOAK_CASE=<test name> runs one.
soak:
	$(CARGO) build --all-targets
	@env_lines="$$($(SERVICES) up)"; eval "$$env_lines"; \
	  status=0; $(CARGO) test --test it -- $(if $(SOAK_CASE),$(SOAK_CASE),soak::) --ignored --nocapture --test-threads=1 || status=$$?; \
	  exit $$status
