//! API server faults: the controller (on the in-memory cloud, with its simulated kubelets,
//! on a client built as `karpenter controller` builds it: throttled, retrying) runs the same
//! steps twice against the test API server, once clean and once with faults injected into
//! every request at `KARPENTER_CHAOS_WATCH_FAULT_RATE` (0.1 here; seeded by
//! `KARPENTER_CHAOS_SEED`): watches dropped mid-stream or turned away, `410 Gone` for watches
//! resuming from a version, answers up to 1.5 s late, `409 Conflict` on replaces and patches,
//! `429` and `503` with `Retry-After`, `500`, lists reset halfway; and, between the first two
//! steps, the server restarted (down 2 s). Steps: six pending pods; the NodeClaim running the
//! most of them deleted (a drain under a PodDisruptionBudget); ten pods. Both runs must settle
//! to the same end state (every pod bound to a Ready node, one Node per NodeClaim, every
//! NodeClaim Ready), neither may plan a pod twice (the pods the NodeClaims were planned for
//! add up to at most the pods created), and the client's metrics must show the retries after
//! `Retry-After` and the watches started again. It prints one figure line.

use std::collections::BTreeMap;
use std::sync::Arc;

use karpenter_actors::metrics::client as client_metrics;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{DeleteParams, ListParams};

use super::standins::{busiest_claim, pending, schedule_and_replicate, web_budget};
use super::{Harness, condition};

/// How long each step has to settle.
const SETTLE: Duration = Duration::from_secs(120);

/// Where a run stands: live pods, pods not on a Ready node, NodeClaims not Ready or being
/// deleted, Nodes without a NodeClaim or NodeClaims without a Node.
#[derive(Debug, Default, Clone, PartialEq)]
struct End {
    pods: usize,
    pending: usize,
    not_ready: usize,
    unmatched: usize,
}

impl End {
    fn settled(&self, wanted: usize) -> bool {
        *self
            == End {
                pods: wanted,
                ..End::default()
            }
    }
}

/// The NodeClaims seen so far and the pods each was planned for.
type Planned = BTreeMap<String, i64>;

async fn end(h: &Harness, planned: &mut Planned) -> Option<End> {
    let claims = h.nodeclaims().list(&Default::default()).await.ok()?.items;
    let nodes = h.nodes().list(&Default::default()).await.ok()?.items;
    let pods = h
        .pods()
        .list(&ListParams::default().labels("app=web"))
        .await
        .ok()?
        .items;
    for claim in &claims {
        let pods = claim
            .spec
            .resources
            .as_ref()
            .and_then(|r| r.requests.get("pods"))
            .and_then(|q| q.0.parse().ok())
            .unwrap_or(0);
        planned.insert(claim.metadata.name.clone().unwrap_or_default(), pods);
    }
    Some(End {
        pods: pods.len(),
        pending: pending(&nodes, &pods),
        unmatched: nodes.len().abs_diff(claims.len()),
        not_ready: claims
            .iter()
            .filter(|c| {
                c.metadata.deletion_timestamp.is_some()
                    || condition(c, "Ready").as_deref() != Some("True")
            })
            .count(),
    })
}

