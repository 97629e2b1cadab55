//! The admin HTTP endpoint: a page for people at `/`, live actor state as JSON, NodeClaim
//! explanations and round costs read from the journal, health and Prometheus metrics. It runs
//! on its own thread and runtime (real time), asking the actors through their handles, so it
//! answers while a simulation runs on its virtual clock.
//!
//! Bound to loopback by default; binding any other address needs a token. The token is taken
//! as `Authorization: Bearer TOKEN`, or as the password of HTTP Basic authentication (any user
//! name) so that a browser, once it has asked for it, sends it with the page's own requests:
//! the page and the JSON are protected alike.

mod page;
pub mod query;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use axum::extract::{Path, Query, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use base64::Engine as _;
use karpenter_actors::actor::messages::NodeClaimStatus;
use karpenter_actors::handles::System;
use karpenter_core::events::DomainEvent;
use query::JournalQuery;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct AdminOptions {
    /// Listen address.
    pub addr: SocketAddr,
    /// Required as `Authorization: Bearer …` (or as the Basic password) when set (mandatory
    /// off loopback).
    pub token: Option<String>,
}

/// A running admin server; dropping it stops the server.
pub struct AdminServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AdminServer {
    /// The address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for AdminServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[derive(Clone)]
struct AppState {
    system: System,
    token: Option<Arc<str>>,
}

const CALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

fn unavailable(what: &str, error: impl std::fmt::Display) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        format!("{what} did not answer: {error}\n"),
    )
        .into_response()
}

impl AdminOptions {
    /// Refuses what [`start`] would refuse before binding: serving beyond loopback without a
    /// token. Commands check it with their other flags, before anything is written.
    pub fn check(&self) -> anyhow::Result<()> {
        if !self.addr.ip().is_loopback() && self.token.as_deref().is_none_or(str::is_empty) {
            bail!(
                "--admin {}: serving beyond loopback needs a bearer token (--admin-token or ADMIN_TOKEN)",
                self.addr
            );
        }
        Ok(())
    }
}

/// Starts serving. Fails at once when the address cannot be bound or needs a token.
pub fn start(options: AdminOptions, system: System) -> anyhow::Result<AdminServer> {
    options.check()?;
    let listener = std::net::TcpListener::bind(options.addr)
        .with_context(|| format!("cannot bind the admin endpoint to {}", options.addr))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let state = AppState {
        system,
        // An empty token (an unset chart value) is no token.
        token: options.token.filter(|t| !t.is_empty()).map(Arc::from),
    };
    let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the admin runtime")?;
    let thread = std::thread::Builder::new()
        .name("admin-http".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(error) => {
                        tracing::error!(%error, "Admin endpoint could not start.");
                        return;
                    }
                };
                let app = router(state);
                let served = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = shutdown_rx.await;
                    })
                    .await;
                if let Err(error) = served {
                    tracing::error!(%error, "Admin endpoint stopped.");
                }
            });
        })
        .context("cannot start the admin thread")?;
    tracing::info!(%addr, "Admin endpoint listening.");
    Ok(AdminServer {
        addr,
        shutdown: Some(shutdown_tx),
        thread: Some(thread),
    })
}

fn router(state: AppState) -> axum::Router {
    axum::Router::new()
        .route("/", get(page::index))
        .route("/admin.js", get(page::script))
        .route("/admin.css", get(page::style))
        .route("/favicon.ico", get(page::icon))
        .route("/explain/nodeclaim/{name}", get(explain_nodeclaim))
        .route("/rounds/{round}/cost", get(round_cost))
        .route("/actors", get(list_actors))
        .route("/nodepools", get(nodepools))
        .route("/nodeclaims", get(nodeclaims))
        .route("/nodeclaims/{name}", get(nodeclaim))
        .route("/scheduler", get(scheduler))
        .route("/disruption", get(disruption))
        .route("/journal", get(journal))
        .route("/keeper", get(keeper))
        .route("/overlays", get(overlays))
        .route("/metrics", get(metrics))
        .route("/readyz", get(readyz))
        .layer(middleware::from_fn_with_state(state.clone(), authorize))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(state)
}

async fn authorize(
    State(state): State<AppState>,
    headers: HeaderMap,
    request: Request,
    next: Next,
) -> Response {
    if let Some(token) = &state.token {
        let presented = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(presented_token);
        // Compared in constant time: how long a refusal takes tells nothing of the token.
        let matches = presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(token.as_bytes())));
        if !matches {
            return (
                StatusCode::UNAUTHORIZED,
                // A browser asks for the token (as the password) and sends it from then on.
                [(
                    header::WWW_AUTHENTICATE,
                    r#"Basic realm="karpenter-rs admin", charset="UTF-8""#,
                )],
                "missing or wrong token: send `Authorization: Bearer TOKEN`, or in a browser give the token as the password\n",
            )
                .into_response();
        }
    }
    next.run(request).await
}

