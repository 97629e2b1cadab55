//! The watches: one kube-runtime reflector per kind the controller reads, sharing nothing but
//! the client. Pods, Nodes and NodeClaims also go through the [`Tracker`], which turns their
//! changes into [`Signal`]s for the actors; the other kinds only fill caches. Watchers
//! restart by themselves (with backoff) after `410 Gone` or a dropped connection, relisting
//! from scratch; the tracker makes the relist report only what changed.

use std::fmt::Debug;
use std::hash::Hash;
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod as KubePod,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::storage::v1::{CSINode, StorageClass, VolumeAttachment};
use karpenter_core::api::{EC2NodeClass, NodeClaim, NodeOverlay, NodePool};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::cluster::Caches;
use super::tracker::{Signal, Tracker};

/// The running watches.
pub struct Watches {
    /// What they cache.
    pub caches: Caches,
    /// What the tracker makes of pod, node and NodeClaim changes, in order.
    pub signals: mpsc::UnboundedReceiver<Signal>,
    resync: mpsc::UnboundedSender<()>,
    tasks: Vec<JoinHandle<()>>,
}

impl Watches {
    /// Forgets what was reported and reports the caches' whole current state again, e.g.
    /// when this replica becomes the leader and its actors start from nothing.
    pub fn resync(&self) {
        let _ = self.resync.send(());
    }
}

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// A reflector for `K` whose events, after they reach the cache, go to `on_event`.
fn reflect<K>(
    api: Api<K>,
    kind: &'static str,
) -> (
    Store<K>,
    impl Stream<Item = watcher::Event<K>> + Send + 'static,
)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default()).default_backoff(),
    )
    .filter_map(move |event| async move {
        match event {
            Ok(event) => Some(event),
            Err(error) => {
                // The watcher backs off and starts again by itself (relisting after `410
                // Gone`); say why it had to.
                let gone =
                    matches!(&error, watcher::Error::WatchError(status) if status.code == 410);
                karpenter_actors::metrics::client()
                    .watch_restart(kind, if gone { "gone" } else { "error" });
                warn!(kind, %error, "Watch failed; restarting it.");
                None
            }
        }
    });
    (reader, stream)
}

fn cache_only<K>(api: Api<K>, kind: &'static str, tasks: &mut Vec<JoinHandle<()>>) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (store, stream) = reflect(api, kind);
    tasks.push(tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while stream.next().await.is_some() {}
    }));
    store
}

enum Change {
    Pod(Box<watcher::Event<KubePod>>),
    Node(Box<watcher::Event<Node>>),
    NodeClaim(Box<watcher::Event<NodeClaim>>),
    NodePool,
}

/// Starts every watch (NodeOverlays' only when `overlays`: the `NodeOverlay` gate).
pub fn start(client: &Client, overlays: bool) -> Watches {
    let mut tasks = Vec::new();
    let (pods, pod_events) = reflect(Api::<KubePod>::all(client.clone()), "Pod");
    let (nodes, node_events) = reflect(Api::<Node>::all(client.clone()), "Node");
    let (nodeclaims, claim_events) = reflect(Api::<NodeClaim>::all(client.clone()), "NodeClaim");
    let (nodepools, pool_events) = reflect(Api::<NodePool>::all(client.clone()), "NodePool");
    let caches = Caches {
        pods,
        nodes,
        nodeclaims,
        namespaces: cache_only(
            Api::<Namespace>::all(client.clone()),
            "Namespace",
            &mut tasks,
        ),
        daemonsets: cache_only(
            Api::<DaemonSet>::all(client.clone()),
            "DaemonSet",
            &mut tasks,
        ),
        pdbs: cache_only(
            Api::<PodDisruptionBudget>::all(client.clone()),
            "PodDisruptionBudget",
            &mut tasks,
        ),
        pvcs: cache_only(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            "PersistentVolumeClaim",
            &mut tasks,
        ),
        pvs: cache_only(
            Api::<PersistentVolume>::all(client.clone()),
            "PersistentVolume",
            &mut tasks,
        ),
        storage_classes: cache_only(
            Api::<StorageClass>::all(client.clone()),
            "StorageClass",
            &mut tasks,
        ),
        csinodes: cache_only(Api::<CSINode>::all(client.clone()), "CSINode", &mut tasks),
        volume_attachments: cache_only(
            Api::<VolumeAttachment>::all(client.clone()),
            "VolumeAttachment",
            &mut tasks,
        ),
        nodepools,
        nodeclasses: cache_only(
            Api::<EC2NodeClass>::all(client.clone()),
            "EC2NodeClass",
            &mut tasks,
        ),
        overlays: overlays.then(|| {
            cache_only(
                Api::<NodeOverlay>::all(client.clone()),
                "NodeOverlay",
                &mut tasks,
            )
        }),
    };
    let (tx, signals) = mpsc::unbounded_channel();
    let changes = futures_util::stream::select(
        futures_util::stream::select(
            pod_events.map(|e| Change::Pod(Box::new(e))),
            node_events.map(|e| Change::Node(Box::new(e))),
        ),
        futures_util::stream::select(
            claim_events.map(|e| Change::NodeClaim(Box::new(e))),
            pool_events.map(|_| Change::NodePool),
        ),
    );
    let lookups = caches.clone();
    let (resync, mut resyncs) = mpsc::unbounded_channel::<()>();
    tasks.push(tokio::spawn(async move {
        let mut changes = std::pin::pin!(changes);
        let mut tracker = Tracker::default();
        loop {
            let signals = tokio::select! {
                change = changes.next() => match change {
                    Some(change) => translate(&mut tracker, &lookups, change),
                    None => return,
                },
                Some(()) = resyncs.recv() => {
                    tracker = Tracker::default();
                    replay(&mut tracker, &lookups)
                }
            };
            for signal in signals {
                if tx.send(signal).is_err() {
                    return;
                }
            }
        }
    }));
    Watches {
        caches,
        signals,
        resync,
        tasks,
    }
}

