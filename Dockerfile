# The proxy's image, built from source:
#   docker build -t idempotency-proxy .
#   docker run -p 8080:8080 -v idem-data:/data idempotency-proxy --upstream http://host.docker.internal:9000
#
# Or around binaries built beforehand (on Debian 12 or a system with an older glibc), as the
# container test builds it from its own test build's binaries: the build context is then a
# folder holding them, and no Rust toolchain is pulled.
#   cargo build --release --bin idempotency-proxy
#   mkdir -p target/image && cp target/release/idempotency-proxy target/image/
#   docker build --build-arg BINARIES=prebuilt -t idempotency-proxy -f Dockerfile target/image
#
# The target `demo-upstream` is the demo service of docker-compose.yml (`cargo run --example
# upstream`, from the README's tour); built from binaries, it wants `upstream` in the folder too.

# Where the binaries come from: `source` (compiled here) or `prebuilt` (the build context).
ARG BINARIES=source

FROM rust:1-bookworm AS source
WORKDIR /src
# The workspace: the proxy at the top, the core and the stores under crates/. Benches and
# examples are named in the manifest, so Cargo wants their files to be there too.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY benches ./benches
COPY examples ./examples
RUN cargo build --release --locked --bin idempotency-proxy \
    && mkdir -p /out && cp target/release/idempotency-proxy /out/

# Only the demo needs it: the example builds the test dependencies too.
FROM source AS source-demo
RUN cargo build --release --locked --example upstream && cp target/release/examples/upstream /out/

FROM scratch AS prebuilt
COPY idempotency-proxy /out/

FROM scratch AS prebuilt-demo
COPY upstream /out/

FROM ${BINARIES} AS binaries
FROM ${BINARIES}-demo AS demo-binaries

FROM debian:bookworm-slim AS runtime
# The platform's root certificates, which https:// upstreams are checked against (a base image
# made with them already skips the download).
RUN [ -s /etc/ssl/certs/ca-certificates.crt ] || { apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*; }
# The unprivileged user the services run as. Numeric in USER, so an orchestrator can see it is
# not root; not named "proxy", which Debian's base system already has (uid 13).
RUN groupadd --system --gid 10001 idempotency \
    && useradd --system --uid 10001 --gid 10001 --home-dir /data --shell /usr/sbin/nologin idempotency \
    && mkdir -p /data && chown 10001:10001 /data

FROM runtime AS demo-upstream
COPY --from=demo-binaries /out/upstream /usr/local/bin/upstream
USER 10001:10001
EXPOSE 9000
ENTRYPOINT ["upstream"]
CMD ["0.0.0.0:9000"]

FROM runtime AS proxy
COPY --from=binaries /out/idempotency-proxy /usr/local/bin/idempotency-proxy
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080 9090
# Defaults for the container, as environment variables so that flags given to `docker run`
# (or a compose `command`) override them: listen on all interfaces, keep the store on the volume.
ENV IDEMPOTENCY_PROXY_LISTEN=0.0.0.0:8080 \
    IDEMPOTENCY_PROXY_STORE=file:/data/idempotency-proxy.db
# Healthy while the proxy accepts connections on its listener (at the port of
# IDEMPOTENCY_PROXY_LISTEN), checked with bash's /dev/tcp as the image has no network tools. The
# admin listener's /healthz is for orchestrators that reach it (deploy/kubernetes).
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${IDEMPOTENCY_PROXY_LISTEN##*:}"]
ENTRYPOINT ["idempotency-proxy"]
