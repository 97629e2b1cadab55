//! The endpoints a Deployment needs, without authentication, as upstream serves them:
//! `/healthz` (the process answers), `/readyz` (the caches have synced, on leader and
//! followers alike, so a follower is ready to take over) and `/metrics` (Prometheus text).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use karpenter_actors::metrics::Metrics;
use tokio::sync::watch;

#[derive(Clone)]
struct ProbeState {
    synced: watch::Receiver<bool>,
    leading: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
}

/// A running probe server; aborted when dropped.
pub struct ProbeServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl ProbeServer {
    /// The address bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for ProbeServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Serves the probes and metrics on `addr`.
pub async fn start(
    addr: SocketAddr,
    synced: watch::Receiver<bool>,
    leading: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
) -> anyhow::Result<ProbeServer> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot bind the probe and metrics endpoint to {addr}"))?;
    let addr = listener.local_addr()?;
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .with_state(ProbeState {
            synced,
            leading,
            metrics,
        });
    let task = tokio::spawn(async move {
        if let Err(error) = axum::serve(listener, app).await {
            tracing::error!(%error, "Probe endpoint stopped.");
        }
    });
    tracing::info!(%addr, "Probes and metrics listening.");
    Ok(ProbeServer { addr, task })
}

async fn readyz(State(state): State<ProbeState>) -> Response {
    if !*state.synced.borrow() {
        return (StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet\n").into_response();
    }
    let role = if *state.leading.borrow() {
        "leader"
    } else {
        "follower"
    };
    format!("ok ({role})\n").into_response()
}

async fn metrics_text(State(state): State<ProbeState>) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
        .into_response()
}
