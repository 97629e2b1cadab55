//! Requests: discovery, the resource verbs, watches, pod binding and eviction.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use kube_admission::object::FieldValidation;

use crate::faults::{Drawn, Fault};
use crate::requests;
use crate::resources::{self, ResourceType};
use crate::scale;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteRequest, EventKind, PatchKind, PatchRequest, RequestOptions, WatchEvent};
use crate::target::{Target, parse_target};
use crate::{ApiError, Shared};

pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn json_response(code: StatusCode, body: &Value) -> Response {
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn error_response(error: &ApiError) -> Response {
    let code = StatusCode::from_u16(error.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    json_response(code, &error.status())
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if method == Method::GET && uri.path() == "/metrics" {
        return requests::metrics_text(&shared);
    }
    let query: HashMap<String, String> = Query::try_from_uri(&uri).map(|q| q.0).unwrap_or_default();
    let watch =
        method == Method::GET && query.get("watch").is_some_and(|v| v == "true" || v == "1");
    let resuming = query
        .get("resourceVersion")
        .is_some_and(|v| !v.is_empty() && v != "0");
    let (verb, resource) = requests::classify(&shared, &method, uri.path(), watch);
    let fault = shared.faults().draw(Drawn {
        method: &method,
        watch,
        resuming,
        list: verb == "list",
    });
    let response = respond(&shared, fault, &method, &uri, &headers, &query, &body).await;
    shared.count_request(verb, resource, response.status().as_u16());
    response
}

/// The request's answer, with `fault` injected.
async fn respond(
    shared: &Arc<Shared>,
    fault: Option<Fault>,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &Bytes,
) -> Response {
    match fault {
        Some(Fault::Slow(delay)) => tokio::time::sleep(delay).await,
        Some(Fault::Conflict) => {
            return error_response(&ApiError::conflict(format!(
                "Operation cannot be fulfilled on {}: the object has been modified; please apply your changes to the latest version and try again",
                uri.path()
            )));
        }
        Some(fault) => {
            if let Some((error, seconds)) = fault.refusal() {
                let mut response = error_response(&error);
                if let Some(seconds) = seconds {
                    response
                        .headers_mut()
                        .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
                }
                return response;
            }
        }
        _ => {}
    }
    let mut reply = route(shared, method, uri, headers, query, body);
    if let Ok(Reply::Watch(watch)) = &mut reply {
        watch.fault = fault;
    }
    // Warnings (unknown fields dropped) go back as `Warning` headers, as the real server sends.
    let warnings = shared.store().take_warnings();
    let mut response = match reply {
        Ok(Reply::Object(code, value)) if fault == Some(Fault::ResetList) => {
            cut_halfway(code, &value)
        }
        Ok(Reply::Object(code, value)) => json_response(code, &value),
        Ok(Reply::Watch(watch)) => watch.into_response(shared),
        Err(error) => error_response(&error),
    };
    for warning in warnings {
        let text = format!("299 - {warning:?}");
        if let Ok(value) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append("Warning", value);
        }
    }
    response
}

/// A `200` whose body stops halfway: the client reads the headers and half the list, then
/// the connection resets.
fn cut_halfway(code: StatusCode, value: &Value) -> Response {
    let text = value.to_string().into_bytes();
    let half = Bytes::from(text[..text.len() / 2].to_vec());
    let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
        Ok(half),
        Err(std::io::Error::other("connection reset (injected fault)")),
    ];
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(futures_util::stream::iter(chunks)),
    )
        .into_response()
}

enum Reply {
    Object(StatusCode, Value),
    Watch(WatchRequest),
}

fn ok(value: Value) -> Result<Reply, ApiError> {
    Ok(Reply::Object(StatusCode::OK, value))
}

