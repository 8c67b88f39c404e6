//! What the admin endpoints over dead deliveries share, for inbox routes (`inbox.rs`) and
//! outboxes (`outbox.rs`): a page of a dead list (`?limit=`, `?after=<id>`), how its times are
//! written, and the answer to an operator's retry or delete.

use std::time::SystemTime;

use axum::http::StatusCode;
use percent_encoding::percent_decode_str;

use super::problem::AdminProblem;
use idempotency_core::Problem;

/// Dead deliveries listed when `limit` is not given, and the most one page may hold.
const DEFAULT_PAGE: u16 = 100;
const MAX_PAGE: u16 = 1000;

/// The query of a dead list: how many, and after which id.
#[derive(Debug)]
pub(super) struct Page<Id> {
    pub(super) limit: u16,
    pub(super) after: Option<Id>,
}

impl<Id> Page<Id> {
    /// Reads `limit` and `after` from `query`, each percent-decoded; `id` reads an id, and
    /// `not_an_id` says what `after` must be when it reads none. Other parameters are ignored.
    pub(super) fn parse(
        query: Option<&str>,
        id: impl Fn(&str) -> Option<Id>,
        not_an_id: &'static str,
    ) -> Result<Self, AdminProblem> {
        let mut page = Page {
            limit: DEFAULT_PAGE,
            after: None,
        };
        let pairs = query.unwrap_or_default().split('&');
        for pair in pairs.filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode_str(value)
                .decode_utf8()
                .map_err(|_| Problem::BadRequest("the query must be UTF-8"))?;
            match name {
                "limit" => {
                    let limit = value.parse().ok().filter(|l| (1..=MAX_PAGE).contains(l));
                    page.limit = limit.ok_or(Problem::BadRequest("limit must be 1 to 1000"))?;
                }
                "after" => page.after = Some(id(&value).ok_or(Problem::BadRequest(not_an_id))?),
                _ => {}
            }
        }
        Ok(page)
    }
}

/// A time as the dead lists write it: RFC 3339 in UTC, to the millisecond.
pub(super) fn rfc3339(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// `204` for a retry or delete that found its dead delivery; `404 no-delivery` for one that
/// did not (never dead, delivered since, or deleted by someone else first).
pub(super) fn done(found: bool) -> Result<StatusCode, AdminProblem> {
    if found {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(AdminProblem::NoDelivery)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(query: &str) -> Result<Page<String>, AdminProblem> {
        Page::parse(Some(query), |id| Some(id.to_owned()), "after must be an id")
    }

    #[test]
    fn reads_limit_and_a_percent_encoded_after() {
        let read = page("limit=2&after=order%2F7%26x&other=1").unwrap();
        assert_eq!((read.limit, read.after.as_deref()), (2, Some("order/7&x")));
        let default = Page::<String>::parse(None, |_| None, "x").unwrap();
        assert_eq!((default.limit, default.after), (100, None));
    }

    #[test]
    fn refuses_a_limit_out_of_range_and_an_after_that_is_no_id() {
        for bad in ["limit=0", "limit=1001", "limit=ten", "limit=", "after=%FF"] {
            assert!(
                matches!(page(bad), Err(AdminProblem::Layer(Problem::BadRequest(_)))),
                "{bad}"
            );
        }
        let refused = Page::<String>::parse(Some("after=x"), |_| None, "after must be an id");
        assert_eq!(
            refused.unwrap_err(),
            AdminProblem::Layer(Problem::BadRequest("after must be an id"))
        );
    }
}
