//! Requests counted as kube-apiserver counts them: each answered request's verb and
//! resource (`apiserver_request_total`'s labels), served as Prometheus text on `/metrics`.

use axum::http::{Method, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::Shared;
use crate::target::parse_target;

/// A request's verb and resource, as `apiserver_request_total` labels them.
pub(crate) fn classify(
    shared: &Shared,
    method: &Method,
    path: &str,
    watch: bool,
) -> (&'static str, String) {
    let target = parse_target(&shared.store(), path).ok().flatten();
    let Some(target) = target else {
        return (
            if *method == Method::GET {
                "get"
            } else {
                "other"
            },
            String::new(),
        );
    };
    let t = shared.store().type_at(target.type_index);
    let mut resource = t.plural.clone();
    if let Some(sub) = &target.subresource {
        resource = format!("{resource}/{sub}");
    }
    let verb = match (method.as_str(), target.name.is_some()) {
        ("GET", _) if watch => "watch",
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("PUT", _) => "update",
        ("PATCH", _) => "patch",
        ("DELETE", true) => "delete",
        ("DELETE", false) => "deletecollection",
        _ => "other",
    };
    (verb, resource)
}

/// `/metrics`: `apiserver_request_total` by verb, resource and code.
pub(crate) fn metrics_text(shared: &Shared) -> Response {
    let mut text = String::from(
        "# HELP apiserver_request_total Counter of apiserver requests broken out for each verb, resource, and HTTP response code.\n# TYPE apiserver_request_total counter\n",
    );
    for ((verb, resource, code), n) in shared.requests() {
        // As the real server labels them: `pods` and `eviction`, not `pods/eviction`.
        let (resource, subresource) = resource.split_once('/').unwrap_or((&resource, ""));
        text.push_str(&format!(
            "apiserver_request_total{{code=\"{code}\",resource=\"{resource}\",subresource=\"{subresource}\",verb=\"{verb}\"}} {n}\n"
        ));
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        text,
    )
        .into_response()
}
