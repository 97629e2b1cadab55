//! The actors on tokio's paused clock, against fakes of the two ports that record calls and
//! take injected failures: batching windows, launch failures and the registration deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_actors::actor::messages::{Actors, SchedulerMsg, SchedulerStatus, SupervisorMsg};
use karpenter_actors::actor::supervisor::{SupervisorActor, SupervisorArgs};
use karpenter_actors::actor::{Context, Settings};
use karpenter_core::api::{NodeClaim, NodePool};
use karpenter_core::events::{ClusterView, DomainEvent};
use karpenter_core::model::instance_type::{CapacityType, Offering, overhead};
use karpenter_core::model::{InstanceType, KubeletSettings, Pod, ResourceName, Resources};
use karpenter_core::ports::*;
use karpenter_journal::{Journal, Until};
use ractor::Actor;

#[path = "actors/keeper.rs"]
mod keeper;
#[path = "actors/shipper.rs"]
mod shipper;

#[path = "actors/blocks.rs"]
mod blocks;

#[derive(Default)]
struct FakeCloud {
    creates: Mutex<Vec<String>>,
    deletes: Mutex<Vec<String>>,
    unavailable: Mutex<Vec<OfferingKey>>,
    fail_with_ice: std::sync::atomic::AtomicBool,
    /// The node class is missing or not Ready: instance types are refused.
    class_not_ready: std::sync::atomic::AtomicBool,
    next: AtomicU64,
    launched: Mutex<BTreeMap<String, Instance>>,
    failing_gets: AtomicU64,
    /// Lookups answered without the instance's NodeClaim tag (tags not visible yet).
    untagged_gets: AtomicU64,
    /// Instances in an expiring Capacity Block, and how often they were asked for.
    expiring: Mutex<Vec<String>>,
    expiring_asked: AtomicU64,
}

fn instance_type() -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(4000, 16 << 30)
        .with(ResourceName::Pods, 58)
        .with(ResourceName::EphemeralStorage, 20 << 30);
    let offerings = vec![Offering::new("a", CapacityType::Spot, 0.05, true)];
    Arc::new(InstanceType::new(
        "m.xlarge",
        BTreeMap::new(),
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        offerings,
    ))
}

impl CloudProvider for FakeCloud {
    fn now_ms(&self) -> i64 {
        0
    }
    fn create<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            self.creates.lock().unwrap().push(request.nodeclaim.clone());
            if self.fail_with_ice.load(Ordering::SeqCst) {
                return Err(CloudError::InsufficientCapacity {
                    offerings: vec![OfferingKey {
                        instance_type: "m.xlarge".into(),
                        zone: "a".into(),
                        capacity_type: CapacityType::Spot,
                    }],
                });
            }
            let id = format!("i-{}", self.next.fetch_add(1, Ordering::SeqCst));
            let instance = Instance {
                provider_id: format!("fake:///a/{id}"),
                id,
                instance_type: "m.xlarge".into(),
                zone: "a".into(),
                capacity_type: CapacityType::Spot,
                price: 0.05,
                image_id: "ami".into(),
                nodeclaim: request.nodeclaim.clone(),
                nodepool: request.nodepool.clone(),
                state: InstanceState::Running,
                launched_at_ms: None,
                price_source: None,
                reservation: None,
            };
            self.launched
                .lock()
                .unwrap()
                .insert(instance.id.clone(), instance.clone());
            Ok(instance)
        })
    }
    fn delete<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            self.deletes.lock().unwrap().push(instance_id.to_owned());
            Ok(())
        })
    }
    fn get<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            if self
                .failing_gets
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(CloudError::Other("throttled".into()));
            }
            let mut instance = self
                .launched
                .lock()
                .unwrap()
                .get(instance_id)
                .cloned()
                .ok_or_else(|| CloudError::NotFound {
                    id: instance_id.to_owned(),
                })?;
            if self
                .untagged_gets
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                instance.nodeclaim.clear();
            }
            Ok(instance)
        })
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }
    fn instance_types<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>> {
        Box::pin(async move {
            if self.class_not_ready.load(Ordering::SeqCst) {
                return Err(CloudError::NodeClassNotReady {
                    name: "default".into(),
                    reason: "EC2NodeClass \"default\" does not exist".into(),
                });
            }
            Ok(vec![instance_type()])
        })
    }
    fn provider_name(&self) -> &'static str {
        "fake"
    }
    fn mark_unavailable(&self, offering: &OfferingKey) {
        self.unavailable.lock().unwrap().push(offering.clone());
    }
    fn node_class_hash(&self, _: &str) -> Option<NodeClassHash> {
        None
    }
    fn drift<'a>(&'a self, _: &'a DriftCheck) -> BoxFuture<'a, Result<Option<Drift>, CloudError>> {
        Box::pin(async { Ok(None) })
    }
    fn expiring_block_instances(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, CloudError>> {
        Box::pin(async move {
            self.expiring_asked.fetch_add(1, Ordering::SeqCst);
            Ok(Some(self.expiring.lock().unwrap().clone()))
        })
    }
}