/// The kind of patch a request's `Content-Type` says it is.
fn patch_kind(headers: &HeaderMap, force: bool) -> Result<PatchKind, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.starts_with("application/apply-patch") {
        Ok(PatchKind::Apply { force })
    } else if content_type.starts_with("application/json-patch+json") {
        Ok(PatchKind::Json)
    } else if content_type.starts_with("application/merge-patch+json")
        || content_type.starts_with("application/strategic-merge-patch+json")
    {
        Ok(PatchKind::Merge)
    } else {
        Err(ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml (got {content_type:?})"
            ),
            details: None,
        })
    }
}

fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    if body.is_empty() {
        return Ok(Value::Null);
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if content_type.contains("protobuf") || content_type.contains("cbor") {
        return Err(ApiError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "this test API server reads JSON and YAML bodies only, not {content_type} \
                 (kubectl sends protobuf for typed creates of built-in kinds: use kubectl apply)"
            ),
            details: None,
        });
    }
    let yaml = content_type.contains("yaml");
    match serde_json::from_slice(body) {
        Ok(v) => Ok(v),
        Err(_) if yaml => serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("the body is not valid YAML: {e}"))),
        Err(e) => Err(ApiError::bad_request(format!(
            "the body is not valid JSON: {e}"
        ))),
    }
}

fn route(
    shared: &Shared,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    query: &HashMap<String, String>,
    body: &Bytes,
) -> Result<Reply, ApiError> {
    let path = uri.path();
    if *method == Method::GET
        && let Some(discovery) = discovery(shared, path)
    {
        return ok(discovery);
    }
    let Some(target) = parse_target(&shared.store(), path)? else {
        return Err(ApiError::not_found("path", path));
    };
    let t = shared.store().type_at(target.type_index);
    let t = &*t;
    let namespace = target.namespace.clone().unwrap_or_default();
    let flag = |name: &str| query.get(name).is_some_and(|v| v == "true" || v == "1");
    let options = RequestOptions {
        field_validation: FieldValidation::parse(query.get("fieldValidation").map(String::as_str))
            .map_err(|e| ApiError::bad_request(e.to_string()))?,
        dry_run: match query.get("dryRun").map(String::as_str) {
            None | Some("") => false,
            Some("All") => true,
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "dryRun: Unsupported value: {other:?}: supported values: \"All\""
                )));
            }
        },
    };
    match (method.clone(), &target.name, target.subresource.as_deref()) {
        (Method::GET, None, None) => {
            let labels =
                LabelSelector::parse(query.get("labelSelector").map_or("", String::as_str))?;
            let fields =
                FieldSelector::parse(query.get("fieldSelector").map_or("", String::as_str))?;
            if flag("watch") {
                let resource_version = query.get("resourceVersion").cloned().unwrap_or_default();
                if !resource_version.is_empty() && resource_version.parse::<u64>().is_err() {
                    return Err(ApiError::bad_request(format!(
                        "invalid resourceVersion {resource_version:?}: use one a list or watch returned"
                    )));
                }
                return Ok(Reply::Watch(WatchRequest {
                    type_index: target.type_index,
                    namespace: target.namespace.clone(),
                    labels,
                    fields,
                    resource_version,
                    bookmarks: flag("allowWatchBookmarks"),
                    timeout: query
                        .get("timeoutSeconds")
                        .and_then(|s| s.parse::<u64>().ok())
                        .map(std::time::Duration::from_secs),
                    fault: None,
                }));
            }
            list(shared, t, &target, query, &labels, &fields)
        }
        (Method::POST, None, None) => {
            let object = parse_body(headers, body)?;
            let created =
                shared
                    .store()
                    .create_with(target.type_index, &namespace, object, options)?;
            Ok(Reply::Object(StatusCode::CREATED, created))
        }
        (Method::GET, Some(name), None | Some("status")) => {
            ok(shared.store().get(target.type_index, &namespace, name)?)
        }
        (Method::PUT, Some(name), sub @ (None | Some("status"))) => {
            let object = parse_body(headers, body)?;
            let status = sub.is_some();
            ok(shared.store().replace(
                target.type_index,
                &namespace,
                name,
                object,
                status,
                options,
            )?)
        }
        (method @ (Method::GET | Method::PUT | Method::PATCH), Some(name), Some("scale")) => {
            let Some(paths) = &t.scale else {
                return Err(ApiError::not_found(&format!("{}/scale", t.plural), name));
            };
            let mut store = shared.store();
            let object = store.get(target.type_index, &namespace, name)?;
            if method == Method::GET {
                return ok(scale::scale_of(paths, &object));
            }
            let body = parse_body(headers, body)?;
            let change = match (method, patch_kind(headers, flag("force"))?) {
                (Method::PUT, _) => scale::ScaleChange::Replace(&body),
                (_, PatchKind::Json) => scale::ScaleChange::Json(&body),
                (_, PatchKind::Merge) => scale::ScaleChange::Merge(&body),
                (_, PatchKind::Apply { .. }) => {
                    return Err(ApiError::bad_request(
                        "server-side apply of a scale subresource is not served here; use a merge patch (kubectl scale)".into(),
                    ));
                }
            };
            let updated = scale::scaled(paths, &object, change)?;
            let stored =
                store.replace(target.type_index, &namespace, name, updated, false, options)?;
            ok(scale::scale_of(paths, &stored))
        }
        (Method::PATCH, Some(name), sub @ (None | Some("status"))) => {
            let kind = patch_kind(headers, flag("force"))?;
            let patch = parse_body(headers, body)?;
            let manager = query.get("fieldManager").map(String::as_str);
            let request = PatchRequest {
                kind,
                body: &patch,
                manager,
                status: sub.is_some(),
                options,
            };
            let patched = shared
                .store()
                .patch(target.type_index, &namespace, name, &request)?;
            ok(patched)
        }
        (Method::DELETE, Some(name), None) => {
            let delete = delete_request(&parse_body(headers, body)?, query);
            ok(shared
                .store()
                .delete(target.type_index, &namespace, name, &delete)?)
        }
        (Method::POST, Some(name), Some("eviction"))
            if t.plural == "pods" && t.group.is_empty() =>
        {
            let eviction = parse_body(headers, body)?;
            let delete = delete_request(&eviction["deleteOptions"], query);
            evict(shared, &namespace, name, &delete)
        }
        (Method::POST, Some(name), Some("binding")) if t.plural == "pods" && t.group.is_empty() => {
            let binding = parse_body(headers, body)?;
            bind(shared, target.type_index, &namespace, name, &binding)
        }
        (method, _, sub) => Err(ApiError {
            code: 405,
            reason: "MethodNotAllowed",
            message: format!(
                "{method} is not supported on {}{}",
                t.plural,
                sub.map(|s| format!("/{s}")).unwrap_or_default()
            ),
            details: None,
        }),
    }
}