/// What a fresh tracker makes of everything the caches hold.
fn replay(tracker: &mut Tracker, caches: &Caches) -> Vec<Signal> {
    let mut out = Vec::new();
    for pod in caches.pods.state() {
        out.extend(tracker.pod_applied(&pod));
    }
    for node in caches.nodes.state() {
        out.extend(tracker.node_applied(
            &node,
            |name| caches.nodeclaim(name),
            |pid| caches.nodeclaim_by_provider_id(pid),
        ));
    }
    for claim in caches.nodeclaims.state() {
        out.extend(tracker.nodeclaim_applied(&claim, |n| caches.node(n)));
    }
    out
}

fn translate(tracker: &mut Tracker, caches: &Caches, change: Change) -> Vec<Signal> {
    use watcher::Event;
    let claim = |name: &str| caches.nodeclaim(name);
    let by_pid = |pid: &str| caches.nodeclaim_by_provider_id(pid);
    match change {
        Change::Pod(e) => match *e {
            Event::Init => {
                tracker.pods_relisting();
                Vec::new()
            }
            Event::InitDone => tracker.pods_relisted(),
            Event::Apply(p) | Event::InitApply(p) => tracker.pod_applied(&p),
            Event::Delete(p) => tracker.pod_deleted(&p),
        },
        Change::Node(e) => match *e {
            Event::Init => {
                tracker.nodes_relisting();
                Vec::new()
            }
            Event::InitDone => tracker.nodes_relisted(),
            Event::Apply(n) | Event::InitApply(n) => tracker.node_applied(&n, claim, by_pid),
            Event::Delete(n) => tracker.node_deleted(&n),
        },
        Change::NodeClaim(e) => match *e {
            Event::Apply(c) | Event::InitApply(c) => {
                tracker.nodeclaim_applied(&c, |n| caches.node(n))
            }
            Event::Delete(c) => {
                tracker.nodeclaim_deleted(&c);
                Vec::new()
            }
            Event::Init | Event::InitDone => Vec::new(),
        },
        Change::NodePool => vec![Signal::NodePoolsChanged],
    }
}

/// Caches that had not listed once when the wait for them ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the watches of {} did not sync within {waited:?}", kinds.join(", "))]
pub struct NotSynced {
    /// The kinds still missing.
    pub kinds: Vec<&'static str>,
    /// How long it waited.
    pub waited: Duration,
}

/// Waits until every cache has listed once, so no decision is taken on a partial view;
/// `Err` names the kinds still missing after `timeout`.
pub async fn wait_synced(caches: &Caches, timeout: Duration) -> Result<(), NotSynced> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut missing = Vec::new();
    macro_rules! wait_for {
        ($($kind:literal => $store:expr),* $(,)?) => {$(
            if !matches!(
                tokio::time::timeout_at(deadline, $store.wait_until_ready()).await,
                Ok(Ok(()))
            ) {
                missing.push($kind);
            }
        )*};
    }
    wait_for! {
        "Pod" => caches.pods,
        "Node" => caches.nodes,
        "Namespace" => caches.namespaces,
        "DaemonSet" => caches.daemonsets,
        "PodDisruptionBudget" => caches.pdbs,
        "PersistentVolumeClaim" => caches.pvcs,
        "PersistentVolume" => caches.pvs,
        "StorageClass" => caches.storage_classes,
        "CSINode" => caches.csinodes,
        "VolumeAttachment" => caches.volume_attachments,
        "NodePool" => caches.nodepools,
        "NodeClaim" => caches.nodeclaims,
        "EC2NodeClass" => caches.nodeclasses,
    }
    if let Some(overlays) = &caches.overlays {
        wait_for! { "NodeOverlay" => overlays }
    }
    if missing.is_empty() {
        info!("Caches synced.");
        Ok(())
    } else {
        Err(NotSynced {
            kinds: missing,
            waited: timeout,
        })
    }
}
