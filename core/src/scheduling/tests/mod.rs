//! Data-driven checks of one round: each test builds a small cluster and states what the
//! round must decide. The builders are here; the tests are grouped by theme.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use proptest::prelude::*;

use super::*;
use crate::model::instance_type::{CapacityType, Offering, overhead};
use crate::model::taints::Toleration;
use crate::model::{
    InstanceType, KubeletSettings, Pod, Requirement, Requirements, ResourceName, Resources, Taint,
};
use crate::vocab::labels;
use order::Order;

const GIB: i64 = 1 << 30;

/// An instance type with `cpu` vCPUs and `mem` GiB, on-demand at `price` and spot at 30% of
/// it in zones a and b.
fn it(name: &str, cpu: i64, mem: i64, price: f64) -> Arc<InstanceType> {
    it_in(name, cpu, mem, price, &["a", "b"])
}

/// As [`it`], offered in `zones`.
fn it_in(name: &str, cpu: i64, mem: i64, price: f64, zones: &[&str]) -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(cpu * 1000, mem * GIB)
        .with(ResourceName::Pods, 110)
        .with(ResourceName::EphemeralStorage, 20 * GIB);
    let mut offerings = Vec::new();
    for &zone in zones {
        offerings.push(Offering::new(zone, CapacityType::OnDemand, price, true));
        offerings.push(Offering::new(zone, CapacityType::Spot, price * 0.3, true));
    }
    let labels: BTreeMap<String, String> = [
        (labels::INSTANCE_TYPE.to_owned(), name.to_owned()),
        (labels::ARCH.to_owned(), "amd64".to_owned()),
        (
            "karpenter.k8s.aws/instance-family".to_owned(),
            name.split('.').next().unwrap().to_owned(),
        ),
    ]
    .into();
    Arc::new(InstanceType::new(
        name,
        labels,
        capacity,
        overhead(&capacity, &KubeletSettings::default()),
        offerings,
    ))
}

fn gpu(name: &str, cpu: i64, mem: i64, price: f64) -> Arc<InstanceType> {
    let mut t = (*it(name, cpu, mem, price)).clone();
    t.capacity.set(ResourceName::NvidiaGpu, 1);
    Arc::new(t)
}

fn catalog() -> Vec<Arc<InstanceType>> {
    vec![
        it("m.large", 2, 8, 0.10),
        it("m.xlarge", 4, 16, 0.20),
        it("m.2xlarge", 8, 32, 0.40),
        it("c.xlarge", 4, 8, 0.17),
        gpu("g.xlarge", 4, 16, 0.50),
    ]
}

fn pool(name: &str) -> NodePoolTemplate {
    NodePoolTemplate {
        name: name.into(),
        weight: 0,
        requirements: Requirements::new(),
        taints: Vec::new(),
        startup_taints: Vec::new(),
        instance_types: catalog(),
        limits: Limits::default(),
        usage: Resources::ZERO,
        node_count: 0,
    }
}

fn pods(prefix: &str, n: usize, cpu: i64, mem_gib: i64) -> Vec<Pod> {
    (0..n)
        .map(|i| Pod::simple(&format!("{prefix}-{i:03}"), cpu, mem_gib * GIB))
        .collect()
}

fn input(pods: Vec<Pod>, nodepools: Vec<NodePoolTemplate>) -> SchedulingInput {
    SchedulingInput {
        pods,
        nodepools,
        existing: Vec::new(),
        daemonsets: Vec::new(),
        ..Default::default()
    }
}

#[track_caller]
fn assert_all_placed(result: &SchedulingResult) {
    assert!(
        result.unschedulable.is_empty(),
        "{:?}",
        result.unschedulable
    );
}

fn first_types(claim: &PlannedNodeClaim, n: usize) -> Vec<&str> {
    claim
        .instance_types
        .iter()
        .take(n)
        .map(|o| &*o.name)
        .collect()
}

/// Pods with unique UIDs.
fn arb_pods(max: usize) -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec(arb_pod(), 1..max).prop_map(|pods| {
        pods.into_iter()
            .enumerate()
            .map(|(i, mut p)| {
                p.uid = format!("p{i:03}");
                p.name = p.uid.clone();
                p
            })
            .collect()
    })
}

fn spread(key: &str, app: &str, schedule_anyway: bool) -> crate::model::pod::TopologySpread {
    crate::model::pod::TopologySpread {
        topology_key: key.into(),
        max_skew: 1,
        selector: [("app".to_owned(), app.to_owned())].into(),
        schedule_anyway,
        ..Default::default()
    }
}

