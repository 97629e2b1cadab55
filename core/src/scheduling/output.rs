//! What a round decides: bindings to existing nodes, planned NodeClaims with their launch
//! options, and the pods left pending with their reasons.

use std::collections::HashMap;
use std::sync::Arc;

use crate::model::{InstanceType, Requirements, Resources};

use super::SchedulingInput;
use super::claims::ClaimState;
use super::pools::PoolState;
use super::table::RequirementTable;

/// An instance type a planned NodeClaim may launch as, with its cheapest allowed offering.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceTypeOption {
    /// Instance type name (shared: a round lists thousands of options).
    pub name: Arc<str>,
    /// USD/hour of the cheapest offering the NodeClaim's requirements allow.
    pub price: f64,
    /// Zone of that offering.
    pub zone: Arc<str>,
    /// Capacity type of that offering.
    pub capacity_type: crate::model::CapacityType,
}

impl InstanceTypeOption {
    /// Instance type `name` launched at `offering`.
    pub fn at(name: Arc<str>, offering: &crate::model::instance_type::Offering) -> Self {
        InstanceTypeOption {
            name,
            price: offering.price,
            zone: offering.zone.as_str().into(),
            capacity_type: offering.capacity_type,
        }
    }

    /// Sorts `options` cheapest first, then by name.
    pub fn cheapest_first(options: &mut [InstanceTypeOption]) {
        options.sort_by(|a, b| {
            a.price
                .total_cmp(&b.price)
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}

/// A NodeClaim the round wants launched.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedNodeClaim {
    /// The NodePool it belongs to.
    pub nodepool: String,
    /// Pool requirements narrowed by its pods.
    pub requirements: Requirements,
    /// Every instance type that fits, cheapest first.
    pub instance_types: Vec<InstanceTypeOption>,
    /// UIDs of the pods planned onto it.
    pub pods: Vec<String>,
    /// Requests of those pods plus daemonset overhead.
    pub requests: Resources,
    /// Launched with fewer distinct values than a requirement's minValues asks for
    /// ([`MinValuesPolicy::BestEffort`]); its NodeClaim carries
    /// `karpenter.sh/nodeclaim-min-values-relaxed: "true"`.
    pub min_values_relaxed: bool,
}

impl SchedulingResult {
    /// $/h of the new NodeClaims, each at its cheapest option (the offering it would launch).
    pub fn new_capacity_cost(&self) -> f64 {
        crate::model::total_price(
            self.new_claims
                .iter()
                .filter_map(|c| c.instance_types.first())
                .map(|o| o.price),
        )
    }
}

/// A pod bound to an existing node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Pod UID.
    pub pod: String,
    /// Node name.
    pub node: String,
}

/// A pod no node can take, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unschedulable {
    /// Pod UID.
    pub pod: String,
    /// One reason per NodePool, like kube-scheduler's FailedScheduling messages.
    pub reason: String,
}

/// What a round decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SchedulingResult {
    /// Pods placed on existing nodes.
    pub bindings: Vec<Binding>,
    /// NodeClaims to create.
    pub new_claims: Vec<PlannedNodeClaim>,
    /// Pods left pending.
    pub unschedulable: Vec<Unschedulable>,
}

/// Instance type and zone names shared by the options of every planned NodeClaim, looked up
/// by position (a round lists millions of options on a full catalog; hashing each name was a
/// third of such a round).
#[derive(Default)]
struct SharedNames {
    /// By NodePool and catalog position: the type's name and each offering's zone.
    pub(super) types: Vec<Vec<Option<TypeNames>>>,
    pub(super) zones: HashMap<String, Arc<str>>,
}

/// An instance type's name and the zones of its offerings, in offering order.
type TypeNames = (Arc<str>, Vec<Arc<str>>);

impl SharedNames {
    fn of(&mut self, pool: usize, index: usize, it: &InstanceType) -> &TypeNames {
        if self.types.len() <= pool {
            self.types.resize_with(pool + 1, Vec::new);
        }
        let of_pool = &mut self.types[pool];
        if of_pool.len() <= index {
            of_pool.resize_with(index + 1, || None);
        }
        let zones = &mut self.zones;
        of_pool[index].get_or_insert_with(|| {
            let offering_zones = it
                .offerings
                .iter()
                .map(|o| {
                    zones
                        .entry(o.zone.clone())
                        .or_insert_with(|| o.zone.as_str().into())
                        .clone()
                })
                .collect();
            (it.name.as_str().into(), offering_zones)
        })
    }
}

/// The planned NodeClaims that kept pods, as the round hands them out.
pub(super) fn planned_claims(
    input: &SchedulingInput,
    table: &RequirementTable,
    pool_states: &[PoolState],
    claims: Vec<ClaimState>,
) -> Vec<PlannedNodeClaim> {
    let mut names = SharedNames::default();
    claims
        .into_iter()
        .filter(|claim| !claim.pods.is_empty())
        .map(|claim| {
            let pool = &input.nodepools[claim.pool];
            // `types` is already cheapest first (ties by catalog position).
            let options: Vec<InstanceTypeOption> = claim
                .types
                .iter()
                .map(|t| {
                    let it = &pool.instance_types[t.index];
                    let (name, zones) = names.of(claim.pool, t.index, it);
                    InstanceTypeOption {
                        name: name.clone(),
                        price: t.price,
                        zone: zones[t.offering].clone(),
                        capacity_type: it.offerings[t.offering].capacity_type,
                    }
                })
                .collect();
            PlannedNodeClaim {
                nodepool: pool.name.clone(),
                requirements: table.get(claim.requirements).clone(),
                instance_types: options,
                pods: claim
                    .pods
                    .iter()
                    .map(|p| input.pods[*p].uid.clone())
                    .collect(),
                // With the DaemonSets only some types run, as the cheapest type runs them.
                requests: claim.types.first().map_or(claim.requests, |t| {
                    claim
                        .requests
                        .add(&pool_states[claim.pool].daemon_extra[t.index])
                }),
                min_values_relaxed: claim.min_values_relaxed,
            }
        })
        .collect()
}