/// A cluster with the nodes a test gives it that records the Events it is asked to emit and the NodeClaim
/// objects written and released.
#[derive(Default)]
struct FakeCluster {
    nodes: Mutex<Vec<NodeInfo>>,
    /// Pods on nodes, by UID, for drains.
    on_nodes: Mutex<BTreeMap<String, String>>,
    /// Cordons and evictions, in order (`cordon NODE`, `evict UID`).
    calls: Mutex<Vec<String>>,
    /// How many cordons fail before they succeed.
    failing_cordons: AtomicU64,
    events: Mutex<Vec<(String, String)>>,
    nodeclaims: Mutex<BTreeMap<String, NodeClaim>>,
    released: Mutex<Vec<String>>,
}

impl Cluster for FakeCluster {
    fn nodes(&self) -> BoxFuture<'_, Vec<NodeInfo>> {
        Box::pin(async move { self.nodes.lock().unwrap().clone() })
    }
    fn pods_to_drain<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Vec<PodToDrain>> {
        Box::pin(async move {
            self.on_nodes
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, n)| *n == node)
                .map(|(uid, _)| PodToDrain {
                    uid: uid.clone(),
                    namespace: "default".into(),
                    name: uid.clone(),
                    wait: false,
                })
                .collect()
        })
    }
    fn daemonsets(&self) -> BoxFuture<'_, Vec<Pod>> {
        Box::pin(async move { Vec::new() })
    }
    fn namespace_labels(&self) -> BoxFuture<'_, BTreeMap<String, BTreeMap<String, String>>> {
        Box::pin(async move { BTreeMap::new() })
    }
    fn sync_node<'a>(
        &'a self,
        _: &'a str,
        _: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move { Ok(()) })
    }
    fn put_nodeclaim<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let name = claim.metadata.name.clone().unwrap();
            self.nodeclaims.lock().unwrap().insert(name, claim.clone());
            Ok(())
        })
    }
    fn release_nodeclaim<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            self.nodeclaims.lock().unwrap().remove(name);
            self.released.lock().unwrap().push(name.to_owned());
            Ok(())
        })
    }
    fn taint_disrupted<'a>(
        &'a self,
        node: &'a str,
        disrupted: bool,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            self.calls
                .lock()
                .unwrap()
                .push(format!("taint_disrupted {node} {disrupted}"));
            Ok(())
        })
    }

    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(format!("cordon {node}"));
            if self
                .failing_cordons
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                return Err(ClusterError::Other {
                    object: format!("Node/{node}"),
                    message: "the API server is unreachable".into(),
                });
            }
            Ok(())
        })
    }
    fn evict<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            self.calls.lock().unwrap().push(format!("evict {uid}"));
            self.on_nodes.lock().unwrap().remove(uid);
            Ok(())
        })
    }
    fn volumes_attached<'a>(&'a self, _: &'a str) -> BoxFuture<'a, usize> {
        Box::pin(async move { 0 })
    }
    fn delete_node<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move { Ok(()) })
    }
    fn emit_event(&self, object: &EventObject, reason: &str, _: &str) {
        self.events
            .lock()
            .unwrap()
            .push((object.to_string(), reason.to_owned()));
    }
    fn disruption_view(&self) -> BoxFuture<'_, DisruptionView> {
        Box::pin(async move {
            let pods = self
                .on_nodes
                .lock()
                .unwrap()
                .iter()
                .map(|(uid, node)| BoundPod {
                    node: node.clone(),
                    pod: Pod::simple(uid, 100, 1 << 20),
                    reschedulable: true,
                    do_not_disrupt: None,
                    created_ms: None,
                    pdbs: Vec::new(),
                })
                .collect();
            DisruptionView {
                pods,
                ..Default::default()
            }
        })
    }
}