fn web(n: usize, key: &str, schedule_anyway: bool) -> Vec<Pod> {
    pods("web", n, 500, 1)
        .into_iter()
        .map(|mut p| {
            p.labels.insert("app".into(), "web".into());
            p.spread.push(spread(key, "web", schedule_anyway));
            p
        })
        .collect()
}

fn zone_of(claim: &PlannedNodeClaim) -> String {
    let zones = claim
        .requirements
        .get(labels::ZONE)
        .and_then(|r| r.values())
        .unwrap();
    assert_eq!(zones.len(), 1, "a spread claim is pinned to one zone");
    zones.iter().next().unwrap().clone()
}

fn term(key: &str, label: (&str, &str), anti: bool) -> crate::model::pod::PodAffinityTerm {
    crate::model::pod::PodAffinityTerm {
        topology_key: key.into(),
        selector: [(label.0.to_owned(), label.1.to_owned())].into(),
        namespaces: Vec::new(),
        expressions: Vec::new(),
        all_namespaces: false,
        namespace_selector: None,
        anti,
    }
}

fn labelled(
    prefix: &str,
    n: usize,
    label: (&str, &str),
    t: Option<crate::model::pod::PodAffinityTerm>,
) -> Vec<Pod> {
    pods(prefix, n, 500, 1)
        .into_iter()
        .map(|mut p| {
            p.labels.insert(label.0.into(), label.1.into());
            p.pod_affinity.extend(t.clone());
            p
        })
        .collect()
}

fn arb_pod() -> impl Strategy<Value = Pod> {
    (
        0u32..10_000,
        50i64..5000,
        1i64..12,
        any::<bool>(),
        any::<bool>(),
    )
        .prop_map(|(id, cpu, mem, tolerates, zone_a)| {
            let mut p = Pod::simple(&format!("p{id}"), cpu, mem * GIB / 2);
            if tolerates {
                p.tolerations.push(Toleration {
                    key: "dedicated".into(),
                    exists: true,
                    value: String::new(),
                    effect: String::new(),
                });
            }
            if zone_a {
                p.node_selector.add(labels::ZONE, Requirement::is_in(["a"]));
            }
            p
        })
}

/// `size` vCPU, 2·`size` GiB, 10·`size` pods, 100m/10Mi overhead, $`size`/h in zones a and b:
/// price linear in size, so only packing decides the bill.
fn linear(size: i64) -> Arc<InstanceType> {
    let capacity = Resources::cpu_memory(size * 1000, 2 * size * GIB)
        .with(ResourceName::Pods, 10 * size)
        .with(ResourceName::EphemeralStorage, 20 * GIB);
    let offerings = ["a", "b"]
        .into_iter()
        .map(|zone| Offering::new(zone, CapacityType::OnDemand, size as f64, true))
        .collect();
    Arc::new(InstanceType::new(
        format!("linear-{size}"),
        [(labels::INSTANCE_TYPE.to_owned(), format!("linear-{size}"))].into(),
        capacity,
        Resources::cpu_memory(100, 10 << 20),
        offerings,
    ))
}

fn linear_pool() -> NodePoolTemplate {
    NodePoolTemplate {
        startup_taints: Vec::new(),
        instance_types: (1..=16).map(linear).collect(),
        ..pool("linear")
    }
}

/// Pods like upstream's benchmark: generic, zone and hostname spread, zone self-affinity and
/// hostname anti-affinity, plus pods binding one of three host ports, with random requests.
fn arb_mixed_pods(max: usize) -> impl Strategy<Value = Vec<Pod>> {
    prop::collection::vec((0usize..6, 0usize..5, 0usize..6, 0usize..3), 1..max).prop_map(|specs| {
        const CPU: [i64; 5] = [100, 250, 500, 1000, 1500];
        const MEM_MIB: [i64; 6] = [100, 256, 512, 1024, 2048, 4096];
        specs
            .into_iter()
            .enumerate()
            .map(|(i, (kind, cpu, mem, value))| {
                let mut p = Pod::simple(&format!("p{i:03}"), CPU[cpu], MEM_MIB[mem] << 20);
                let value = ["a", "b", "c"][value];
                p.labels.insert("my-label".into(), value.into());
                match kind {
                    1 => p.spread.push(spread(labels::ZONE, value, false)),
                    2 => p.spread.push(spread(labels::HOSTNAME, value, false)),
                    3 => {
                        p.labels.insert("group".into(), value.into());
                        p.pod_affinity
                            .push(term(labels::ZONE, ("group", value), false));
                    }
                    4 => {
                        p.labels.insert("app".into(), "nginx".into());
                        p.pod_affinity
                            .push(term(labels::HOSTNAME, ("app", "nginx"), true));
                    }
                    5 => {
                        p.host_ports.push(crate::model::pod::HostPort {
                            ip: "0.0.0.0".into(),
                            protocol: "TCP".into(),
                            port: 9000 + i32::from(value.as_bytes()[0]),
                        });
                    }
                    _ => {}
                }
                p
            })
            .collect()
    })
}

