//! What a round decides: bindings to existing nodes, planned NodeClaims with their launch
//! options, and the pods left pending with their reasons.

use ustr::Ustr;

use crate::model::{Requirements, Resources};

use super::SchedulingInput;
use super::claims::ClaimState;
use super::pools::{PoolState, Priced};
use super::table::{GrownFit, RequirementTable, fits_small};

/// An instance type a planned NodeClaim may launch as, with its cheapest allowed offering.
/// Copied, not shared: a round lists up to millions of options, and its names are interned.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct InstanceTypeOption {
    /// Instance type name.
    pub name: Ustr,
    /// USD/hour of the cheapest offering the NodeClaim's requirements allow.
    pub price: f64,
    /// Zone of that offering.
    pub zone: Ustr,
    /// Capacity type of that offering.
    pub capacity_type: crate::model::CapacityType,
}

impl InstanceTypeOption {
    /// Instance type `name` launched at `offering`.
    pub fn at(name: Ustr, offering: &crate::model::instance_type::Offering) -> Self {
        InstanceTypeOption {
            name,
            price: offering.price,
            zone: Ustr::from(&offering.zone),
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

/// The planned NodeClaims that kept pods, as the round hands them out.
pub(super) fn planned_claims(
    input: &SchedulingInput,
    table: &RequirementTable,
    pool_states: &[PoolState],
    claims: Vec<ClaimState>,
) -> Vec<PlannedNodeClaim> {
    claims
        .into_iter()
        .filter(|claim| !claim.pods.is_empty())
        .map(|claim| {
            let pool = &input.nodepools[claim.pool];
            let state = &pool_states[claim.pool];
            // `types` is already cheapest first (ties by catalog position); those pods that
            // joined later left without room are left out (see `ClaimTypes`).
            let fit = GrownFit::new(&Resources::ZERO, &claim.requests);
            // Each option is a copy of its offering's, priced as the claim's requirements price it.
            let of_pool = state.catalog.options();
            let (start, templates) = (of_pool.start.as_slice(), of_pool.options.as_slice());
            let option = |t: &Priced| InstanceTypeOption {
                price: t.price,
                ..templates[start[t.index] + t.offering]
            };
            let mut options = Vec::with_capacity(claim.types.len());
            match fit.small_fully(state) {
                Some(small) => options.extend(
                    claim
                        .types
                        .iter()
                        .filter(|t| fits_small(small, &state.small[t.index].allocatable))
                        .map(option),
                ),
                None => options.extend(
                    claim
                        .types
                        .iter()
                        .filter(|t| fit.requests.fits_in(&state.allocatable[t.index]))
                        .map(option),
                ),
            }
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
