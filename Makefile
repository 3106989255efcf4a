# outbox-relay developer entry points. Everything runs on this machine: no Docker.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
SERVICES := scripts/services
CARGO ?= cargo

.PHONY: test demo services-up services-down lint bench fmt

## make test: start PostgreSQL + Kafka, run the whole suite, stop them, exit with the suite's status.
test:
	$(CARGO) build --all-targets
	@env_lines="$$($(SERVICES) up)"; eval "$$env_lines"; \
	  status=0; $(CARGO) test --all-targets -- --test-threads=2 || status=$$?; \
	  $(CARGO) test --doc || status=$$?; \
	  $(SERVICES) down; exit $$status

## make demo: start the services and show they are up (the relay joins in later).
demo:
	@scripts/demo

services-up:
	@$(SERVICES) up

services-down:
	@$(SERVICES) down

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets -- -D warnings

fmt:
	$(CARGO) fmt --all