struct System {
    _dir: tempfile::TempDir,
    journal: Arc<Journal<DomainEvent>>,
    cloud: Arc<FakeCloud>,
    cluster: Arc<FakeCluster>,
    actors: Actors,
    supervisor: ractor::ActorRef<SupervisorMsg>,
    metrics: Arc<karpenter_actors::metrics::Metrics>,
    ctx: Context,
}

impl System {
    fn actors_context(&self) -> Context {
        self.ctx.clone()
    }
}

fn nodepool() -> NodePool {
    serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap()
}

async fn start(scope: &str) -> System {
    start_with_queue(scope, |_| None).await
}

async fn start_with_queue(
    scope: &str,
    queue: impl FnOnce(Arc<Journal<DomainEvent>>) -> Option<Arc<dyn InterruptionQueue>>,
) -> System {
    start_with(scope, queue, vec![nodepool()]).await
}

async fn start_with(
    scope: &str,
    queue: impl FnOnce(Arc<Journal<DomainEvent>>) -> Option<Arc<dyn InterruptionQueue>>,
    nodepools: Vec<NodePool>,
) -> System {
    start_with_settings(scope, queue, nodepools, Settings::default(), None).await
}

async fn start_with_settings(
    scope: &str,
    queue: impl FnOnce(Arc<Journal<DomainEvent>>) -> Option<Arc<dyn InterruptionQueue>>,
    nodepools: Vec<NodePool>,
    settings: Settings,
    clock: Option<Arc<dyn karpenter_journal::Clock>>,
) -> System {
    start_shipping(scope, queue, nodepools, (settings, clock), None).await
}

/// [`start_with_settings`], the journal shipped when `shipping` says where.
async fn start_shipping(
    scope: &str,
    queue: impl FnOnce(Arc<Journal<DomainEvent>>) -> Option<Arc<dyn InterruptionQueue>>,
    nodepools: Vec<NodePool>,
    (settings, clock): (Settings, Option<Arc<dyn karpenter_journal::Clock>>),
    shipping: Option<Arc<karpenter_actors::actor::shipper::Shipping>>,
) -> System {
    let dir = tempfile::tempdir().unwrap();
    // On tokio's clock, as the simulator's journal is: the actors' windows and timeouts
    // count journal time.
    let clock = clock.unwrap_or_else(|| Arc::new(keeper::PausedClock(tokio::time::Instant::now())));
    let journal = Arc::new(Journal::open_with_clock(dir.path(), clock).unwrap());
    let cloud = Arc::new(FakeCloud::default());
    let cluster = Arc::new(FakeCluster::default());
    let metrics = Arc::new(karpenter_actors::metrics::Metrics::new());
    let ctx = Context {
        journal: journal.clone(),
        cloud: cloud.clone(),
        cluster: cluster.clone(),
        settings,
        metrics: metrics.clone(),
        scope: scope.into(),
        overlays: Default::default(),
        pools: Default::default(),
        shipping,
    };
    let (supervisor, _) = Actor::spawn(
        Some(format!("{scope}/supervisor")),
        SupervisorActor,
        SupervisorArgs {
            interruption_queue: queue(journal.clone()),
            gc: None,
            disruption: None,
            ctx: ctx.clone(),
            nodepools,
            last_round: 0,
            catalogs: Default::default(),
        },
    )
    .await
    .unwrap();
    let actors = ractor::call_t!(supervisor, SupervisorMsg::GetActors, 1000).unwrap();
    System {
        _dir: dir,
        journal,
        cloud,
        cluster,
        actors,
        supervisor,
        metrics,
        ctx,
    }
}

async fn status(system: &System) -> SchedulerStatus {
    ractor::call_t!(system.actors.scheduler, SchedulerMsg::GetStatus, 1000).unwrap()
}

fn pending(system: &System, uid: &str) {
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodPending(Box::new(Pod::simple(
            uid,
            500,
            1 << 30,
        ))))
        .unwrap();
}

/// Lets every actor run to quiescence at the current (paused) instant.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_batch_closes_after_one_idle_second() {
    let system = start("t-idle").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(600)).await;
    pending(&system, "p2");
    tokio::time::sleep(Duration::from_millis(900)).await;
    settle().await;
    assert_eq!(
        status(&system).await.rounds,
        0,
        "only 0.9 s since the last pod"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!(s.rounds, 1);
    assert_eq!(s.nominated, 2, "both pods went into one round");
    assert_eq!(
        system.cloud.creates.lock().unwrap().len(),
        1,
        "one NodeClaim for both"
    );
}

