//! What an operator sees of the running proxy: the admin listener ([`admin`]: health,
//! readiness, metrics, records, reload), the status page ([`status`]), the metric catalog and
//! the gauges read when scraped, the log lines ([`logging`]) and what each request reports to
//! them ([`telemetry`]). Nothing on a request's path waits on what is here.

pub(crate) mod admin;
pub(crate) mod logging;
pub(crate) mod metric_catalog;
pub(crate) mod scraped;
pub(crate) mod status;
pub(crate) mod telemetry;
