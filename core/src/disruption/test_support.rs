//! Builders for the disruption tests: small snapshots stated in a line each.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use super::{NodeSnapshot, PodSnapshot, PoolPolicy, Snapshot};
use crate::api::nodepool::{Budget, ConsolidationPolicy, default_budgets};
use crate::events::NodeClaimState;
use crate::model::instance_type::{CapacityType, Offering, overhead};
use crate::model::{InstanceType, KubeletSettings, Pod, Requirements, ResourceName, Resources};
use crate::ports::OfferingKey;
use crate::scheduling::{ExistingNode, Limits, NodePoolTemplate, SchedulingInput};
use crate::vocab::labels;

/// 2027-01-15T08:00:00Z.
pub const NOW: i64 = 1_800_000_000_000;
/// One minute, in ms.
pub const MIN: i64 = 60_000;
const GIB: i64 = 1 << 30;

/// A pool with upstream's defaults (budget 10 %, consolidateAfter 0s).
pub fn pool(name: &str) -> PoolPolicy {
    PoolPolicy {
        name: name.into(),
        budgets: default_budgets(),
        consolidate_after: Some(Duration::ZERO),
        policy: ConsolidationPolicy::WhenEmptyOrUnderutilized,
        replicas: None,
        node_limit: None,
    }
}

/// A pod of 1 CPU and 1 GiB; `moves`: it would have to move.
pub fn pod(name: &str, moves: bool) -> PodSnapshot {
    PodSnapshot {
        node: String::new(),
        pod: Pod::simple(name, 1000, GIB),
        reschedulable: moves,
        do_not_disrupt: None,
        created_ms: Some(NOW - 60 * MIN),
        pdbs: Vec::new(),
    }
}

/// An initialized, Ready node of `pool` created an hour ago, at $0.10/h.
pub fn node(name: &str, pool: &str, pods: Vec<PodSnapshot>) -> NodeSnapshot {
    NodeSnapshot {
        nodeclaim: name.into(),
        nodepool: pool.into(),
        node: Some(format!("node-{name}")),
        state: NodeClaimState::Initialized,
        ready: true,
        command: None,
        nominated: false,
        do_not_disrupt: false,
        created_ms: NOW - 60 * MIN,
        initialized_ms: Some(NOW - 59 * MIN),
        last_pod_event_ms: None,
        expire_after: Some(Duration::from_secs(720 * 3600)),
        termination_grace_period: None,
        drifted: None,
        price: 0.10,
        offering: Some(OfferingKey {
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            capacity_type: CapacityType::OnDemand,
        }),
        pods,
        conditions: Vec::new(),
    }
}

/// A snapshot at [`NOW`] with the pools `nodes` name, each with upstream's defaults.
pub fn snapshot(nodes: Vec<NodeSnapshot>) -> Snapshot {
    let mut pools: Vec<PoolPolicy> = Vec::new();
    for n in &nodes {
        if !pools.iter().any(|p| p.name == n.nodepool) {
            pools.push(pool(&n.nodepool));
        }
    }
    Snapshot {
        now_ms: NOW,
        pools,
        nodes,
        pdbs: Default::default(),
        spot_to_spot: false,
        static_capacity: true,
        buffered: Default::default(),
        repair: None,
        scaling_out: Default::default(),
    }
}

/// Gives `pool` one budget of `nodes` for every reason.
pub fn nodes_budget(s: &mut Snapshot, pool: &str, nodes: &str) {
    for p in s.pools.iter_mut().filter(|p| p.name == pool) {
        p.budgets = vec![Budget {
            nodes: nodes.into(),
            schedule: None,
            duration: None,
            reasons: Vec::new(),
        }];
    }
}

/// An instance type of `cpu` vCPUs and 4 GiB per vCPU, on-demand at `price` in zone a.
pub fn instance_type(name: &str, cpu: i64, price: f64) -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(cpu * 1000, cpu * 4 * GIB).with(ResourceName::Pods, 110);
    Arc::new(InstanceType::new(
        name,
        [(labels::INSTANCE_TYPE.to_owned(), name.to_owned())].into(),
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        vec![Offering::new("a", CapacityType::OnDemand, price, true)],
    ))
}

/// What the scheduler's next round would see: `nodes` (name, free CPU) as existing nodes
/// and one pool `pool` that can launch 2- and 8-vCPU types.
pub fn base(pool: &str, nodes: &[(&str, i64)]) -> SchedulingInput {
    SchedulingInput {
        pods: Vec::new(),
        nodepools: vec![NodePoolTemplate {
            name: pool.into(),
            weight: 0,
            requirements: Requirements::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            instance_types: vec![
                instance_type("small", 2, 0.05),
                instance_type("big", 8, 0.20),
            ],
            limits: Limits::default(),
            usage: Resources::ZERO,
            node_count: 0,
        }],
        existing: nodes
            .iter()
            .map(|(name, cpu)| ExistingNode {
                name: (*name).into(),
                labels: [(labels::HOSTNAME.to_owned(), (*name).to_owned())].into(),
                taints: Vec::new(),
                allocatable: Resources::cpu_memory(cpu * 1000, cpu * 4 * GIB)
                    .with(ResourceName::Pods, 110),
                requested: Resources::ZERO,
                pods: Vec::new(),
                anti_affinity: Vec::new(),
                host_ports: Vec::new(),
                attach_limits: Default::default(),
                attached: Vec::new(),
            })
            .map(Arc::new)
            .collect(),
        daemonsets: Vec::new(),
        ..Default::default()
    }
}

/// A 2-vCPU type offered on demand in `zone` only.
pub fn catalog_type(name: &str, zone: &str) -> Arc<InstanceType> {
    let mut t = (*instance_type(name, 2, 0.1)).clone();
    t.offerings[0].zone = zone.into();
    Arc::new(t)
}
