//! The admin page: one HTML document, its script and its style sheet, built into the binary
//! (no CDN, no network: the page works wherever the endpoint answers). The script reads the
//! same JSON routes anyone can, so the page shows nothing the JSON does not.

use axum::http::header;
use axum::response::{IntoResponse, Response};

const INDEX: &str = include_str!("page/index.html");
const SCRIPT: &str = include_str!("page/admin.js");
const STYLE: &str = include_str!("page/admin.css");
const ICON: &str = include_str!("page/icon.svg");

/// Everything the page loads comes from this endpoint; inline script and style are refused.
const POLICY: &str = "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CONTENT_SECURITY_POLICY, POLICY),
            (header::CACHE_CONTROL, "no-cache"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
        .into_response()
}

/// `/`: the page.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// `/admin.js`: what draws it.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// `/admin.css`: how it looks.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// `/favicon.ico`: the tab's icon (SVG, which browsers take under that name too).
pub async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}
