//! What the admin listener answers by itself (docs/reference.md#problems): its own problems
//! (no record, no delivery, no outbox, a refused reload, no token), and the layer's where an
//! operator's request meets the same condition (the store down, no such route). Both are
//! rendered by the core's problem+json renderer, under the running config's problem base.

use axum::response::{IntoResponse, Response};
use http::StatusCode;
use idempotency_core::{Problem, ProblemMeta, ProblemType};

/// An answer of the admin listener that is not a success.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum AdminProblem {
    /// One of the layer's problems: the store is down, no route of that name, a bad query.
    #[error(transparent)]
    Layer(#[from] Problem),
    /// No record is stored under the key an operator named.
    #[error("no record is stored under this key")]
    NoRecord,
    /// A `DELETE` of a record whose request is still running, which would let a retry run the
    /// operation again while the first run goes on.
    #[error("the request holding this key is still running, and removing its record would let a retry run it a second time; add ?force=true to remove it anyway")]
    RecordInFlight,
    /// No dead delivery of that id on the inbox route or outbox an operator named.
    #[error("no dead delivery of this id is kept here")]
    NoDelivery,
    /// No outbox of that name in the running config.
    #[error("no outbox of this name is configured")]
    NoOutbox,
    /// An outbox's database could not be reached, or refused the statement.
    #[error("the outbox's database cannot be read or written right now; retry later")]
    OutboxUnavailable,
    /// A reload refused, with the one line saying why (file, line, key); the running config
    /// stays.
    #[error("{0}")]
    BadConfig(String),
    /// A guarded endpoint asked for without the admin token, or with another one.
    #[error("this endpoint requires the admin token, as Authorization: Bearer <token>")]
    Unauthorized,
}

/// The admin listener's own problem types; a running record's shares the layer's type, as it
/// is one problem to a client.
const NO_RECORD: ProblemMeta = ProblemMeta::new(StatusCode::NOT_FOUND, "no-record", "No record");
const RECORD_IN_FLIGHT: ProblemMeta = ProblemMeta::new(
    StatusCode::CONFLICT,
    "request-in-flight",
    "Request in flight",
);
const NO_DELIVERY: ProblemMeta =
    ProblemMeta::new(StatusCode::NOT_FOUND, "no-delivery", "No such delivery");
const NO_OUTBOX: ProblemMeta =
    ProblemMeta::new(StatusCode::NOT_FOUND, "no-outbox", "No such outbox");
const OUTBOX_UNAVAILABLE: ProblemMeta = ProblemMeta::new(
    StatusCode::SERVICE_UNAVAILABLE,
    "outbox-unavailable",
    "Outbox database unavailable",
);
const BAD_CONFIG: ProblemMeta = ProblemMeta::new(
    StatusCode::BAD_REQUEST,
    "bad-config",
    "Configuration refused",
);
const UNAUTHORIZED: ProblemMeta = ProblemMeta::new(
    StatusCode::UNAUTHORIZED,
    "unauthorized",
    "Admin token required",
);

/// The admin listener's own problem types, once each.
const ADMIN_TYPES: &[ProblemMeta] = &[
    NO_RECORD,
    RECORD_IN_FLIGHT,
    NO_DELIVERY,
    NO_OUTBOX,
    OUTBOX_UNAVAILABLE,
    BAD_CONFIG,
    UNAUTHORIZED,
];

impl ProblemType for AdminProblem {
    fn meta(&self) -> ProblemMeta {
        match self {
            Self::Layer(problem) => problem.meta(),
            Self::NoRecord => NO_RECORD,
            Self::RecordInFlight => RECORD_IN_FLIGHT,
            Self::NoDelivery => NO_DELIVERY,
            Self::NoOutbox => NO_OUTBOX,
            Self::OutboxUnavailable => OUTBOX_UNAVAILABLE,
            Self::BadConfig(_) => BAD_CONFIG,
            Self::Unauthorized => UNAUTHORIZED,
        }
    }
}

impl IntoResponse for AdminProblem {
    fn into_response(self) -> Response {
        match self {
            Self::Layer(problem) => problem.into_response(),
            own => own.into_problem_response(),
        }
    }
}

/// Every problem type the proxy answers with, the layer's and the admin listener's, each once:
/// what the reference's table of problem types lists.
pub fn problem_types() -> Vec<ProblemMeta> {
    let mut all: Vec<ProblemMeta> = Problem::TYPES.to_vec();
    for own in ADMIN_TYPES {
        if !all.contains(own) {
            all.push(*own);
        }
    }
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One of each of the admin listener's own kinds.
    fn one_of_each() -> Vec<AdminProblem> {
        let all = vec![
            AdminProblem::NoRecord,
            AdminProblem::RecordInFlight,
            AdminProblem::NoDelivery,
            AdminProblem::NoOutbox,
            AdminProblem::OutboxUnavailable,
            AdminProblem::BadConfig("x".into()),
            AdminProblem::Unauthorized,
        ];
        // No wildcard: a kind added to the enum stops this compiling until it is listed above.
        for problem in &all {
            match problem {
                AdminProblem::Layer(_)
                | AdminProblem::NoRecord
                | AdminProblem::RecordInFlight
                | AdminProblem::NoDelivery
                | AdminProblem::NoOutbox
                | AdminProblem::OutboxUnavailable
                | AdminProblem::BadConfig(_)
                | AdminProblem::Unauthorized => {}
            }
        }
        all
    }

    #[test]
    fn each_kind_has_its_type_and_a_type_shared_with_the_layer_means_the_same() {
        let metas: Vec<ProblemMeta> = one_of_each().iter().map(ProblemType::meta).collect();
        assert_eq!(metas, ADMIN_TYPES);
        for own in ADMIN_TYPES {
            assert!(own.status.is_client_error() || own.status.is_server_error());
            if let Some(layer) = Problem::TYPES.iter().find(|t| t.kind == own.kind) {
                assert_eq!(layer, own, "{} means two things", own.kind);
            }
        }
        let kinds: Vec<&str> = problem_types().iter().map(|t| t.kind).collect();
        let mut distinct = kinds.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), kinds.len(), "{kinds:?}");
    }

    #[test]
    fn the_layers_problems_pass_through_as_they_are() {
        let response = AdminProblem::from(Problem::StoreUnavailable).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            response.extensions().get::<Problem>(),
            Some(&Problem::StoreUnavailable)
        );
        let own = AdminProblem::NoOutbox.into_response();
        assert_eq!(own.status(), StatusCode::NOT_FOUND);
        assert!(own.extensions().get::<Problem>().is_none());
    }
}