/// A delete's options from its body (`DeleteOptions`) or query.
fn delete_request(options: &Value, query: &HashMap<String, String>) -> DeleteRequest {
    DeleteRequest {
        preconditions: options.get("preconditions").cloned().unwrap_or(Value::Null),
        grace_period: options
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| query.get("gracePeriodSeconds").and_then(|g| g.parse().ok())),
    }
}

/// Continue tokens: the resource version of the first page and the last key returned.
fn continue_token(rv: u64, namespace: &str, name: &str) -> String {
    json!([rv, namespace, name]).to_string()
}

fn list(
    shared: &Shared,
    t: &ResourceType,
    target: &Target,
    query: &HashMap<String, String>,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> Result<Reply, ApiError> {
    let store = shared.store();
    let after = match query.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let parsed: (u64, String, String) = serde_json::from_str(token)
                .map_err(|_| ApiError::bad_request(format!("invalid continue token {token:?}")))?;
            store.still_current(parsed.0).map_err(|_| {
                ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list \
                     result. You can start a new list without the continue parameter."
                        .into(),
                )
            })?;
            Some((parsed.1, parsed.2))
        }
        None => None,
    };
    let mut items = store.list(
        target.type_index,
        target.namespace.as_deref(),
        labels,
        fields,
        after.as_ref(),
    );
    let limit = query
        .get("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|l| *l > 0);
    let rv = store.resource_version();
    let mut metadata = json!({"resourceVersion": rv.to_string()});
    if let Some(limit) = limit.filter(|l| items.len() > *l) {
        items.truncate(limit);
        if let Some((last, _)) = items.last() {
            metadata["continue"] = Value::String(continue_token(rv, &last.namespace, &last.name));
        }
    }
    ok(json!({
        "kind": format!("{}List", t.kind),
        "apiVersion": t.api_version(),
        "metadata": metadata,
        "items": items.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
    }))
}