fn nginx_with_preferences(n: usize) -> Vec<Pod> {
    let mut zone_b = Requirements::new();
    zone_b.add(labels::ZONE, Requirement::is_in(["b"]));
    labelled("nginx", n, ("app", "nginx"), None)
        .into_iter()
        .map(|mut p| {
            p.preferred_node_affinity.push((1, zone_b.clone()));
            // Only two pods can have a zone to themselves; every pod can have a node.
            p.preferred_pod_affinity
                .push((10, term(labels::ZONE, ("app", "nginx"), true)));
            p.preferred_pod_affinity
                .push((1, term(labels::HOSTNAME, ("app", "nginx"), true)));
            p
        })
        .collect()
}

fn zone_pool(name: &str, zones: &[&str]) -> NodePoolTemplate {
    let mut p = pool(name);
    p.requirements
        .add(labels::ZONE, Requirement::is_in(zones.iter().copied()));
    p
}

fn placed_pods(result: &SchedulingResult) -> usize {
    result
        .new_claims
        .iter()
        .map(|c| c.pods.len())
        .sum::<usize>()
        + result.bindings.len()
}

fn empty_node(name: &str, zone: &str) -> ExistingNode {
    ExistingNode {
        name: name.into(),
        labels: [(labels::ZONE.to_owned(), zone.to_owned())].into(),
        taints: Vec::new(),
        allocatable: Resources::cpu_memory(100, GIB).with(ResourceName::Pods, 10),
        requested: Resources::cpu_memory(100, 0),
        pods: Vec::new(),
        anti_affinity: Vec::new(),
        host_ports: Vec::new(),
        attach_limits: BTreeMap::new(),
        attached: Vec::new(),
    }
}

/// A node in `zone` with 8 vCPU and 32 GiB free.
fn roomy_node(name: &str, zone: &str) -> ExistingNode {
    ExistingNode {
        allocatable: Resources::cpu_memory(8000, 32 * GIB).with(ResourceName::Pods, 110),
        requested: Resources::ZERO,
        ..empty_node(name, zone)
    }
}

fn db_pod() -> PodLabels {
    (
        "default".into(),
        [("app".to_owned(), "db".to_owned())].into(),
    )
}

fn binding_port(prefix: &str, n: usize, port: i32, protocol: &str, ip: &str) -> Vec<Pod> {
    pods(prefix, n, 100, 1)
        .into_iter()
        .map(|mut p| {
            p.host_ports = vec![crate::model::pod::HostPort {
                ip: ip.into(),
                protocol: protocol.into(),
                port,
            }];
            p
        })
        .collect()
}

fn min_types_pool(min: usize) -> NodePoolTemplate {
    let mut p = pool("diverse");
    let mut types = Requirement::exists();
    types.min_values = Some(min);
    p.requirements.add(labels::INSTANCE_TYPE, types);
    p
}

/// A pool of m-family types offered in zones a, b and c.
fn three_zone_pool(name: &str) -> NodePoolTemplate {
    let mut p = pool(name);
    let zones = ["a", "b", "c"];
    p.instance_types = vec![
        it_in("m.large", 2, 8, 0.10, &zones),
        it_in("m.xlarge", 4, 16, 0.20, &zones),
        it_in("m.2xlarge", 8, 32, 0.40, &zones),
    ];
    p
}

fn pods_per_zone(result: &SchedulingResult) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for claim in &result.new_claims {
        *out.entry(zone_of(claim)).or_default() += claim.pods.len();
    }
    out
}

/// Web pods per zone, on existing nodes (by their zone label) and planned NodeClaims.
fn web_per_zone(round: &SchedulingInput, result: &SchedulingResult) -> BTreeMap<String, usize> {
    let mut out = pods_per_zone(result);
    for node in &round.existing {
        let zone = node.labels[labels::ZONE].clone();
        let before = node
            .pods
            .iter()
            .filter(|(_, l)| l.get("app").is_some_and(|a| a == "web"))
            .count();
        let bound = result
            .bindings
            .iter()
            .filter(|b| b.node == node.name)
            .count();
        *out.entry(zone).or_default() += before + bound;
    }
    out.retain(|_, n| *n > 0);
    out
}

mod basics;
mod cache;
mod packing;
mod relaxation;
mod reservations;
mod statics;
mod topology;
