//! Turning the `[defaults]` and `[[routes]]` tables into [`RouteSettings`]: each route's
//! head (name, prefix, host, upstream) and its policy over what it inherits.

use std::collections::HashMap;
use std::ops::Range;

use toml::Spanned;

use crate::config::common::error::ConfigError;
use crate::config::common::given::Given;
use crate::config::common::source::Source;
use crate::config::common::values::{host, path_prefix, upstream_uri};
use crate::config::file::resolve::check;
use crate::config::routes::keys::{RouteHead, RouteTable};
use crate::config::routes::policy::{self, Inherited};
use crate::config::settings::RouteSettings;
use idempotency_core::backend::RouteName;

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

/// The configured routes in file order, then `default` for the top-level upstream; none is
/// a relay-only process, if it has outboxes.
pub(in crate::config) fn routes(
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
