//! A NodePool as a round plans with it: the instance types it may launch, what each
//! allows, daemonset overhead, and how much of its limits is left.
//!
//! A DaemonSet's pod is charged on a new node where it would run, as upstream charges it:
//! the pool's taints tolerated (`PreferNoSchedule` aside) and one of its node-affinity
//! alternatives admitted by both the pool's template and the instance type. What every
//! launchable type runs is the pool's `daemon` overhead, carried by each new claim; what only
//! some types run is taken off those types' allocatable, so a DaemonSet that needs arm64
//! costs nothing on amd64 types and one no type can run costs nothing at all. The host ports
//! of the DaemonSets that run on any of the pool's types are taken on every new node: a pod
//! that needs one of them cannot be planned onto the pool.

use std::sync::Arc;

use crate::model::pod::HostPort;
use crate::model::taints::untolerated;
use crate::model::{InstanceType, Pod, Requirements, Resources};

use super::NodePoolTemplate;

/// A NodePool as the round plans with it. What it says per instance type never changes in
/// a round and is shared (every packing starts from a copy, and a disruption pass's
/// simulations from the same one).
#[derive(Clone)]
pub(super) struct PoolState {
    /// Indices of launchable types (offering available, compatible with the pool).
    pub(super) types: Arc<[usize]>,
    /// Allocatable of every instance type of the pool, by index.
    pub(super) allocatable: Arc<[Resources]>,
    /// Whether each instance type is exotic (GPU, accelerator, metal), by index.
    pub(super) exotic: Arc<[bool]>,
    /// The pool's requirements (id in the round's [`RequirementTable`]).
    pub(super) requirements: usize,
    /// Requests of the DaemonSets every launchable type runs: each new claim carries them.
    pub(super) daemon: Resources,
    /// Host ports the DaemonSets' pods bind on the pool's new nodes.
    pub(super) daemon_ports: Vec<HostPort>,
    /// Per instance type, by index, the requests of the DaemonSets only some types run (not
    /// in `daemon`; already taken off `allocatable`).
    pub(super) daemon_extra: Arc<[Resources]>,
    /// Limit headroom, `None` where unlimited.
    pub(super) headroom: [Option<i64>; crate::model::resources::RESOURCE_COUNT],
    pub(super) nodes_left: Option<i64>,
    /// The resources any of the pool's types has (capacity or allocatable), so maxima over
    /// its types skip the rest.
    pub(super) resources: Arc<[usize]>,
    /// Per type, by index, its allocatable and capacity of the [`SMALL`] resources: placing a
    /// pod passes over hundreds of types, and these are a fifth of the memory to read.
    pub(super) small: Arc<[Small]>,
    /// Whether no type has any resource outside the [`SMALL`] ones.
    pub(super) only_small: bool,
}

/// CPU, memory, pods and ephemeral storage: the resources most types and pods have.
pub(super) const SMALL: usize = 4;

/// One type's allocatable and capacity of the [`SMALL`] resources.
#[derive(Clone, Copy)]
pub(super) struct Small {
    pub(super) allocatable: [i64; SMALL],
    pub(super) capacity: [i64; SMALL],
}

impl PoolState {
    /// Whether the pool has no resource limits (every type is within its headroom).
    pub(super) fn unlimited(&self) -> bool {
        self.headroom.iter().all(Option::is_none)
    }