/// A watch to stream.
struct WatchRequest {
    type_index: usize,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
    resource_version: String,
    bookmarks: bool,
    timeout: Option<std::time::Duration>,
    /// An injected fault: the version it resumes from expired, or its connection drops.
    fault: Option<Fault>,
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = json!({"type": kind, "object": object}).to_string();
    line.push('\n');
    Bytes::from(line)
}

impl WatchRequest {
    fn selects(&self, object: &Value) -> bool {
        self.labels.matches(object) && self.fields.matches(object)
    }

    /// What this watch sees of an event: as the real server filters, an object modified into
    /// its selectors arrives as ADDED and one modified out of them as DELETED.
    fn view<'e>(&self, event: &'e WatchEvent) -> Option<(&'static str, &'e Value)> {
        if event.type_index != self.type_index
            || self
                .namespace
                .as_deref()
                .is_some_and(|n| n != event.namespace)
        {
            return None;
        }
        let now = self.selects(&event.object);
        let before = event.previous.as_ref().is_some_and(|p| self.selects(p));
        let kind = match (event.kind, before, now) {
            (EventKind::Added, _, true) => "ADDED",
            (EventKind::Modified, true, true) => "MODIFIED",
            (EventKind::Modified, false, true) => "ADDED",
            (EventKind::Modified, true, false) => "DELETED",
            (EventKind::Deleted, _, true) => "DELETED",
            _ => return None,
        };
        Some((kind, &event.object))
    }

    fn into_response(self, shared: &Arc<Shared>) -> Response {
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(256);
        // Under the store lock: the backlog and the subscription start at the same version,
        // so no event is missed or sent twice.
        let start = {
            let store = shared.store();
            let receiver = store.subscribe();
            let from = match self.resource_version.as_str() {
                "" | "0" => None,
                rv => rv.parse::<u64>().ok(),
            };
            let backlog: Result<Vec<Bytes>, ApiError> = match from {
                Some(_) if self.fault == Some(Fault::Gone) => Err(ApiError::gone(
                    "too old resource version (injected fault)".into(),
                )),
                // From "now": the current objects as ADDED, then changes.
                None => Ok(store
                    .list(
                        self.type_index,
                        self.namespace.as_deref(),
                        &self.labels,
                        &self.fields,
                        None,
                    )
                    .into_iter()
                    .map(|(_, v)| event_line("ADDED", &v))
                    .collect()),
                Some(rv) => store
                    .events_since(rv, self.type_index, self.namespace.as_deref())
                    .map(|events| {
                        events
                            .iter()
                            .filter_map(|e| self.view(e))
                            .map(|(kind, object)| event_line(kind, object))
                            .collect()
                    }),
            };
            (receiver, backlog, store.resource_version())
        };
        let (mut receiver, backlog, mut sent_through) = start;
        let mut disconnects = shared.disconnects.subscribe();
        let interval = shared.options.bookmark_interval;
        let served = shared.store().type_at(self.type_index);
        let api_version = served.api_version();
        let kind = served.kind.clone();
        tokio::spawn(async move {
            let lines = match backlog {
                Ok(lines) => lines,
                Err(error) => {
                    let _ = tx.send(Ok(event_line("ERROR", &error.status()))).await;
                    return;
                }
            };
            for line in lines {
                if tx.send(Ok(line)).await.is_err() {
                    return;
                }
            }
            let deadline = self.timeout.map(|t| tokio::time::Instant::now() + t);
            let cut = async {
                match self.fault {
                    Some(Fault::DropWatch(after)) => tokio::time::sleep(after).await,
                    _ => std::future::pending().await,
                }
            };
            tokio::pin!(cut);
            let mut bookmarks = tokio::time::interval(interval);
            bookmarks.tick().await;
            loop {
                let timeout = async {
                    match deadline {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    event = receiver.recv() => match event {
                        Ok(event) => {
                            if event.rv <= sent_through {
                                continue;
                            }
                            // Bookmarks carry the newest version seen, sent or not.
                            sent_through = event.rv;
                            let Some((kind, object)) = self.view(&event) else {
                                continue;
                            };
                            if tx.send(Ok(event_line(kind, object))).await.is_err() {
                                return;
                            }
                        }
                        // Too slow to keep up, or the server is going: end the stream.
                        Err(_) => return,
                    },
                    _ = bookmarks.tick(), if self.bookmarks => {
                        let bookmark = json!({
                            "kind": kind,
                            "apiVersion": api_version,
                            "metadata": {"resourceVersion": sent_through.to_string()},
                        });
                        if tx.send(Ok(event_line("BOOKMARK", &bookmark))).await.is_err() {
                            return;
                        }
                    }
                    _ = disconnects.changed() => return,
                    () = timeout => return,
                    () = &mut cut => {
                        // Aborts the body: the client sees the connection drop mid-stream.
                        let _ = tx.send(Err(std::io::Error::other("connection dropped (injected fault)"))).await;
                        return;
                    }
                }
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            Body::from_stream(stream),
        )
            .into_response()
    }
}

fn discovery(shared: &Shared, path: &str) -> Option<Value> {
    let path = path.trim_end_matches('/');
    let types: Vec<std::sync::Arc<ResourceType>> = shared
        .store()
        .types()
        .iter()
        .filter(|t| t.served)
        .cloned()
        .collect();
    let resource_list = |group: &str, version: &str| {
        let group_version = if group.is_empty() {
            version.to_owned()
        } else {
            format!("{group}/{version}")
        };
        let mut resources = Vec::new();
        for t in types
            .iter()
            .filter(|t| t.group == group && t.version == version)
        {
            let mut resource = json!({
                "name": t.plural,
                "singularName": t.kind.to_lowercase(),
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                "shortNames": t.short_names,
            });
            if !t.categories.is_empty() {
                resource["categories"] = json!(t.categories);
            }
            resources.push(resource);
            if t.status {
                resources.push(json!({
                    "name": format!("{}/status", t.plural),
                    "singularName": "",
                    "namespaced": t.namespaced,
                    "kind": t.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            if t.plural == "pods" && t.group.is_empty() {
                for (sub, kind) in [("eviction", "Eviction"), ("binding", "Binding")] {
                    resources.push(json!({
                        "name": format!("pods/{sub}"),
                        "singularName": "",
                        "namespaced": true,
                        "kind": kind,
                        "group": if sub == "eviction" { "policy" } else { "" },
                        "version": "v1",
                        "verbs": ["create"],
                    }));
                }
            }
        }
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources})
    };
    match path.split('/').skip(1).collect::<Vec<_>>().as_slice() {
        ["version"] => Some(json!({
            "major": "1", "minor": "33", "gitVersion": "v1.33.0-karpenter-rs-test",
            "platform": "linux/amd64",
        })),
        ["api"] => Some(json!({
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": shared.addr.to_string()}],
        })),
        ["api", "v1"] => Some(resource_list("", "v1")),
        ["apis"] => Some(json!({
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": resources::groups(&types).into_iter().map(|(group, versions)| {
                let versions: Vec<Value> = versions.iter().map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v})).collect();
                json!({"name": group, "versions": versions.clone(), "preferredVersion": versions[0]})
            }).collect::<Vec<_>>(),
        })),
        ["apis", group, version]
            if types
                .iter()
                .any(|t| t.group == *group && t.version == *version) =>
        {
            Some(resource_list(group, version))
        }
        _ => None,
    }
}

