//! The proxy's integration tests, one binary for all of them: the binary and the library over
//! real sockets, real stores and real peers, one module per subject. One binary links the
//! proxy and its dependencies once, and `common` is compiled once for every subject.
//! `tests/container.rs` stays a binary of its own (it builds images; see its header).

mod common;
#[path = "../../examples/upstream.rs"]
#[allow(dead_code)] // its `main`: the tests start it with `serve`.
mod demo_upstream;

mod admin;
mod architecture;
mod brokers_guide;
mod brokers_guide_outbox;
mod cli;
mod connection_cap;
mod consumer_crash;
mod consumers;
mod crash;
mod deploy;
mod docs;
mod early_answer;
mod fingerprints;
mod fuzz_corpus;
mod grpc;
mod inbox;
mod inbox_crash;
mod inbox_redis;
mod inbox_reload;
mod late_completion;
mod limits;
mod limits_h2;
mod log_lines;
mod outbox;
mod outbox_admin;
mod outbox_brokers;
mod outbox_end_to_end;
mod outbox_guide;
mod outbox_layout;
mod outcomes;
mod postgres_store;
mod postgres_store_tls;
mod redis_cluster;
mod redis_faults;
mod redis_storm;
mod reference;
mod reload;
mod replay;
mod routing;
mod sealed;
mod status_page;
mod stores;
mod tls;
mod tour;
mod upstream_pool;
mod webhooks;
mod workspace;
