//! Turning the raw file and the flags into validated [`Settings`].
//!
//! Flags are merged explicitly, one `Option` at a time, rather than through clap defaults, so
//! the result (and what `--check` prints) is exactly what is in force, and an error can say
//! whether the bad value came from a flag or from a line of the file.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use toml::Spanned;

use super::error::ConfigError;
use super::file::{RawFile, RouteHead, RouteTable};
use super::given::Given;
use super::policy::{self, Inherited};
use super::settings::{Overrides, RouteSettings, Settings, DEFAULT_LISTEN};
use super::source::Source;
use super::values;
use super::values::{host, path_prefix, socket_addr, upstream_uri};
use crate::store::StoreSpec;
use idempotency_core::backend::RouteName;
use idempotency_core::Policy;
use idempotency_core::ProblemBase;
use idempotency_core::Secret;

/// Where the route named `default` was declared, for the duplicate-name message.
fn origin(src: &Source, given: &Given) -> String {
    match given {
        Given::Flag(flag, _) => (*flag).to_owned(),
        Given::File(_, value) => format!(
            "the top-level upstream on line {}",
            src.line(value.span().start)
        ),
    }
}

/// Settings from the raw file and the overrides, or the first problem found.
pub(super) fn resolve(
    src: &Source,
    raw: RawFile,
    cli: &Overrides,
) -> Result<Settings, ConfigError> {
    let limits = super::limits::resolve(src, &raw)?;
    let postgres = super::store_keys::resolve(src, &raw)?;
    let problem_base = Arc::new(problem_base(src, raw.problem_base.as_ref())?);
    let mut defaults = Inherited::new(Policy::new(
        RouteName::new(RouteName::DEFAULT).expect("a valid route name"),
    ));
    policy::apply(src, &mut defaults, &raw.defaults.unwrap_or_default())?;
    let upstream = Given::pick(
        ("--upstream", cli.upstream.as_ref()),
        ("upstream", raw.upstream.as_ref()),
    );
    let tls = super::tls::listener(src, cli, (raw.tls_cert.as_ref(), raw.tls_key.as_ref()))?;
    let outboxes = super::outbox::resolve(src, &raw.outboxes)?;
    let mut consumers = super::consumer::resolve(src, &raw.consumers)?;
    let drain_timeout = drain_timeout(src, raw.drain_timeout.as_ref())?;
    for consumer in &mut consumers {
        consumer.settings.drain_timeout = drain_timeout;
    }
    let routes = routes(src, raw.routes, &defaults, upstream)?;
    if routes.is_empty() && outboxes.is_empty() && consumers.is_empty() {
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
        drain_timeout,
        workers: workers(src, raw.workers.as_ref())?,
        admin_token: raw
            .admin_token
            .as_ref()
            .map(|token| check(src, token, "admin_token", Secret::resolve))
            .transpose()?,
        encryption: super::crypto::encryption(src, &raw.encryption_key, &raw.encryption_old_keys)?,
        problem_base,
        limits,
        tls,
        routes,
        outboxes,
        consumers,
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

/// The configured routes in file order, then `default` for the top-level upstream; none is
/// a relay-only process, if it has outboxes.
fn routes(
    src: &Source,
    tables: Vec<Spanned<RouteTable>>,
    defaults: &Inherited,
    upstream: Option<Given>,
) -> Result<Vec<RouteSettings>, ConfigError> {
    let mut names: HashMap<String, Range<usize>> = HashMap::new();
    let mut routes = Vec::with_capacity(tables.len() + 1);
    for table in tables {
        let span = table.span();
        let (head, keys) = table.into_inner().split();
        let name = unique_name(src, &head, span.clone(), &mut names)?;
        let mut inherited = defaults.clone();
        inherited.policy.route = name;
        policy::apply(src, &mut inherited, &keys)?;
        routes.push(route(src, &head, span, inherited)?);
    }
    if let Some(given) = upstream {
        routes.push(default_route(src, &given, defaults, &names)?);
    }
    Ok(routes)
}

/// The route `default`, for the top-level upstream; a configured route may not take its name.
fn default_route(
    src: &Source,
    upstream: &Given,
    defaults: &Inherited,
    names: &HashMap<String, Range<usize>>,
) -> Result<RouteSettings, ConfigError> {
    if let Some(span) = names.get(RouteName::DEFAULT) {
        let reason = format!(
            "key \"name\": route name \"default\" is already taken by {}",
            origin(src, upstream)
        );
        return Err(src.at(span.clone(), Some("name"), reason));
    }
    let uri = upstream.parse(src, upstream_uri)?;
    let tls = defaults.upstream_tls.clone();
    Ok(RouteSettings {
        path_prefix: "/".into(),
        host: None,
        upstream_tls: upstream.parse(src, |_| tls.for_upstream(is_https(&uri)))?,
        upstream: uri,
        policy: defaults.policy.clone(),
        replay_cache_ttl: defaults.replay_cache_ttl,
        upstream_idle_timeout: defaults.upstream_idle_timeout,
        delivery: defaults.delivery.clone(),
    })
}

fn unique_name(
    src: &Source,
    head: &RouteHead,
    table: Range<usize>,
    names: &mut HashMap<String, Range<usize>>,
) -> Result<RouteName, ConfigError> {
    let Some(raw) = &head.name else {
        return Err(src.at(
            table,
            Some("name"),
            "key \"name\": every [[routes]] table needs a name".into(),
        ));
    };
    let name = check(src, raw, "name", |name| RouteName::new(name))?;
    if let Some(first) = names.get(name.as_str()) {
        let reason = format!(
            "route name {:?} is already used on line {}",
            name.as_str(),
            src.line(first.start)
        );
        return Err(src.bad(raw, "name", reason));
    }
    names.insert(name.as_str().to_owned(), raw.span());
    Ok(name)
}

fn route(
    src: &Source,
    head: &RouteHead,
    table: Range<usize>,
    inherited: Inherited,
) -> Result<RouteSettings, ConfigError> {
    let Inherited {
        policy,
        replay_cache_ttl,
        upstream_idle_timeout,
        upstream_tls,
        delivery,
    } = inherited;
    let missing = |key: &str| {
        let reason = format!(
            "key {key:?}: route {:?} has no {key}",
            policy.route.as_str()
        );
        src.at(table.clone(), Some(key), reason)
    };
    let upstream = head.upstream.as_ref().ok_or_else(|| missing("upstream"))?;
    let prefix = head
        .path_prefix
        .as_ref()
        .ok_or_else(|| missing("path_prefix"))?;
    let host = head.host.as_ref().map(|h| check(src, h, "host", host));
    let uri = check(src, upstream, "upstream", upstream_uri)?;
    let upstream_tls = upstream_tls
        .for_upstream(is_https(&uri))
        .map_err(|reason| src.bad(upstream, "upstream", reason))?;
    Ok(RouteSettings {
        path_prefix: check(src, prefix, "path_prefix", path_prefix)?,
        host: host.transpose()?,
        upstream: uri,
        policy,
        replay_cache_ttl,
        upstream_idle_timeout,
        upstream_tls,
        delivery,
    })
}

fn is_https(uri: &http::Uri) -> bool {
    uri.scheme() == Some(&http::uri::Scheme::HTTPS)
}

/// Parses a value read from the file, naming its line and key if it is refused.
fn check<T>(
    src: &Source,
    value: &Spanned<String>,
    key: &str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, ConfigError> {
    parse(value.get_ref()).map_err(|reason| src.bad(value, key, reason))
}
