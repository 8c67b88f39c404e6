//! The file store's integration tests, one binary for all of them: the store suite, restarts
//! and crashes, the log's segments, and the files of earlier releases. The crash tests run
//! their writer in a child process, this same binary started again on one ignored test
//! (`crash::run_child`), which a SIGKILL ends without a destructor or a clean close.

mod crash;
mod file_store;
mod file_store_log;
mod file_store_previous;
mod file_store_segments;
mod suite;