#[tokio::test(start_paused = true)]
async fn a_busy_batch_closes_after_ten_seconds() {
    let system = start("t-max").await;
    for i in 0..25 {
        pending(&system, &format!("p{i:02}"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        settle().await;
        let rounds = status(&system).await.rounds;
        let elapsed = (i + 1) * 500;
        assert_eq!(rounds, u64::from(elapsed >= 10_000), "after {elapsed} ms");
    }
}

#[tokio::test(start_paused = true)]
async fn capacity_errors_mark_offerings_and_return_pods_to_pending() {
    let system = start("t-ice").await;
    system.cloud.fail_with_ice.store(true, Ordering::SeqCst);
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!(s.rounds, 1);
    assert_eq!((s.pending, s.nominated), (1, 0), "the pod is pending again");
    assert_eq!(system.cloud.unavailable.lock().unwrap().len(), 1);
    // The NodeClaim object was written before the launch and let go after it failed.
    assert_eq!(system.cluster.released.lock().unwrap().len(), 1);
    assert!(system.cluster.nodeclaims.lock().unwrap().is_empty());
    assert!(
        system
            .cluster
            .events
            .lock()
            .unwrap()
            .iter()
            .any(|(_, reason)| reason == "InsufficientCapacityError")
    );
    // The returned pod opens a new window; with capacity back, the next round launches.
    system.cloud.fail_with_ice.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(status(&system).await.rounds, 2);
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_node_that_never_registers_is_terminated_after_fifteen_minutes() {
    let system = start("t-reg").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(status(&system).await.nominated, 1);
    {
        // Launched: the object carries the instance and a False root condition.
        let claims = system.cluster.nodeclaims.lock().unwrap();
        let claim = claims
            .values()
            .next()
            .expect("the NodeClaim object was written");
        let status = claim.status.as_ref().unwrap();
        assert!(status.provider_id.as_deref().unwrap().contains("i-0"));
        assert!(claim.condition_is_true("Launched"));
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "RegisteredNotTrue")
        );
        assert_eq!(
            claim.metadata.finalizers.as_deref().unwrap(),
            ["karpenter.sh/termination"]
        );
    }
    tokio::time::sleep(Duration::from_secs(14 * 60)).await;
    settle().await;
    assert!(system.cloud.deletes.lock().unwrap().is_empty(), "not yet");
    tokio::time::sleep(Duration::from_secs(61)).await;
    settle().await;
    assert_eq!(
        system.cloud.deletes.lock().unwrap().len(),
        1,
        "the instance was terminated"
    );
    // The pod went back to pending and a batch window later onto a new NodeClaim.
    let s = status(&system).await;
    assert_eq!((s.rounds, s.nominated), (2, 1));
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 2);
    let view = system
        .journal
        .replay::<ClusterView>(Until::End)
        .unwrap()
        .state;
    let ended: Vec<_> = view
        .nodeclaims
        .values()
        .filter_map(|c| c.ended.clone())
        .collect();
    assert_eq!(ended, vec!["registration_timeout".to_owned()]);
    assert_eq!(system.cluster.released.lock().unwrap().len(), 1);
    // Its termination is measured; it had no node, so no node termination or lifetime.
    let metrics = system.metrics.encode();
    assert!(
        metrics.contains(
            "karpenter_nodeclaims_termination_duration_seconds_count{nodepool=\"default\"} 1"
        ),
        "{metrics}"
    );
    assert!(
        !metrics.contains("karpenter_nodes_termination_duration_seconds_count")
            && !metrics.contains("karpenter_nodes_lifetime_duration_seconds_count"),
        "{metrics}"
    );
}

/// How long a pod waited, from first seen unschedulable until bound, is measured on the
/// journal's clock when it binds; a pod deleted while it waited is not counted.
#[tokio::test(start_paused = true)]
async fn the_time_a_pod_waited_for_a_node_is_measured_when_it_binds() {
    let clock = Arc::new(keeper::PausedClock(tokio::time::Instant::now()));
    let system = start_with_settings(
        "t-wait",
        |_| None,
        vec![nodepool()],
        Settings::default(),
        Some(clock),
    )
    .await;
    pending(&system, "p1");
    pending(&system, "p2");
    settle().await;
    tokio::time::sleep(Duration::from_secs(42)).await;
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodBound {
            uid: "p1".into(),
            pod: "default/p1".into(),
            node: "n1".into(),
        })
        .unwrap();
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodDeleted { uid: "p2".into() })
        .unwrap();
    settle().await;
    let metrics = system.metrics.encode();
    let sample = |name: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{metrics}"))
    };
    assert_eq!(
        sample("karpenter_pods_provisioning_bound_duration_seconds_count"),
        1.0
    );
    let waited = sample("karpenter_pods_provisioning_bound_duration_seconds_sum");
    assert!((42.0..43.0).contains(&waited), "{waited}");
}

