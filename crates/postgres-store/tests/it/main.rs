//! The Postgres store's integration tests, one binary for all of them: the store and inbox
//! suites over it (plain, sealed and cached), and what it does beyond them, on one private
//! PostgreSQL that the binary starts once.

mod postgres_store;
mod suite;
