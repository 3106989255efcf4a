# syntax=docker/dockerfile:1
# outbox-relay image: a Rust build stage, then a small Debian runtime that
# runs the relay as a non-root user.
#   docker build -t outbox-relay .
#   docker run --rm outbox-relay --help
# Configure with a mounted relay.toml (OUTBOX_RELAY_CONFIG) and/or
# OUTBOX_RELAY__SECTION__KEY variables; see docs/configuration.md.

FROM rust:1.88-bookworm AS build
# librdkafka is built from source by rdkafka-sys, the patched copy in
# vendor/ (C toolchain, make); openssl links the system's libssl.
RUN apt-get update \
 && apt-get install -y --no-install-recommends cmake libssl-dev pkg-config zlib1g-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin outbox-relay \
 && cp target/release/outbox-relay /usr/local/bin/outbox-relay

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates libssl3 zlib1g \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 relay \
 && useradd --system --uid 10001 --gid relay --no-create-home --shell /usr/sbin/nologin relay
COPY --from=build /usr/local/bin/outbox-relay /usr/local/bin/outbox-relay
COPY LICENSE /usr/share/doc/outbox-relay/LICENSE
# librdkafka is linked in statically: its licence and those of the code it bundles.
COPY vendor/rdkafka-sys/librdkafka/LICENSES.txt /usr/share/doc/outbox-relay/librdkafka-LICENSES.txt
USER 10001:10001
# /metrics, /health and /ready when relay.metrics_addr = "0.0.0.0:9187".
EXPOSE 9187
ENTRYPOINT ["/usr/local/bin/outbox-relay"]
CMD ["run"]