/// A queue holding a fixed batch of messages; checks on every delete that the message was
/// journaled first.
struct FakeQueue {
    journal: Arc<Journal<DomainEvent>>,
    batch: Mutex<Option<Vec<QueueMessage>>>,
    deleted: Mutex<Vec<String>>,
    deleted_before_journaled: Mutex<Vec<String>>,
}

impl InterruptionQueue for FakeQueue {
    fn name(&self) -> &str {
        "fake-queue"
    }
    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, CloudError>> {
        Box::pin(async move {
            let batch = self.batch.lock().unwrap().take();
            match batch {
                Some(batch) => Ok(batch),
                None => {
                    // An empty long poll.
                    tokio::time::sleep(Duration::from_secs(20)).await;
                    Ok(Vec::new())
                }
            }
        })
    }
    fn delete<'a>(&'a self, receipt: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            let journaled = self.journal.read_from(0).any(|e| {
                matches!(e.unwrap().event, DomainEvent::InterruptionMessage { message_id, .. } if message_id == receipt)
            });
            if !journaled {
                self.deleted_before_journaled
                    .lock()
                    .unwrap()
                    .push(receipt.to_owned());
            }
            self.deleted.lock().unwrap().push(receipt.to_owned());
            Ok(())
        })
    }
}

fn message(id: &str, content: QueueMessageContent) -> QueueMessage {
    QueueMessage {
        id: id.into(),
        receipt: id.into(),
        sent_at_ms: None,
        content,
    }
}

#[tokio::test(start_paused = true)]
async fn queue_messages_are_journaled_acted_on_then_deleted() {
    use karpenter_actors::actor::messages::InterruptionMsg;
    use karpenter_core::events::MessageOutcome;
    let queue: Arc<Mutex<Option<Arc<FakeQueue>>>> = Arc::default();
    let slot = queue.clone();
    let system = start_with_queue("t-queue", move |journal| {
        let q = Arc::new(FakeQueue {
            journal,
            // Filled once the instance exists.
            batch: Mutex::new(Some(Vec::new())),
            deleted: Mutex::default(),
            deleted_before_journaled: Mutex::default(),
        });
        *slot.lock().unwrap() = Some(q.clone());
        Some(q as Arc<dyn InterruptionQueue>)
    })
    .await;
    let queue = queue.lock().unwrap().clone().unwrap();
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    let notice = |kind| QueueMessageContent::Notice {
        kind,
        instance_ids: vec!["i-0".into()],
    };
    *queue.batch.lock().unwrap() = Some(vec![
        message(
            "m-rebalance",
            notice(InterruptionKind::RebalanceRecommendation),
        ),
        message(
            "m-garbage",
            QueueMessageContent::Malformed {
                error: "not an EventBridge event".into(),
            },
        ),
        message("m-spot", notice(InterruptionKind::SpotInterrupted)),
    ]);
    // The empty poll in flight ends after 20 s; the next one returns the batch.
    tokio::time::sleep(Duration::from_secs(21)).await;
    settle().await;

    assert_eq!(
        *queue.deleted.lock().unwrap(),
        vec!["m-rebalance", "m-garbage", "m-spot"]
    );
    assert!(queue.deleted_before_journaled.lock().unwrap().is_empty());
    let status =
        ractor::call_t!(system.actors.interruption, InterruptionMsg::GetStatus, 1000).unwrap();
    assert_eq!(status.messages_deleted, 3);
    assert_eq!(status.messages_malformed, 1);
    assert_eq!(status.delivered, 2);
    let outcomes: Vec<MessageOutcome> = system
        .journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::InterruptionMessage { outcome, .. } => Some(outcome),
            _ => None,
        })
        .collect();
    assert_eq!(
        outcomes,
        vec![
            MessageOutcome::Notice,
            MessageOutcome::Malformed,
            MessageOutcome::Notice
        ]
    );
    // Rebalance: an Event, no drain. Spot warning: drain, and the offering is avoided.
    let reasons: Vec<String> = system
        .cluster
        .events
        .lock()
        .unwrap()
        .iter()
        .map(|(_, r)| r.clone())
        .collect();
    assert!(
        reasons.contains(&"SpotRebalanceRecommendation".to_owned()),
        "{reasons:?}"
    );
    assert!(
        reasons.contains(&"SpotInterrupted".to_owned()),
        "{reasons:?}"
    );
    assert_eq!(draining_reasons(&system), vec!["spot_interrupted"]);
    assert_eq!(
        *system.cloud.unavailable.lock().unwrap(),
        vec![OfferingKey {
            instance_type: "m.xlarge".into(),
            zone: "a".into(),
            capacity_type: CapacityType::Spot
        }]
    );
}

