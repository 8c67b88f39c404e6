# Build: docker build -t idempotency-proxy .
# Run:   docker run -p 8080:8080 -v idem-data:/data idempotency-proxy --upstream http://host.docker.internal:9000
FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
RUN cargo build --release --locked --bin idempotency-proxy

FROM debian:bookworm-slim
RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin proxy \
    && mkdir -p /data && chown proxy /data
COPY --from=build /src/target/release/idempotency-proxy /usr/local/bin/idempotency-proxy
USER proxy
WORKDIR /data
VOLUME ["/data"]
EXPOSE 8080 9090
# Listen on all interfaces inside the container; the store file lives on the volume.
ENTRYPOINT ["idempotency-proxy", "--listen", "0.0.0.0:8080", "--store", "file:/data/idempotency-proxy.db"]
