//! Turning the raw file and the flags into validated [`Settings`].
//!
//! Flags are merged explicitly, one `Option` at a time, rather than through clap defaults, so
//! the result (and what `--check` prints) is exactly what is in force, and an error can say
//! whether the bad value came from a flag or from a line of the file.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use crate::config::common::error::{ConfigError, Reason};
use crate::config::common::given::Given;
use crate::config::common::source::Source;
use crate::config::common::values;
use crate::config::common::values::socket_addr;
use crate::config::file::RawFile;
use crate::config::routes::policy::{self, Inherited};
use crate::config::routes::resolve::routes;
use crate::config::settings::{Overrides, Settings, DEFAULT_LISTEN};
use crate::store::StoreSpec;
use idempotency_core::backend::RouteName;
use idempotency_core::Policy;
use idempotency_core::ProblemBase;
use idempotency_core::Secret;

/// Settings from the raw file and the overrides, or the first problem found.
pub(in crate::config) fn resolve(
    src: &Source,
    raw: RawFile,
    cli: &Overrides,
) -> Result<Settings, ConfigError> {
    let limits = crate::config::limits::resolve(src, &raw)?;
    let postgres = crate::config::store_keys::resolve(src, &raw)?;
    let problem_base = Arc::new(problem_base(src, raw.problem_base.as_ref())?);
    let mut defaults = Inherited::new(Policy::new(
        RouteName::new(RouteName::DEFAULT).expect("a valid route name"),
    ));
    policy::apply(src, &mut defaults, &raw.defaults.unwrap_or_default())?;
    let upstream = Given::pick(
        ("--upstream", cli.upstream.as_ref()),
        ("upstream", raw.upstream.as_ref()),
    );
    let tls =
        crate::config::tls::listener(src, cli, (raw.tls_cert.as_ref(), raw.tls_key.as_ref()))?;
    let outboxes = crate::config::outbox::resolve(src, &raw.outboxes)?;
    let routes = routes(src, raw.routes, &defaults, upstream)?;
    if routes.is_empty() && outboxes.is_empty() {
        return Err(ConfigError::NoUpstream);
    }
    Ok(Settings {
        listen: listen(src, cli, raw.listen.as_ref())?,
        admin_listen: admin_listen(src, cli, raw.admin_listen.as_ref())?,
        store: store(src, cli, raw.store.as_ref())?,
        postgres,
        log_format: cli
            .log_format
            .or(raw.log_format.map(Spanned::into_inner))
            .unwrap_or_default(),
        drain_timeout: drain_timeout(src, raw.drain_timeout.as_ref())?,
        workers: workers(src, raw.workers.as_ref())?,
        admin_token: raw
            .admin_token
            .as_ref()
            .map(|token| check(src, token, "admin_token", Secret::resolve))
            .transpose()?,
        encryption: crate::config::crypto::encryption(
            src,
            &raw.encryption_key,
            &raw.encryption_old_keys,
        )?,
        problem_base,
        limits,
        tls,
        routes,
        outboxes,
    })
}

/// One per CPU unless the file says otherwise; zero would serve no one.
fn workers(src: &Source, file: Option<&Spanned<i64>>) -> Result<usize, ConfigError> {
    let Some(count) = file else {
        return Ok(std::thread::available_parallelism().map_or(1, std::num::NonZero::get));
    };
    usize::try_from(*count.get_ref())
        .ok()
        .filter(|n| (1..=1024).contains(n))
        .ok_or_else(|| {
            let reason = format!(
                "{} is not a number of workers from 1 to 1024",
                count.get_ref()
            );
            src.bad(count, "workers", reason)
        })
}

fn problem_base(src: &Source, file: Option<&Spanned<String>>) -> Result<ProblemBase, ConfigError> {
    file.map_or(Ok(ProblemBase::default()), |base| {
        check(src, base, "problem_base", ProblemBase::published)
    })
}

fn listen(
    src: &Source,
    cli: &Overrides,
    file: Option<&Spanned<String>>,
) -> Result<SocketAddr, ConfigError> {
    Given::pick(("--listen", cli.listen.as_ref()), ("listen", file))
        .map_or(Ok(DEFAULT_LISTEN), |given| given.parse(src, socket_addr))
}

fn admin_listen(
    src: &Source,
    cli: &Overrides,
    file: Option<&Spanned<String>>,
) -> Result<Option<SocketAddr>, ConfigError> {
    Given::pick(
        ("--admin-listen", cli.admin_listen.as_ref()),
        ("admin_listen", file),
    )
    .map(|given| given.parse(src, socket_addr))
    .transpose()
}

fn store(
    src: &Source,
    cli: &Overrides,
    file: Option<&Spanned<String>>,
) -> Result<StoreSpec, ConfigError> {
    let parse = |raw: &str| raw.parse::<StoreSpec>().map_err(|e| e.to_string());
    Given::pick(("--store", cli.store.as_ref()), ("store", file))
        .map_or(Ok(StoreSpec::default()), |given| given.parse(src, parse))
}

fn drain_timeout(src: &Source, file: Option<&Spanned<String>>) -> Result<Duration, ConfigError> {
    file.map_or(Ok(Duration::from_secs(30)), |raw| {
        check(src, raw, "drain_timeout", values::duration)
    })
}

/// Parses a value read from the file, naming its line and key if it is refused.
pub(in crate::config) fn check<T, E: Reason>(
    src: &Source,
    value: &Spanned<String>,
    key: &str,
    parse: fn(&str) -> Result<T, E>,
) -> Result<T, ConfigError> {
    parse(value.get_ref()).map_err(|reason| src.bad(value, key, reason))
}
