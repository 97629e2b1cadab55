//! The actors on tokio's paused clock, against fakes of the two ports that record calls and
//! take injected failures: batching windows, launch failures and the registration deadline.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use karpenter_actors::actor::scheduler::{SchedulerMsg, SchedulerStatus};
use karpenter_actors::actor::supervisor::{Actors, SupervisorActor, SupervisorArgs, SupervisorMsg};
use karpenter_actors::actor::{Context, Settings};
use karpenter_actors::api::NodePool;
use karpenter_actors::events::{ClusterView, DomainEvent};
use karpenter_actors::model::instance_type::{CapacityType, Offering, overhead};
use karpenter_actors::model::{InstanceType, KubeletSettings, Pod, ResourceName, Resources, Taint};
use karpenter_actors::ports::*;
use karpenter_journal::{Journal, Until};
use ractor::Actor;

#[derive(Default)]
struct FakeCloud {
    creates: Mutex<Vec<String>>,
    deletes: Mutex<Vec<String>>,
    unavailable: Mutex<Vec<OfferingKey>>,
    fail_with_ice: std::sync::atomic::AtomicBool,
    next: AtomicU64,
}

fn instance_type() -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(4000, 16 << 30)
        .with(ResourceName::Pods, 58)
        .with(ResourceName::EphemeralStorage, 20 << 30);
    let offerings = vec![Offering {
        zone: "a".into(),
        capacity_type: CapacityType::Spot,
        price: 0.05,
        available: true,
    }];
    Arc::new(InstanceType::new(
        "m.xlarge",
        BTreeMap::new(),
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        offerings,
    ))
}

impl CloudProvider for FakeCloud {
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
            Ok(Instance {
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
            })
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
            Err(CloudError::NotFound {
                id: instance_id.to_owned(),
            })
        })
    }
    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>> {
        Box::pin(async move { Ok(Vec::new()) })
    }
    fn instance_types<'a>(
        &'a self,
        _: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>> {
        Box::pin(async move { Ok(vec![instance_type()]) })
    }
    fn mark_unavailable(&self, offering: &OfferingKey) {
        self.unavailable.lock().unwrap().push(offering.clone());
    }
}

/// A cluster with no nodes that records the Events it is asked to emit.
#[derive(Default)]
struct FakeCluster {
    events: Mutex<Vec<(String, String)>>,
}

impl Cluster for FakeCluster {
    fn nodes(&self) -> BoxFuture<'_, Vec<NodeInfo>> {
        Box::pin(async move { Vec::new() })
    }
    fn pods_on_node<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Vec<(String, String, bool)>> {
        Box::pin(async move { Vec::new() })
    }
    fn daemonsets(&self) -> BoxFuture<'_, Vec<Pod>> {
        Box::pin(async move { Vec::new() })
    }
    fn sync_node<'a>(
        &'a self,
        _: &'a str,
        _: BTreeMap<String, String>,
        _: Vec<Taint>,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {})
    }
    fn cordon<'a>(&'a self, _: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {})
    }
    fn evict<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move { Ok(()) })
    }
    fn delete_node<'a>(&'a self, _: &'a str) -> BoxFuture<'a, ()> {
        Box::pin(async move {})
    }
    fn emit_event(&self, object: &str, reason: &str, _: &str) {
        self.events
            .lock()
            .unwrap()
            .push((object.to_owned(), reason.to_owned()));
    }
}

struct System {
    _dir: tempfile::TempDir,
    journal: Arc<Journal<DomainEvent>>,
    cloud: Arc<FakeCloud>,
    cluster: Arc<FakeCluster>,
    actors: Actors,
}

fn nodepool() -> NodePool {
    serde_yaml_ng::from_str(
        "apiVersion: karpenter.sh/v1\nkind: NodePool\nmetadata: {name: default}\nspec:\n  template:\n    spec:\n      nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}\n      requirements: []\n",
    )
    .unwrap()
}

async fn start(scope: &str) -> System {
    let dir = tempfile::tempdir().unwrap();
    let journal = Arc::new(Journal::open(dir.path()).unwrap());
    let cloud = Arc::new(FakeCloud::default());
    let cluster = Arc::new(FakeCluster::default());
    let ctx = Context {
        journal: journal.clone(),
        cloud: cloud.clone(),
        cluster: cluster.clone(),
        settings: Settings::default(),
        metrics: Default::default(),
        scope: scope.into(),
    };
    let (supervisor, _) = Actor::spawn(
        Some(format!("{scope}/supervisor")),
        SupervisorActor,
        SupervisorArgs {
            interruption_queue: None,
            gc: None,
            ctx,
            nodepools: vec![nodepool()],
            last_round: 0,
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
}