/// Waits until the cluster settles with `wanted` pods; how long it took, or where it stood.
async fn settle(h: &Harness, wanted: usize, planned: &mut Planned) -> Result<Duration, End> {
    let started = Instant::now();
    let mut last = End::default();
    while started.elapsed() < SETTLE {
        if let Some(now) = end(h, planned).await {
            if now.settled(wanted) {
                return Ok(started.elapsed());
            }
            last = now;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(last)
}

/// What a run did.
struct Run {
    end: End,
    /// How long each step took to settle.
    times: Vec<Duration>,
    injected: BTreeMap<&'static str, usize>,
    /// NodeClaims created, and the pods they were planned for.
    nodeclaims: usize,
    planned: i64,
    /// Pods created.
    created: usize,
}

/// One run of the steps; faults as (rate, seed).
async fn run(scope: &str, faults: Option<(f64, u64)>) -> Run {
    let mut h = Harness::start_without_controller().await;
    web_budget(&h.client, 2).await;
    // From before the controller starts, so its first lists and watches meet them too.
    if let Some((rate, seed)) = faults {
        h.server.inject_faults(rate, seed);
    }
    h.run_on_own_client(scope).await;
    let wanted = Arc::new(AtomicUsize::new(6));
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let player = {
        let (wanted, stop, client) = (wanted.clone(), stop.clone(), h.client.clone());
        let created = created.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                schedule_and_replicate(&client, wanted.load(Ordering::SeqCst), &created).await;
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        })
    };
    let mut times = Vec::new();
    let mut step = |result: Result<Duration, End>, what: &str| match result {
        Ok(took) => times.push(took),
        Err(at) => panic!("{scope}: {what} did not settle in {SETTLE:?}: {at:?}"),
    };
    let mut planned = Planned::new();
    step(settle(&h, 6, &mut planned).await, "six pods");
    if faults.is_some() {
        h.server
            .restart(Duration::from_secs(2))
            .await
            .expect("the API server restarts on its port");
    }
    let claim = busiest_claim(&h.client)
        .await
        .expect("a NodeClaim running pods");
    // A delete answered late (or not at all, by a dropped connection) is sent again.
    for _ in 0..10 {
        if h.nodeclaims()
            .delete(&claim, &DeleteParams::default())
            .await
            .is_ok()
        {
            break;
        }
    }
    step(settle(&h, 6, &mut planned).await, "the drain");
    wanted.store(10, Ordering::SeqCst);
    step(settle(&h, 10, &mut planned).await, "ten pods");
    let injected = h.server.faults_injected();
    h.server.inject_faults(0.0, 0);
    stop.store(true, Ordering::SeqCst);
    let _ = player.await;
    let end = end(&h, &mut planned).await.expect("the end state");
    h.stop().await;
    Run {
        end,
        times,
        injected,
        nodeclaims: planned.len(),
        planned: planned.values().sum(),
        created: created.load(Ordering::SeqCst),
    }
}

pub(super) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_write_faults_leave_the_same_end_state() {
    let rate: f64 = env_or("KARPENTER_CHAOS_WATCH_FAULT_RATE", 0.1);
    let seed: u64 = env_or("KARPENTER_CHAOS_SEED", 1);
    let clean = run("kube-watch-clean", None).await;
    let metrics = client_metrics();
    let before = (
        metrics.retries_after(429) + metrics.retries_after(503),
        metrics.watch_restarts("gone") + metrics.watch_restarts("error"),
    );
    let faulted = run("kube-watch-faults", Some((rate, seed))).await;
    let retried = metrics.retries_after(429) + metrics.retries_after(503) - before.0;
    let restarted = metrics.watch_restarts("gone") + metrics.watch_restarts("error") - before.1;
    let total: usize = faulted.injected.values().sum();
    let kinds = faulted
        .injected
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ");
    let seconds = |t: &[Duration]| {
        t.iter()
            .map(|d| format!("{:.1}", d.as_secs_f64()))
            .collect::<Vec<_>>()
            .join("/")
    };
    let twice = |r: &Run| (r.planned - r.created as i64).max(0);
    println!(
        "watch faults at {:.0} % (seed {seed}): {total} faults ({kinds}) and a restart; the client retried {retried} requests after Retry-After and started watches again {restarted} times; without faults {} pods bound, {} pending, {} NodeClaims created for {} planned pods of {} created; with faults {} pods bound, {} pending, {} NodeClaims not Ready or without a Node, {} NodeClaims created for {} planned pods of {} created ({} planned twice); steps settled in {} s without, {} s with",
        rate * 100.0,
        clean.end.pods - clean.end.pending,
        clean.end.pending,
        clean.nodeclaims,
        clean.planned,
        clean.created,
        faulted.end.pods - faulted.end.pending,
        faulted.end.pending,
        faulted.end.not_ready + faulted.end.unmatched,
        faulted.nodeclaims,
        faulted.planned,
        faulted.created,
        twice(&faulted),
        seconds(&clean.times),
        seconds(&faulted.times),
    );
    assert!(total > 0, "no fault was injected");
    assert!(retried > 0, "no retry after 429 or 503 counted");
    assert!(restarted > 0, "no watch restart counted");
    assert_eq!(faulted.end, clean.end, "the end states differ");
    assert_eq!(twice(&clean), 0, "pods planned twice without faults");
    assert_eq!(twice(&faulted), 0, "pods planned twice with faults");
}
