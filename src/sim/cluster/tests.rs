use super::*;
use karpenter_core::model::{CapacityType, ResourceName};
use karpenter_core::ports::InstanceState;
use std::sync::Arc as StdArc;

fn instance_type() -> StdArc<InstanceType> {
    let capacity = Resources::cpu_memory(4000, 16 << 30)
        .with(ResourceName::Pods, 58)
        .with(ResourceName::EphemeralStorage, 20 << 30);
    StdArc::new(InstanceType::new(
        "m5.xlarge",
        BTreeMap::new(),
        capacity,
        Resources::cpu_memory(100, 1 << 30),
        Vec::new(),
    ))
}

fn instance(id: &str) -> Instance {
    Instance {
        id: id.into(),
        provider_id: format!("aws:///a/{id}"),
        instance_type: "m5.xlarge".into(),
        zone: "a".into(),
        capacity_type: CapacityType::Spot,
        price: 0.1,
        image_id: "ami".into(),
        nodeclaim: "nc".into(),
        nodepool: "default".into(),
        state: InstanceState::Running,
        launched_at_ms: None,
        price_source: None,
        reservation: None,
    }
}

fn drain(rx: &mut mpsc::UnboundedReceiver<ClusterEvent>) -> Vec<ClusterEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

#[tokio::test(start_paused = true)]
async fn pods_wait_for_a_ready_node_then_bind() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cluster = SimCluster::new(tx, Duration::from_secs(20));
    cluster.scale("web", Some(&Pod::simple("t", 1000, 1 << 30)), 3);
    cluster.tick();
    let events = drain(&mut rx);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ClusterEvent::PodUnschedulable(_)))
            .count(),
        3
    );
    cluster.tick();
    assert!(drain(&mut rx).is_empty(), "reported once");
    cluster.register(&instance("i-1"), &instance_type());
    cluster.tick();
    assert!(
        matches!(drain(&mut rx)[..], [ClusterEvent::NodeRegistered(_)]),
        "not Ready yet"
    );
    tokio::time::advance(Duration::from_secs(21)).await;
    cluster.tick();
    let events = drain(&mut rx);
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, ClusterEvent::PodBound { .. }))
            .count(),
        3
    );
    assert_eq!(cluster.stats().pending_latencies.len(), 3);
    assert!(cluster.stats().pending_latencies.iter().all(|l| *l >= 21.0));
}

#[tokio::test(start_paused = true)]
async fn evictions_honour_pdbs_and_deployments_replace_pods() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cluster = SimCluster::new(tx, Duration::ZERO);
    let mut template = Pod::simple("t", 500, 1 << 30);
    template.labels.insert("app".into(), "web".into());
    cluster.add_pdb(Pdb {
        name: "web".into(),
        selector: [("app".into(), "web".into())].into(),
        max_unavailable: 1,
    });
    cluster.register(&instance("i-1"), &instance_type());
    cluster.scale("web", Some(&template), 2);
    cluster.tick();
    let bound: Vec<String> = drain(&mut rx)
        .into_iter()
        .filter_map(|e| match e {
            ClusterEvent::PodBound { uid, .. } => Some(uid),
            _ => None,
        })
        .collect();
    assert_eq!(bound.len(), 2);
    // Disruption sees the pods, the PDB selecting them and what it allows.
    let view = cluster.disruption_view().await;
    assert_eq!(view.pdbs["default/web"], 1);
    assert_eq!(view.pods.len(), 2);
    assert!(
        view.pods
            .iter()
            .all(|p| p.pdbs == ["default/web"] && p.reschedulable)
    );
    cluster.evict(&bound[0]).await.unwrap();
    assert_eq!(cluster.disruption_view().await.pdbs["default/web"], 0);
    // The replacement is pending, so a second eviction would exceed the budget.
    let err = cluster.evict(&bound[1]).await.unwrap_err();
    assert!(matches!(err, EvictError::BlockedByPdb { .. }));
    assert_eq!(cluster.pending_count(), 1);
    cluster.tick();
    cluster.evict(&bound[1]).await.unwrap();
    assert_eq!(cluster.stats().evictions, 2);
    assert_eq!(cluster.stats().pdb_blocks, 1);
}

#[tokio::test(start_paused = true)]
async fn jobs_finish_and_scale_down_deletes_pods() {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cluster = SimCluster::new(tx, Duration::ZERO);
    cluster.register(&instance("i-1"), &instance_type());
    cluster.add_job(
        "batch",
        &Pod::simple("t", 500, 1 << 30),
        2,
        Duration::from_secs(60),
    );
    cluster.scale("web", Some(&Pod::simple("w", 100, 1 << 20)), 3);
    cluster.tick();
    assert_eq!(cluster.bound_count(), 5);
    cluster.scale("web", None, 1);
    tokio::time::advance(Duration::from_secs(61)).await;
    cluster.tick();
    assert_eq!(cluster.bound_count(), 1);
    let deleted = drain(&mut rx)
        .iter()
        .filter(|e| matches!(e, ClusterEvent::PodDeleted { .. }))
        .count();
    assert_eq!(deleted, 4);
    cluster.delete_node("ip-1.ec2.internal").await.unwrap();
    assert_eq!(cluster.node_count(), 0);
    assert_eq!(
        cluster.pending_count(),
        1,
        "the deployment's pod was replaced, pending"
    );
}

#[tokio::test(start_paused = true)]
async fn scaling_a_deployment_down_frees_its_nodes_room() {
    use karpenter_core::ports::Cluster as _;
    let (tx, _rx) = mpsc::unbounded_channel();
    let cluster = SimCluster::new(tx, Duration::ZERO);
    cluster.register(&instance("i-1"), &instance_type());
    cluster.tick();
    cluster.scale("web", Some(&Pod::simple("t", 1000, 1 << 30)), 3);
    cluster.tick();
    assert_eq!(cluster.bound_count(), 3);
    assert_eq!(
        cluster.nodes().await[0].requested.get(ResourceName::Cpu),
        3000
    );
    cluster.scale("web", None, 1);
    assert_eq!(
        cluster.nodes().await[0].requested.get(ResourceName::Cpu),
        1000,
        "the two pods scaled away no longer count on their node"
    );
}