/// The reasons of the drains the journal holds, in order.
fn draining_reasons(system: &System) -> Vec<String> {
    system
        .journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::NodeClaimDraining { reason, .. } => Some(reason),
            _ => None,
        })
        .collect()
}

/// A spot notice for `i-0` sent after `trouble` is done to the cloud: the interruption
/// actor's status at once and after its next route attempt.
async fn notice_with_lookup_trouble(
    scope: &str,
    trouble: impl FnOnce(&FakeCloud),
) -> (
    karpenter_actors::actor::messages::InterruptionStatus,
    karpenter_actors::actor::messages::InterruptionStatus,
) {
    use karpenter_actors::actor::messages::InterruptionMsg;
    use karpenter_core::ports::InterruptionKind;
    let system = start(scope).await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_secs(2)).await;
    settle().await;
    trouble(&system.cloud);
    system
        .actors
        .interruption
        .cast(InterruptionMsg::Notice {
            instance_id: "i-0".into(),
            kind: InterruptionKind::SpotInterrupted,
        })
        .unwrap();
    settle().await;
    let status = || async {
        ractor::call_t!(system.actors.interruption, InterruptionMsg::GetStatus, 1000).unwrap()
    };
    let first = status().await;
    tokio::time::sleep(Duration::from_secs(11)).await;
    settle().await;
    (first, status().await)
}

#[tokio::test(start_paused = true)]
async fn a_notice_whose_instance_lookup_fails_is_retried_not_dropped() {
    let (first, last) = notice_with_lookup_trouble("t-route-again", |cloud| {
        cloud.failing_gets.store(2, Ordering::SeqCst)
    })
    .await;
    assert_eq!(
        (first.received, first.delivered),
        (1, 0),
        "first lookup failed"
    );
    assert_eq!((last.received, last.delivered, last.unowned), (1, 1, 0));
}

/// EC2 shows a new instance's tags a while after launch: a notice for an instance listed
/// without its NodeClaim tag is routed again later, not counted as unowned and dropped.
#[tokio::test(start_paused = true)]
async fn a_notice_for_an_instance_listed_without_its_tag_yet_is_routed_again() {
    let (first, last) = notice_with_lookup_trouble("t-route-untagged", |cloud| {
        cloud.untagged_gets.store(2, Ordering::SeqCst)
    })
    .await;
    assert_eq!((first.delivered, first.unowned), (0, 0), "tag not seen yet");
    assert_eq!((last.received, last.delivered, last.unowned), (1, 1, 0));
}