    /// The state of NodePool `pool` at the start of a round; `requirements` is the id of
    /// its requirements in the round's table.
    pub(super) fn new(
        pool: &NodePoolTemplate,
        daemonsets: &[Pod],
        requirements: usize,
    ) -> PoolState {
        let types: Vec<usize> = pool
            .instance_types
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                it.requirements.compatible(&pool.requirements).is_ok()
                    && it.cheapest_offering(&pool.requirements).is_some()
            })
            .map(|(i, _)| i)
            .collect();
        let daemons = PoolDaemons::of(pool, daemonsets);
        let overhead = daemons.overhead(pool, &types);
        let mut headroom = [None; crate::model::resources::RESOURCE_COUNT];
        for (r, limit) in &pool.limits.resources {
            headroom[*r as usize] = Some(limit - pool.usage.get(*r));
        }
        let allocatable: Vec<Resources> = pool
            .instance_types
            .iter()
            .zip(&overhead.extra)
            .map(|(it, extra)| it.allocatable().sub(extra).max(&Resources::ZERO))
            .collect();
        let resources: Arc<[usize]> = (0..crate::model::resources::RESOURCE_COUNT)
            .filter(|r| pool.instance_types.iter().any(|it| it.capacity.0[*r] != 0))
            .collect();
        PoolState {
            types: types.into(),
            small: allocatable
                .iter()
                .zip(&pool.instance_types)
                .map(|(a, it)| Small {
                    allocatable: std::array::from_fn(|r| a.0[r]),
                    capacity: std::array::from_fn(|r| it.capacity.0[r]),
                })
                .collect(),
            only_small: resources.iter().all(|r| *r < SMALL),
            resources,
            allocatable: allocatable.into(),
            exotic: pool
                .instance_types
                .iter()
                .map(|it| it.is_exotic())
                .collect(),
            requirements,
            daemon: overhead.common,
            daemon_ports: overhead.ports,
            daemon_extra: overhead.extra.into(),
            headroom,
            nodes_left: pool.limits.nodes.map(|n| n - pool.node_count),
        }
    }
}

/// The DaemonSets whose pods would run on some new node of a pool, each with the
/// node-affinity alternatives of its pod the pool's template admits.
pub(super) struct PoolDaemons<'a>(Vec<(&'a Pod, Vec<Requirements>)>);

/// What a pool's DaemonSets hold on its new nodes (see the module doc).
pub(super) struct DaemonOverhead {
    /// Requests of those every launchable type runs.
    pub(super) common: Resources,
    /// Per instance type, by index, requests of those only some launchable types run.
    pub(super) extra: Vec<Resources>,
    /// Host ports of those any launchable type runs.
    pub(super) ports: Vec<HostPort>,
}

impl<'a> PoolDaemons<'a> {
    /// The DaemonSets of `daemonsets` that tolerate the pool's taints and that its template
    /// admits.
    pub(super) fn of(pool: &NodePoolTemplate, daemonsets: &'a [Pod]) -> Self {
        PoolDaemons(
            daemonsets
                .iter()
                .filter(|ds| untolerated(&pool.taints, &ds.tolerations).is_none())
                .map(|ds| {
                    let admitted = ds
                        .requirement_alternatives()
                        .into_iter()
                        .filter(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
                        .collect::<Vec<_>>();
                    (ds, admitted)
                })
                .filter(|(_, admitted)| !admitted.is_empty())
                .collect(),
        )
    }

    /// Whether DaemonSet `alternatives` run on nodes of instance type `it`.
    fn run_on(alternatives: &[Requirements], it: &InstanceType) -> bool {
        alternatives
            .iter()
            .any(|alt| it.requirements.compatible(alt).is_ok())
    }

    /// Summed requests of the DaemonSets that run on `it`.
    pub(super) fn requests_on(&self, it: &InstanceType) -> Resources {
        self.0
            .iter()
            .filter(|(_, alternatives)| Self::run_on(alternatives, it))
            .fold(Resources::ZERO, |acc, (ds, _)| acc.add(&ds.requests))
    }

    /// Their overhead on the pool's new nodes, `launchable` being the indices of the types
    /// the pool may launch.
    pub(super) fn overhead(&self, pool: &NodePoolTemplate, launchable: &[usize]) -> DaemonOverhead {
        let mut out = DaemonOverhead {
            common: Resources::ZERO,
            extra: vec![Resources::ZERO; pool.instance_types.len()],
            ports: Vec::new(),
        };
        for (ds, alternatives) in &self.0 {
            let runs: Vec<bool> = pool
                .instance_types
                .iter()
                .map(|it| Self::run_on(alternatives, it))
                .collect();
            // Without launchable types nothing is planned; every admitted DaemonSet counts.
            let everywhere = launchable.iter().all(|&i| runs[i]);
            if everywhere {
                out.common = out.common.add(&ds.requests);
            } else {
                for (extra, _) in out.extra.iter_mut().zip(&runs).filter(|(_, on)| **on) {
                    *extra = extra.add(&ds.requests);
                }
            }
            if everywhere || launchable.iter().any(|&i| runs[i]) {
                out.ports.extend(ds.host_ports.iter().cloned());
            }
        }
        out.ports.sort();
        out.ports.dedup();
        out
    }
}
