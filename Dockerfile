# syntax=docker/dockerfile:1
#
# The Rebound image: `rebound-server` (the node, `migrate`, `dev`, `check-config`) and the
# `rebound` operator CLI on Debian slim, running as an unprivileged user.
#
#   docker build -t rebound:local .
#   docker run --rm -p 127.0.0.1:50051:50051 -p 127.0.0.1:9464:9464 rebound:local dev
#   docker run --rm --entrypoint rebound rebound:local --help
#
# The same runtime with the two binaries built on the host instead (a glibc no newer than the
# runtime's Debian): the `prebuilt` target. scripts/image builds and tests it with podman.
#
#   cargo build --release --locked -p rebound-server -p rebound-cli
#   docker build --target prebuilt -t rebound:local .
#
# docker-compose.yml builds it for the migrate job and the three nodes; see deploy/README.md.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

# --- build -------------------------------------------------------------------------------
FROM rust:${RUST_VERSION}-${DEBIAN_RELEASE} AS builder
WORKDIR /src
# The whole workspace: cargo reads every member's manifest, even for the two packages built.
# .dockerignore keeps target/, the other SDKs, caches and .git out of the context, all but
# the two binaries of the `prebuilt` target where the host has built them: those land in
# /src/target, under the cache mount below, and go unused.
COPY . .
# Cache mounts keep the registry and target/ between builds (BuildKit); the binaries are
# copied out of the cached target/ so that the stage's image holds them.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/usr/local/cargo/git \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p rebound-server -p rebound-cli \
    && install -D -m 0755 target/release/rebound-server /out/rebound-server \
    && install -D -m 0755 target/release/rebound /out/rebound

# --- runtime-base: the runtime image but for its two binaries ------------------------------
# Shared by the two images below, which differ only in where the binaries come from.
FROM debian:${DEBIAN_RELEASE}-slim AS runtime-base
# ca-certificates: TLS to Cassandra and to an OTLP collector over https. curl: the
# HEALTHCHECK below (neither binary has a subcommand that probes /readyz). With TLS on
# (REBOUND_TLS_CERT_FILE) the probe speaks HTTPS to loopback without verifying the
# certificate (-k): it checks readiness, not identity.
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/*
# A fixed uid/gid, so that volumes and Kubernetes' runAsUser can be set to match.
RUN groupadd --system --gid 10001 rebound \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rebound \
        --shell /usr/sbin/nologin rebound \
    && install -d -m 0750 -o 10001 -g 10001 /var/lib/rebound

# Listen on every interface inside the container (the binary's defaults are 127.0.0.1,
# which nothing outside the container can reach). JSON log lines for log collectors.
# REBOUND_DATA_DIR is where `REBOUND_STORE=embedded` (or `dev --data-dir`) would keep data.
ENV REBOUND_LISTEN=0.0.0.0:50051 \
    REBOUND_HTTP_LISTEN=0.0.0.0:9464 \
    REBOUND_LOG_FORMAT=json

USER 10001:10001
WORKDIR /var/lib/rebound
# 50051: gRPC (RetryService, ExecutorService, AdminService, health, reflection).
# 9464: HTTP (/metrics, /healthz, /readyz, the dashboard at /).
EXPOSE 50051 9464

# Ready = migrations applied, store reachable, in the ring. The port is taken from
# REBOUND_HTTP_LISTEN, so a container that moves the listener keeps a working check.
# A node that waits for Cassandra at start (REBOUND_CASSANDRA_STARTUP_WAIT_MS) is given
# the start period before failures count.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD if [ -n "$REBOUND_TLS_CERT_FILE" ]; then scheme=https; else scheme=http; fi; \
        curl -fsS -k -o /dev/null --max-time 2 "$scheme://127.0.0.1:${REBOUND_HTTP_LISTEN##*:}/readyz" || exit 1

ENTRYPOINT ["rebound-server"]
CMD ["serve"]

# --- prebuilt (--target prebuilt): with the host's `cargo build --release` ------------------
# .dockerignore lets exactly these two files of target/ into the context.
FROM runtime-base AS prebuilt
COPY --chmod=0755 target/release/rebound-server target/release/rebound /usr/local/bin/

# --- runtime (the default target, the last stage): with the builder stage's binaries --------
FROM runtime-base AS runtime
COPY --from=builder /out/rebound-server /out/rebound /usr/local/bin/