/// The token an `Authorization` header presents: a bearer token, or the password of Basic
/// credentials (`base64(user:password)`).
fn presented_token(value: &str) -> Option<String> {
    if let Some(token) = value.strip_prefix("Bearer ") {
        return Some(token.to_owned());
    }
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (_user, password) = text.split_once(':')?;
    Some(password.to_owned())
}

async fn list_actors(State(state): State<AppState>) -> Json<Vec<String>> {
    Json(state.system.actor_names())
}

/// What `/overlays` answers: whether NodeOverlays are read at all, and what those in force
/// did in the rounds so far.
#[derive(serde::Serialize)]
struct OverlaysAnswer {
    /// The `NodeOverlay` gate.
    enabled: bool,
    /// Offerings each repriced, and equal-weight conflicts.
    #[serde(flatten)]
    report: karpenter_actors::overlays::OverlayReport,
}

async fn overlays(State(state): State<AppState>) -> Json<OverlaysAnswer> {
    let ctx = state.system.context();
    Json(OverlaysAnswer {
        enabled: ctx.settings.node_overlay,
        report: ctx.overlays.report(),
    })
}

async fn nodepools(State(state): State<AppState>) -> Response {
    let mut out = Vec::new();
    for (_, pool) in state.system.nodepools() {
        match pool.status(CALL_TIMEOUT).await {
            Ok(status) => out.push(status),
            Err(error) => return unavailable("a NodePool actor", error),
        }
    }
    Json(out).into_response()
}

async fn nodeclaims(State(state): State<AppState>) -> Json<Vec<NodeClaimStatus>> {
    let mut out = Vec::new();
    for (_, actor) in state.system.nodeclaims() {
        // A NodeClaim that stops while we ask is simply no longer listed.
        if let Ok(status) = actor.status(CALL_TIMEOUT).await {
            out.push(status);
        }
    }
    Json(out)
}

async fn nodeclaim(State(state): State<AppState>, Path(name): Path<String>) -> Response {
    let Some(actor) = state.system.nodeclaim(&name) else {
        return (StatusCode::NOT_FOUND, format!("no live NodeClaim {name:?}; see `karpenter journal explain nodeclaim/{name}` for ended ones\n")).into_response();
    };
    match actor.status(CALL_TIMEOUT).await {
        Ok(status) => Json(status).into_response(),
        Err(error) => unavailable("the NodeClaim actor", error),
    }
}

async fn scheduler(State(state): State<AppState>) -> Response {
    match state.system.scheduler().status(CALL_TIMEOUT).await {
        Ok(status) => Json(status).into_response(),
        Err(error) => unavailable("the scheduler", error),
    }
}

/// The disruption controller: commands in flight, the last pass (eligible nodes, budgets
/// left, nodes blocked and why), totals; `null` before it starts.
async fn disruption(State(state): State<AppState>) -> Response {
    match state.system.disruption().await {
        Ok(status) => Json(status).into_response(),
        Err(error) => unavailable("the disruption controller", error),
    }
}

/// The journal keeper: snapshots, checkpoints, history trimmed, failed passes.
async fn keeper(State(state): State<AppState>) -> Response {
    match state.system.keeper().await {
        Ok(status) => Json(status).into_response(),
        Err(error) => unavailable("the journal keeper", error),
    }
}

#[derive(Debug, Serialize)]
struct JournalEntry {
    seq: u64,
    recorded_at_ms: i64,
    entity: String,
    event_type: String,
    event: DomainEvent,
}

async fn journal(State(state): State<AppState>, RawQuery(raw): RawQuery) -> Response {
    let query = match JournalQuery::parse(raw.as_deref().unwrap_or_default().as_bytes()) {
        Ok(query) => query,
        Err(error) => return (StatusCode::BAD_REQUEST, format!("{error}\n")).into_response(),
    };
    let journal = &state.system.context().journal;
    let since = match query.last {
        Some(last) => match journal.last_seq() {
            Ok(end) => end.unwrap_or(0).saturating_sub(last as u64) + 1,
            Err(error) => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("journal: {error}\n"),
                )
                    .into_response();
            }
        },
        None => query.since.unwrap_or(1),
    };
    let limit = query.limit.or(query.last).unwrap_or(500);
    let mut out = Vec::new();
    for envelope in journal.read_from(since).take(limit) {
        match envelope {
            Ok(e) => out.push(JournalEntry {
                seq: e.seq,
                recorded_at_ms: e.recorded_at_ms,
                entity: e.entity.to_string(),
                event_type: e.event_type,
                event: e.event,
            }),
            Err(error) => {
                return (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("journal: {error}\n"),
                )
                    .into_response();
            }
        }
    }
    Json(out).into_response()
}

