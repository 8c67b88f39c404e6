//! The status page (docs/reference.md#status-page): `GET /` serves one self-contained HTML page, which polls
//! `GET /status` for its data every 2 s.
//!
//! The page holds no data of its own, so it loads without the admin token; its policy lets it
//! reach nothing but this listener, so it cannot pull in, or leak to, anything elsewhere.

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::Json;

use super::AdminState;

const PAGE: &str = include_str!("page.html");

/// Inline style and script only; data from this origin only; no frames, forms posting away,
/// or images but the page's own inline SVG.
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; \
     script-src 'unsafe-inline'; connect-src 'self'; img-src data:; form-action 'none'; \
     frame-ancestors 'none'; base-uri 'none'";

pub(super) async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
}

pub(super) async fn status(State(state): State<AdminState>) -> impl IntoResponse {
    let store = state.view.load().store.clone();
    let report = state.status.report(store.as_ref()).await;
    ([(header::CACHE_CONTROL, "no-store")], Json(report))
}