/// The rounds the journal holds, with what each decided for `uid`.
fn rounds_for(system: &System, uid: &str) -> Vec<(u64, String)> {
    system
        .journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::RoundCompleted(r) => {
                let decided = r
                    .unschedulable
                    .iter()
                    .find(|(p, _)| p == uid)
                    .map(|(_, why)| format!("unschedulable: {why}"))
                    .or_else(|| {
                        r.bindings
                            .iter()
                            .find(|(p, _)| p == uid)
                            .map(|(_, n)| format!("on {n}"))
                    })
                    .unwrap_or_else(|| "planned".into());
                Some((r.round, decided))
            }
            _ => None,
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn pods_pending_before_any_nodepool_are_planned_once_one_exists() {
    let system = start_with("t-late-pool", |_| None, Vec::new()).await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!((s.rounds, s.pending), (1, 1), "no NodePool: the pod waits");
    assert!(s.unschedulable["p1"].contains("no NodePool"), "{s:?}");
    system
        .supervisor
        .cast(SupervisorMsg::ApplyNodePool(Box::new(nodepool())))
        .unwrap();
    // The new NodePool opens a batch at once; it closes after the idle second.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!((s.rounds, s.pending, s.nominated), (2, 0, 1), "{s:?}");
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_nodepool_whose_node_class_is_not_ready_is_left_out_of_rounds_until_it_is() {
    let system = start("t-class-not-ready").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    // The class goes: the types listed before must not be planned with.
    system.cloud.class_not_ready.store(true, Ordering::SeqCst);
    let big = Pod::simple("big", 3500, 1 << 30);
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodPending(Box::new(big)))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!(s.pending, 1, "{s:?}");
    assert!(
        s.unschedulable["big"].contains("no NodePool is ready"),
        "{s:?}"
    );
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    // Ready again: the next retry plans it.
    system.cloud.class_not_ready.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(12)).await;
    settle().await;
    assert_eq!(status(&system).await.pending, 0);
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn pods_failing_validation_are_counted_as_ignored_by_the_round() {
    let system = start("t-ignored").await;
    let mut restricted = Pod::simple("red", 500, 1 << 30);
    restricted.blocked = Some("label \"kubernetes.io/hostname\" is restricted".into());
    for pod in [restricted, Pod::simple("plain", 500, 1 << 30)] {
        system
            .actors
            .scheduler
            .cast(SchedulerMsg::PodPending(Box::new(pod)))
            .unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let s = status(&system).await;
    assert_eq!((s.pending, s.nominated), (1, 1), "{s:?}");
    let metrics = system.metrics.encode();
    assert!(
        metrics.contains("karpenter_scheduler_ignored_pods_count 1"),
        "{metrics}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_pod_still_pending_is_planned_again_every_ten_seconds_until_it_goes() {
    let system = start("t-retry").await;
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodPending(Box::new(Pod::simple(
            "huge",
            64_000,
            1 << 30,
        ))))
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(status(&system).await.rounds, 1);
    // Each retry opens a batch, which closes after the idle second.
    tokio::time::sleep(Duration::from_secs(21)).await;
    settle().await;
    let rounds = rounds_for(&system, "huge");
    assert_eq!(rounds.len(), 3, "{rounds:?}");
    assert!(
        rounds.iter().all(|(_, d)| d.starts_with("unschedulable")),
        "{rounds:?}"
    );
    // Nothing changed: the retries repeat the first round's input, recorded once.
    let repeats: Vec<(Option<u64>, bool)> = system
        .journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::RoundCompleted(r) => Some((r.repeats, r.input.is_some())),
            _ => None,
        })
        .collect();
    assert_eq!(
        repeats,
        vec![(None, true), (Some(1), false), (Some(1), false)]
    );
    system
        .actors
        .scheduler
        .cast(SchedulerMsg::PodDeleted { uid: "huge".into() })
        .unwrap();
    tokio::time::sleep(Duration::from_secs(60)).await;
    settle().await;
    assert_eq!(
        status(&system).await.rounds,
        3,
        "nothing pending: no rounds"
    );
    assert!(system.cloud.creates.lock().unwrap().is_empty());
}