fn bind(
    shared: &Shared,
    pods: usize,
    namespace: &str,
    name: &str,
    binding: &Value,
) -> Result<Reply, ApiError> {
    let node = binding["target"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| {
            ApiError::unprocessable("target.name: Required value: the node to bind to".into())
        })?;
    let mut store = shared.store();
    let pod = store.get(pods, namespace, name)?;
    if let Some(bound) = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty()) {
        return Err(ApiError::conflict(format!(
            "pod {name} is already assigned to node {bound:?}"
        )));
    }
    let patch = json!({"spec": {"nodeName": node}});
    let request = PatchRequest {
        kind: PatchKind::Merge,
        body: &patch,
        manager: None,
        status: false,
        options: RequestOptions::default(),
    };
    store.patch(pods, namespace, name, &request)?;
    Ok(Reply::Object(
        StatusCode::CREATED,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}),
    ))
}

/// An integer or a percentage of `total` (rounded up, as the disruption controller does).
fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => match s.strip_suffix('%') {
            Some(p) => p.parse::<i64>().ok().map(|p| (p * total + 99) / 100),
            None => s.parse().ok(),
        },
        _ => None,
    }
}

fn healthy(pod: &Value) -> bool {
    pod["metadata"].get("deletionTimestamp").is_none()
        && pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Whether a PodDisruptionBudget's selector selects a pod (one that cannot be read selects
/// nothing, as the disruption controller would not count it either).
fn selector_matches(selector: &Value, pod: &Value) -> bool {
    crate::selectors::LabelSelector::from_object(selector).is_some_and(|s| s.matches(pod))
}

/// The Eviction API: the pod is deleted unless a PodDisruptionBudget selecting it allows no
/// disruption now (counted here from the pods, as the disruption controller would have).
fn evict(
    shared: &Shared,
    namespace: &str,
    name: &str,
    delete: &DeleteRequest,
) -> Result<Reply, ApiError> {
    let pods = resources::PODS;
    let budgets = resources::PODDISRUPTIONBUDGETS;
    let mut store = shared.store();
    let pod = store.get(pods, namespace, name)?;
    let success = Reply::Object(
        StatusCode::CREATED,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
    );
    if pod["metadata"].get("deletionTimestamp").is_some() {
        return Ok(success);
    }
    let matching: Vec<Value> = store
        .in_namespace(budgets, namespace)
        .into_iter()
        .filter(|pdb| {
            pdb["spec"]
                .get("selector")
                .is_some_and(|s| selector_matches(s, &pod))
        })
        .collect();
    if matching.len() > 1 {
        return Err(ApiError::new(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.".into()));
    }
    if let Some(pdb) = matching.first() {
        let selected: Vec<Value> = store
            .in_namespace(pods, namespace)
            .into_iter()
            .filter(|p| selector_matches(&pdb["spec"]["selector"], p))
            .collect();
        let expected = selected.len() as i64;
        let current = selected.iter().filter(|p| healthy(p)).count() as i64;
        let desired = if let Some(min) = pdb["spec"].get("minAvailable") {
            scaled(min, expected).unwrap_or(expected)
        } else if let Some(max) = pdb["spec"].get("maxUnavailable") {
            expected - scaled(max, expected).unwrap_or(0)
        } else {
            expected
        };
        // An unhealthy pod does not lower the healthy count, so it may go while the budget
        // is met (the default IfHealthyBudget policy).
        let allowed = if healthy(&pod) {
            current - desired
        } else {
            i64::from(current >= desired)
        };
        if allowed <= 0 {
            let pdb_name = pdb["metadata"]["name"].as_str().unwrap_or("");
            return Err(ApiError {
                code: 429,
                reason: "TooManyRequests",
                message: "Cannot evict pod as it would violate the pod's disruption budget.".into(),
                details: Some(json!({"causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!("The disruption budget {pdb_name} needs {desired} healthy pods and has {current} currently"),
                }]})),
            });
        }
    }
    store.delete(pods, namespace, name, delete)?;
    Ok(success)
}