async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.system.context().metrics.encode(),
    )
        .into_response()
}

async fn readyz(State(state): State<AppState>) -> Response {
    match state.system.scheduler().status(CALL_TIMEOUT).await {
        Ok(_) => "ok\n".into_response(),
        Err(error) => unavailable("the scheduler", error),
    }
}

#[derive(Debug, Deserialize)]
struct ExplainQuery {
    /// `json` (the default) or `text`.
    #[serde(default)]
    format: ExplainFormat,
}

#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum ExplainFormat {
    #[default]
    Json,
    Text,
}

#[derive(Debug, Serialize)]
struct ExplainAnswer {
    nodeclaim: String,
    /// `karpenter journal explain`'s lines.
    lines: Vec<String>,
    /// Its own journal events, oldest first.
    events: Vec<JournalEntry>,
}

/// Why a NodeClaim exists and how it went (`karpenter journal explain nodeclaim/NAME` on the
/// live journal), as JSON or, with `?format=text`, as the same readable text.
async fn explain_nodeclaim(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<ExplainQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(query)) = query else {
        return (
            StatusCode::BAD_REQUEST,
            "format: give format=json (the default) or format=text\n",
        )
            .into_response();
    };
    let journal = state.system.context().journal.clone();
    let lookup = name.clone();
    let found =
        tokio::task::spawn_blocking(move || crate::explain::nodeclaim(&journal, &lookup)).await;
    let explanation = match found {
        Ok(Ok(explanation)) => explanation,
        Ok(Err(error)) => {
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("journal: {error:#}\n"),
            )
                .into_response();
        }
        Err(error) => return unavailable("the explanation", error),
    };
    let crate::explain::Explanation::Found { text, events } = explanation else {
        return (
            StatusCode::NOT_FOUND,
            format!("the journal holds no event of NodeClaim {name:?} (never planned, or its history was trimmed)\n"),
        )
            .into_response();
    };
    if query.format == ExplainFormat::Text {
        return ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response();
    }
    Json(ExplainAnswer {
        nodeclaim: name,
        lines: text.lines().map(str::to_owned).collect(),
        events: events
            .into_iter()
            .map(|e| JournalEntry {
                seq: e.seq,
                recorded_at_ms: e.recorded_at_ms,
                entity: e.entity.to_string(),
                event_type: e.event_type,
                event: e.event,
            })
            .collect(),
    })
    .into_response()
}

/// What a round's new capacity cost against the lower bound, solved again from its recorded
/// input.
async fn round_cost(State(state): State<AppState>, Path(round): Path<String>) -> Response {
    let Ok(round) = round.parse::<u64>() else {
        return (
            StatusCode::BAD_REQUEST,
            format!("round: {round:?} is not a round number, e.g. /rounds/12/cost\n"),
        )
            .into_response();
    };
    let journal = state.system.context().journal.clone();
    match tokio::task::spawn_blocking(move || crate::explain::round_cost(&journal, round)).await {
        Ok(Ok(Ok(cost))) => Json(RoundCostAnswer {
            ratio: cost.ratio(),
            cost,
        })
        .into_response(),
        Ok(Ok(Err(missing))) => (
            StatusCode::NOT_FOUND,
            Json(serde_json::json!({ "round": round, "missing": missing })),
        )
            .into_response(),
        Ok(Err(error)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("round {round}: {error:#}\n"),
        )
            .into_response(),
        Err(error) => unavailable("the round cost", error),
    }
}

#[derive(Debug, Serialize)]
struct RoundCostAnswer {
    #[serde(flatten)]
    cost: crate::explain::RoundCost,
    /// `cost / bound`; `null` when the bound is zero.
    ratio: Option<f64>,
}

#[cfg(test)]
mod tests {
    use super::presented_token;

    #[test]
    fn a_token_is_presented_as_bearer_or_as_the_basic_password() {
        assert_eq!(presented_token("Bearer s3cret").as_deref(), Some("s3cret"));
        // base64("admin:s3cret")
        assert_eq!(
            presented_token("Basic YWRtaW46czNjcmV0").as_deref(),
            Some("s3cret")
        );
        // base64(":s3cret:x"): the password runs to the end, colons included.
        assert_eq!(
            presented_token("Basic OnMzY3JldDp4").as_deref(),
            Some("s3cret:x")
        );
        assert_eq!(presented_token("Basic !!!"), None);
        // base64("no-colon")
        assert_eq!(presented_token("Basic bm8tY29sb24="), None);
        assert_eq!(presented_token("Digest x"), None);
    }
}