fn node(provider_id: &str, full: bool) -> NodeInfo {
    let allocatable = Resources::cpu_memory(3900, 15 << 30).with(ResourceName::Pods, 58);
    NodeInfo {
        name: "node-1".into(),
        provider_id: provider_id.into(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        allocatable,
        requested: if full { allocatable } else { Resources::ZERO },
        daemon_requested: Resources::ZERO,
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
        ready: true,
        unschedulable: false,
    }
}

fn expired_nominations(system: &System) -> Vec<DomainEvent> {
    system
        .journal
        .read_from(0)
        .map(|e| e.unwrap().event)
        .filter(|e| matches!(e, DomainEvent::NominationExpired { .. }))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_nomination_kube_scheduler_does_not_honour_expires_and_the_pod_is_planned_again() {
    let system = start("t-nominated").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(status(&system).await.nominated, 1);
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    // The node comes up Ready, but kube-scheduler fills it with another pod.
    system
        .cluster
        .nodes
        .lock()
        .unwrap()
        .push(node("fake:///a/i-0", true));
    // Within the nomination window the pod stays nominated: no second NodeClaim.
    tokio::time::sleep(Duration::from_secs(15)).await;
    settle().await;
    assert_eq!(status(&system).await.nominated, 1);
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    // Once the window has passed, the pod is planned again and gets capacity of its own.
    tokio::time::sleep(Duration::from_secs(30)).await;
    settle().await;
    let expired = expired_nominations(&system);
    assert_eq!(expired.len(), 1, "{expired:?}");
    let s = status(&system).await;
    assert_eq!((s.pending, s.nominated), (0, 1), "{s:?}");
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_nominated_pod_that_still_fits_its_ready_node_is_left_for_kube_scheduler() {
    let system = start("t-fits").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    system
        .cluster
        .nodes
        .lock()
        .unwrap()
        .push(node("fake:///a/i-0", false));
    tokio::time::sleep(Duration::from_secs(45)).await;
    settle().await;
    // Its nomination expired, but the node still has room: the round places it there and
    // buys nothing more.
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    let rounds = rounds_for(&system, "p1");
    assert!(
        rounds.iter().skip(1).all(|(_, d)| d == "on node-1"),
        "{rounds:?}"
    );
    assert!(rounds.len() >= 2, "{rounds:?}");
}

#[tokio::test(start_paused = true)]
async fn a_running_node_kube_scheduler_does_not_bind_to_is_refused_and_the_pod_planned_elsewhere() {
    let system = start("t-refused").await;
    // A running node with room, which kube-scheduler will not bind the pod to (for a reason
    // rounds do not see).
    system
        .cluster
        .nodes
        .lock()
        .unwrap()
        .push(node("fake:///static/i-9", false));
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    assert_eq!(rounds_for(&system, "p1"), [(1, "on node-1".to_owned())]);
    // Within the window, later rounds leave it to kube-scheduler on node-1 again.
    tokio::time::sleep(Duration::from_secs(15)).await;
    settle().await;
    assert!(system.cloud.creates.lock().unwrap().is_empty());
    // Past it, node-1 is refused to the pod: it gets a NodeClaim of its own.
    tokio::time::sleep(Duration::from_secs(30)).await;
    settle().await;
    let expired = expired_nominations(&system);
    assert_eq!(
        expired,
        [DomainEvent::NominationExpired {
            uid: "p1".into(),
            nodeclaim: String::new(),
            node: "node-1".into(),
        }]
    );
    assert_eq!(system.cloud.creates.lock().unwrap().len(), 1);
    let rounds = rounds_for(&system, "p1");
    assert!(
        rounds.last().is_some_and(|(_, d)| d == "planned"),
        "{rounds:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failed_cordon_is_retried_before_anything_is_evicted() {
    use karpenter_actors::actor::messages::NodeClaimMsg;
    use karpenter_core::lifecycle::nodeclaim::Input;
    let system = start("t-cordon").await;
    pending(&system, "p1");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    settle().await;
    let name = system
        .cluster
        .nodeclaims
        .lock()
        .unwrap()
        .keys()
        .next()
        .cloned()
        .unwrap();
    let actor: ractor::ActorRef<NodeClaimMsg> =
        ractor::registry::where_is(format!("t-cordon/nodeclaim/{name}"))
            .unwrap()
            .into();
    actor
        .cast(NodeClaimMsg::Input(Input::NodeRegistered {
            node: "node-1".into(),
        }))
        .unwrap();
    system
        .cluster
        .on_nodes
        .lock()
        .unwrap()
        .insert("web-1".into(), "node-1".into());
    system.cluster.failing_cordons.store(2, Ordering::SeqCst);
    actor
        .cast(NodeClaimMsg::Input(Input::Deleted { since_ms: None }))
        .unwrap();
    settle().await;
    // The first cordon failed: nothing is evicted from a node that still takes pods.
    assert_eq!(*system.cluster.calls.lock().unwrap(), ["cordon node-1"]);
    // Retried every 5 s (eviction_retry); the third attempt succeeds, then the eviction.
    tokio::time::sleep(Duration::from_secs(11)).await;
    settle().await;
    assert_eq!(
        *system.cluster.calls.lock().unwrap(),
        [
            "cordon node-1",
            "cordon node-1",
            "cordon node-1",
            "evict web-1"
        ]
    );
    let failed = system
        .cluster
        .events
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, reason)| reason == "FailedDraining")
        .count();
    assert_eq!(failed, 2);
    // Drained: the instance goes and the object is let go.
    tokio::time::sleep(Duration::from_secs(6)).await;
    settle().await;
    assert_eq!(system.cloud.deletes.lock().unwrap().len(), 1);
    assert_eq!(*system.cluster.released.lock().unwrap(), [name]);
}
