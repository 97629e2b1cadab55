//! A NodePool as a round plans with it: the instance types it may launch, what each
//! allows, daemonset overhead, and how much of its limits is left.

use crate::model::taints::untolerated;
use crate::model::{Pod, Resources};

use super::NodePoolTemplate;

/// A NodePool as the round plans with it.
#[derive(Clone)]
pub(super) struct PoolState {
    /// Indices of launchable types (offering available, compatible with the pool).
    pub(super) types: Vec<usize>,
    /// Allocatable of every instance type of the pool, by index.
    pub(super) allocatable: Vec<Resources>,
    /// Whether each instance type is exotic (GPU, accelerator, metal), by index.
    pub(super) exotic: Vec<bool>,
    /// The pool's requirements (id in the round's [`RequirementTable`]).
    pub(super) requirements: usize,
    pub(super) daemon: Resources,
    /// Limit headroom, `None` where unlimited.
    pub(super) headroom: [Option<i64>; crate::model::resources::RESOURCE_COUNT],
    pub(super) nodes_left: Option<i64>,
}

impl PoolState {
    /// The state of NodePool `pool` at the start of a round; `requirements` is the id of
    /// its requirements in the round's table.
    pub(super) fn new(
        pool: &NodePoolTemplate,
        daemonsets: &[Pod],
        requirements: usize,
    ) -> PoolState {
        let types = pool
            .instance_types
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                it.requirements.compatible(&pool.requirements).is_ok()
                    && it.cheapest_offering(&pool.requirements).is_some()
            })
            .map(|(i, _)| i)
            .collect();
        let daemon = daemonsets
            .iter()
            .filter(|ds| {
                untolerated(&pool.taints, &ds.tolerations).is_none()
                    && ds
                        .requirement_alternatives()
                        .iter()
                        .any(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
            })
            .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests));
        let mut headroom = [None; crate::model::resources::RESOURCE_COUNT];
        for (r, limit) in &pool.limits.resources {
            headroom[*r as usize] = Some(limit - pool.usage.get(*r));
        }
        PoolState {
            types,
            allocatable: pool
                .instance_types
                .iter()
                .map(|it| it.allocatable())
                .collect(),
            exotic: pool
                .instance_types
                .iter()
                .map(|it| it.is_exotic())
                .collect(),
            requirements,
            daemon,
            headroom,
            nodes_left: pool.limits.nodes.map(|n| n - pool.node_count),
        }
    }
}
