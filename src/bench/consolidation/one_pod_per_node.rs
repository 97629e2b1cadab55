//! `bench consolidation --case one-pod-per-node`: the cluster upstream's disruption suite
//! builds to time its controller — N on-demand 4-vCPU nodes, each running one 1-CPU pod of a
//! ReplicaSet, the NodePool's budget at 100 % — over an assorted catalog like upstream's fake
//! provider's: CPU 1–64 × memory 1–128 GiB × 3 zones × spot and on-demand × linux and
//! windows × amd64 and arm64, one offering per type, priced from its resources (0.1 $/h per
//! vCPU and per GB), 5 pods per node and 100m CPU and 10 MiB reserved, as its fake types
//! have when no pod count is given.

use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Context;
use karpenter_core::model::instance_type::{CapacityType, Offering};
use karpenter_core::model::{InstanceType, Pod, ResourceName, Resources};
use karpenter_core::ports::OfferingKey;
use karpenter_core::vocab::labels;

use super::{DAY_MS, Fleet, FleetNode, START_MS};

const GIB: i64 = 1 << 30;

/// Zones of the catalog's offerings.
const ZONES: [&str; 3] = ["test-zone-1", "test-zone-2", "test-zone-3"];

/// The assorted catalog: 1,344 types, each with a single offering.
pub fn assorted_instance_types() -> Vec<Arc<InstanceType>> {
    let mut out = Vec::new();
    for cpu in [1i64, 2, 4, 8, 16, 32, 64] {
        for memory_gib in [1i64, 2, 4, 8, 16, 32, 64, 128] {
            for zone in ZONES {
                for capacity_type in [CapacityType::Spot, CapacityType::OnDemand] {
                    for os in ["linux", "windows"] {
                        for arch in ["amd64", "arm64"] {
                            out.push(Arc::new(assorted_type(
                                cpu,
                                memory_gib,
                                zone,
                                capacity_type,
                                os,
                                arch,
                            )));
                        }
                    }
                }
            }
        }
    }
    out
}

fn assorted_type(
    cpu: i64,
    memory_gib: i64,
    zone: &str,
    capacity_type: CapacityType,
    os: &str,
    arch: &str,
) -> InstanceType {
    let name = format!(
        "{cpu}-cpu-{memory_gib}-mem-{arch}-{os}-{zone}-{}",
        capacity_type.as_str()
    );
    let memory = memory_gib * GIB;
    let price = 0.1 * cpu as f64 + 0.1 * memory as f64 / 1e9;
    let size = if cpu > 4 && memory_gib > 8 {
        "large"
    } else {
        "small"
    };
    let labels: BTreeMap<String, String> = [
        (labels::INSTANCE_TYPE.to_owned(), name.clone()),
        (labels::ARCH.to_owned(), arch.to_owned()),
        (labels::OS.to_owned(), os.to_owned()),
        ("size".to_owned(), size.to_owned()),
        ("integer".to_owned(), cpu.to_string()),
    ]
    .into();
    let capacity = Resources::cpu_memory(cpu * 1000, memory).with(ResourceName::Pods, 5);
    let overhead = Resources::cpu_memory(100, 10 << 20);
    let offering = Offering::new(zone, capacity_type, price, true);
    InstanceType::new(name, labels, capacity, overhead, vec![offering])
}

/// `nodes` on-demand `4-cpu-8-mem-amd64-linux` nodes, their zones in turn, each running one
/// pod requesting 1 CPU and 1 GiB.
pub fn fleet(nodes: usize) -> anyhow::Result<Fleet> {
    let mut fleet = Fleet::empty(crate::bench::one_pool_input(assorted_instance_types()));
    for i in 0..nodes {
        let zone = ZONES[i % ZONES.len()];
        let name = format!("4-cpu-8-mem-amd64-linux-{zone}-on-demand");
        let instance_type = fleet
            .template
            .nodepools
            .iter()
            .flat_map(|p| p.instance_types.iter())
            .find(|t| t.name == name)
            .with_context(|| format!("instance type {name} not in the assorted catalog"))?
            .clone();
        let price = instance_type
            .offerings
            .first()
            .with_context(|| format!("instance type {name} has no offering"))?
            .price;
        let node = format!("node-{:05}", fleet.next);
        fleet.next += 1;
        fleet.nodes.insert(
            node,
            FleetNode {
                nodepool: "default".into(),
                instance_type,
                offering: OfferingKey {
                    instance_type: name,
                    zone: zone.into(),
                    capacity_type: CapacityType::OnDemand,
                },
                price,
                initialized_ms: START_MS - DAY_MS,
                pods: vec![Pod::simple(&format!("pod-{i:05}"), 1000, GIB)],
            },
        );
    }
    Ok(fleet)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_catalog_has_upstreams_1344_types_priced_from_their_resources() {
        let types = assorted_instance_types();
        assert_eq!(types.len(), 7 * 8 * 3 * 2 * 2 * 2);
        let t = types
            .iter()
            .find(|t| t.name == "4-cpu-8-mem-amd64-linux-test-zone-2-on-demand")
            .unwrap();
        assert_eq!(t.offerings.len(), 1);
        assert!((t.offerings[0].price - (0.4 + 0.1 * 8.0 * 1.073741824)).abs() < 1e-9);
        assert_eq!(t.capacity.get(ResourceName::Pods), 5);
        assert_eq!(t.labels[labels::OS], "linux");
    }

    #[test]
    fn the_cluster_has_one_pod_per_node_in_three_zones() {
        let fleet = fleet(30).unwrap();
        assert_eq!(fleet.len(), 30);
        assert_eq!(fleet.pods(), 30);
        let zones: std::collections::BTreeSet<&str> = fleet
            .nodes
            .values()
            .map(|n| n.offering.zone.as_str())
            .collect();
        assert_eq!(zones.len(), 3);
    }

    #[test]
    fn both_searches_consolidate_it_keeping_every_pod() {
        let case = super::super::run_fleet("30", fleet(30).unwrap(), false, Some(None)).unwrap();
        assert!(case.balanced.is_none());
        for run in [&case.ours, case.upstream.as_ref().unwrap()] {
            assert_eq!(run.fleet.pods(), 30);
            assert_eq!(run.fleet.violations(), Vec::<String>::new());
            assert!(run.after < case.before, "{} >= {}", run.after, case.before);
            assert!(run.first.is_some());
            assert!(!run.capped);
        }
    }
}
