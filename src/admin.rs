//! The admin HTTP endpoint: live actor state as JSON, the journal, health and Prometheus
//! metrics. It runs on its own thread and runtime (real time), asking the actors through their
//! handles, so it answers while a simulation runs on its virtual clock.
//!
//! Bound to loopback by default; binding any other address needs a bearer token.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use axum::extract::{Path, RawQuery, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::get;
use karpenter_actors::actor::messages::NodeClaimStatus;
use karpenter_actors::handles::System;
use karpenter_core::events::DomainEvent;
use karpenter_core::vocab::query::JournalQuery;
use serde::Serialize;
use subtle::ConstantTimeEq;
use tokio::sync::oneshot;

/// Where and how to serve.
#[derive(Debug, Clone)]
pub struct AdminOptions {
    /// Listen address.
    pub addr: SocketAddr,
    /// Required as `Authorization: Bearer …` when set (mandatory off loopback).
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

/// Starts serving. Fails at once when the address cannot be bound or needs a token.
pub fn start(options: AdminOptions, system: System) -> anyhow::Result<AdminServer> {
    if !options.addr.ip().is_loopback() && options.token.is_none() {
        bail!(
            "--admin {}: serving beyond loopback needs a bearer token (--admin-token or ADMIN_TOKEN)",
            options.addr
        );
    }
    let listener = std::net::TcpListener::bind(options.addr)
        .with_context(|| format!("cannot bind the admin endpoint to {}", options.addr))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let state = AppState {
        system,
        token: options.token.map(Arc::from),
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
        .route("/actors", get(list_actors))
        .route("/nodepools", get(nodepools))
        .route("/nodeclaims", get(nodeclaims))
        .route("/nodeclaims/{name}", get(nodeclaim))
        .route("/scheduler", get(scheduler))
        .route("/disruption", get(disruption))
        .route("/journal", get(journal))
        .route("/keeper", get(keeper))
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
            .and_then(|v| v.strip_prefix("Bearer "));
        // Compared in constant time: how long a refusal takes tells nothing of the token.
        let matches = presented.is_some_and(|p| bool::from(p.as_bytes().ct_eq(token.as_bytes())));
        if !matches {
            return (StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n").into_response();
        }
    }
    next.run(request).await
}

async fn list_actors(State(state): State<AppState>) -> Json<Vec<String>> {
    Json(state.system.actor_names())
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
    let limit = query.limit.unwrap_or(500);
    let mut out = Vec::new();
    for envelope in state
        .system
        .context()
        .journal
        .read_from(query.since.unwrap_or(1))
        .take(limit)
    {
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
