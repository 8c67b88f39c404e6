# Build: docker build -t idempotency-proxy .
# Run:   docker run -p 8080:8080 -v idem-data:/data idempotency-proxy --upstream http://host.docker.internal:9000
FROM rust:1-bookworm AS build
WORKDIR /src
# The workspace: the proxy at the top, the core and the stores under crates/. Benches and
# examples are named in the manifest, so Cargo wants their files to be there too.
COPY Cargo.toml Cargo.lock ./
COPY crates ./crates
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin idempotency-proxy

FROM debian:bookworm-slim
# The platform's root certificates, which https:// upstreams are checked against.
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin proxy \
    && mkdir -p /data && chown proxy /data
COPY --from=build /src/target/release/idempotency-proxy /usr/local/bin/idempotency-proxy
USER proxy
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080 9090
# Defaults for the container, as environment variables so that flags given to `docker run`
# (or a compose `command`) override them: listen on all interfaces, keep the store on the volume.
ENV IDEMPOTENCY_PROXY_LISTEN=0.0.0.0:8080 \
    IDEMPOTENCY_PROXY_STORE=file:/data/idempotency-proxy.db
ENTRYPOINT ["idempotency-proxy"]
