//! Consolidation of nodes that still run pods (reason `Underutilized`): which nodes it may
//! take ([`eligible`]) and what a scheduling simulation of removing some of them allows
//! ([`decide`]), as upstream decides a command:
//!
//! - every moved pod fits on the rest of the cluster → **delete** the candidates;
//! - they need exactly one new NodeClaim → **replace**, keeping only instance types strictly
//!   cheaper than the candidates together (and, when several candidates go, than the dearest
//!   candidate of a type the replacement could be), as long as minValues still holds. A
//!   replacement that may be spot or on-demand and was priced at spot is pinned to spot: the
//!   price filter assumed the cheapest offering, and a failed spot launch must not become a
//!   dearer on-demand one. (Upstream pins even when no cheaper type has a spot offering, so
//!   that launch can only fail; here a replacement priced at on-demand stays as it is.)
//! - all-spot candidates replaced by spot (**spot-to-spot**) only behind the
//!   `SpotToSpotConsolidation` setting, and for one candidate only with at least
//!   [`SPOT_TO_SPOT_MIN_OPTIONS`] cheaper spot types, of which the cheapest 15 are launched
//!   (up to [`SPOT_TO_SPOT_MAX_OPTIONS`] when minValues needs more);
//! - more new NodeClaims → not a consolidation.

use std::collections::BTreeMap;

use super::condition::Consolidatable;
use crate::api::nodepool::ConsolidationPolicy;
use crate::disruption::simulation::Outcome;
use crate::disruption::{NodeSnapshot, Snapshot};
use crate::model::{CapacityType, InstanceType, Requirement};
use crate::scheduling::{InstanceTypeOption, PlannedNodeClaim, SchedulingInput};
use crate::vocab::labels;

/// Spot-to-spot replaces one node only when at least this many cheaper spot types exist, and
/// launches from the cheapest this many: a replacement with fewer choices would soon be
/// interrupted and replaced again, walking down the price list.
pub const SPOT_TO_SPOT_MIN_OPTIONS: usize = 15;

/// With minValues, spot-to-spot launches from up to this many types.
pub const SPOT_TO_SPOT_MAX_OPTIONS: usize = 100;

/// What consolidation may do beyond upstream's defaults.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// The `SpotToSpotConsolidation` feature gate.
    pub spot_to_spot: bool,
}

/// Why a node is not a consolidation candidate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotEligible {
    /// Not launched, or launched without a known type, zone or capacity type.
    #[error("its instance type, zone or capacity type is not known")]
    UnknownOffering,
    /// Its NodePool is gone.
    #[error("NodePool {0} not found")]
    NoPool(String),
    /// Its NodePool only removes empty nodes.
    #[error("NodePool {0} has consolidationPolicy WhenEmpty")]
    WhenEmpty(String),
    /// Its NodePool never consolidates.
    #[error("NodePool {0} has consolidateAfter: Never")]
    Never(String),
    /// `consolidateAfter` has not passed since its last pod event or initialization.
    #[error("consolidateAfter has not passed since its last pod event")]
    NotConsolidatable,
    /// No pod would move: emptiness takes it.
    #[error("it is empty")]
    Empty,
}

/// Whether `node` may be consolidated, given its `Consolidatable` condition; the candidate
/// filter every method shares ([`crate::disruption::candidates`]) is checked besides.
pub fn eligible(
    snapshot: &Snapshot,
    node: &NodeSnapshot,
    condition: Option<Consolidatable>,
) -> Result<(), NotEligible> {
    if node.offering.is_none() {
        return Err(NotEligible::UnknownOffering);
    }
    let pool = snapshot
        .pool(&node.nodepool)
        .ok_or_else(|| NotEligible::NoPool(node.nodepool.clone()))?;
    match pool.policy {
        ConsolidationPolicy::WhenEmpty => return Err(NotEligible::WhenEmpty(pool.name.clone())),
        ConsolidationPolicy::Balanced | ConsolidationPolicy::WhenEmptyOrUnderutilized => {}
    }
    if pool.consolidate_after.is_none() {
        return Err(NotEligible::Never(pool.name.clone()));
    }
    if !condition.is_some_and(Consolidatable::is_true) {
        return Err(NotEligible::NotConsolidatable);
    }
    if node.reschedulable().next().is_none() {
        return Err(NotEligible::Empty);
    }
    Ok(())
}

/// What a consolidation command does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Removes the candidates; their pods fit on the rest of the cluster.
    Delete,
    /// Replaces them with this NodeClaim (boxed: a plan is large and most commands delete).
    Replace(Box<PlannedNodeClaim>),
}

/// A consolidation command, before budgets and validation.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidation {
    /// What it does.
    pub action: Action,
    /// $/h the candidates cost less what the replacement would (at its cheapest type).
    pub savings: f64,
}

/// Why candidates cannot be consolidated (an `Unconsolidatable` Event).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unconsolidatable {
    /// A moved pod fits nowhere.
    #[error("not all pods would schedule, {pod}: {why}")]
    PodsWouldNotSchedule {
        /// The pod.
        pod: String,
        /// Why.
        why: String,
    },
    /// Their pods need more than one new node.
    #[error("can't remove without creating {0} nodes")]
    TooManyReplacements(usize),
    /// No instance type of the replacement is cheaper.
    #[error("can't replace with a cheaper node")]
    NotCheaper,
    /// Cheaper types exist but too few to keep a minValues requirement.
    #[error("can't replace with a cheaper node: {0}")]
    MinValues(String),
    /// Spot candidates would be replaced by spot and the feature gate is off.
    #[error("SpotToSpotConsolidation is disabled, can't replace a spot node with a spot node")]
    SpotToSpotDisabled,
    /// The pods no other node has room for need a node at least as dear as the candidate
    /// (told before simulating, by [`super::prospect`]).
    #[error("{}", no_cheaper_room(*floor, *price))]
    NoCheaperRoom {
        /// The least a node holding them costs ($/h); infinite when no type holds them.
        floor: f64,
        /// The candidate's price ($/h).
        price: f64,
    },
    /// Its NodePool is Balanced and what the move saves does not outweigh what it disrupts.
    #[error("Balanced consolidation: {0}")]
    NotWorthIt(crate::disruption::balanced::Score),
    /// Too few cheaper spot types for a single spot node.
    #[error(
        "SpotToSpotConsolidation requires {SPOT_TO_SPOT_MIN_OPTIONS} cheaper spot instance types than the candidate, found {0}"
    )]
    TooFewSpotOptions(usize),
}

fn no_cheaper_room(floor: f64, price: f64) -> String {
    if floor.is_finite() {
        format!(
            "can't replace with a cheaper node: the pods no other node has room for need ${floor:.4}/h, this node costs ${price:.4}/h"
        )
    } else {
        "not all pods would schedule: no other node has room and no instance type holds them"
            .to_owned()
    }
}

/// The command a simulation of removing `candidates` allows. `base` is the round the
/// simulation ran from (its NodePools' instance types price a pinned replacement).
pub fn decide(
    candidates: &[&NodeSnapshot],
    outcome: Outcome,
    base: &SchedulingInput,
    settings: Settings,
) -> Result<Consolidation, Unconsolidatable> {
    let mut replacements = match outcome {
        Outcome::Blocked(pods) => {
            let (pod, why) = pods.into_iter().next().unwrap_or_default();
            return Err(Unconsolidatable::PodsWouldNotSchedule { pod, why });
        }
        Outcome::Fits { replacements } => replacements,
    };
    let price = crate::model::total_price(candidates.iter().map(|c| c.price));
    let claim = match replacements.len() {
        0 => {
            return Ok(Consolidation {
                action: Action::Delete,
                savings: price,
            });
        }
        1 => replacements.remove(0),
        n => return Err(Unconsolidatable::TooManyReplacements(n)),
    };
    let types = pool_types(base, &claim.nodepool);
    let all_spot = candidates
        .iter()
        .all(|c| capacity_type(c) == Some(CapacityType::Spot));
    let limit = same_type_limit(candidates, &claim).map_or(price, |l| l.min(price));
    let claim = if all_spot && allows(&claim, CapacityType::Spot) {
        spot_to_spot(candidates.len(), claim, &types, limit, settings)?
    } else {
        let mut claim = cheaper(claim, limit, &types)?;
        let spot_priced = claim
            .instance_types
            .iter()
            .any(|o| o.capacity_type == CapacityType::Spot);
        if spot_priced
            && allows(&claim, CapacityType::Spot)
            && allows(&claim, CapacityType::OnDemand)
        {
            claim = cheaper(pinned(claim, CapacityType::Spot, &types), limit, &types)?;
        }
        claim
    };
    let cost = claim.instance_types.first().map_or(0.0, |o| o.price);
    Ok(Consolidation {
        savings: price - cost,
        action: Action::Replace(Box::new(claim)),
    })
}

fn capacity_type(node: &NodeSnapshot) -> Option<CapacityType> {
    node.offering.as_ref().map(|o| o.capacity_type)
}

/// Whether `claim`'s requirements allow capacity type `ct`.
fn allows(claim: &PlannedNodeClaim, ct: CapacityType) -> bool {
    claim
        .requirements
        .get(labels::CAPACITY_TYPE)
        .is_none_or(|r| r.has(ct.as_str()))
}

/// The instance types NodePool `pool` may launch, by name.
fn pool_types<'a>(base: &'a SchedulingInput, pool: &str) -> BTreeMap<&'a str, &'a InstanceType> {
    base.nodepools
        .iter()
        .filter(|p| p.name == pool)
        .flat_map(|p| p.instance_types.iter())
        .map(|t| (t.name.as_str(), t.as_ref()))
        .collect()
}

/// When several candidates go, the replacement must also be cheaper than the dearest
/// candidate whose type is among its own: replacing nodes by one of their own kind at the
/// same price only churns.
fn same_type_limit(candidates: &[&NodeSnapshot], claim: &PlannedNodeClaim) -> Option<f64> {
    if candidates.len() < 2 {
        return None;
    }
    candidates
        .iter()
        .filter(|c| {
            c.offering.as_ref().is_some_and(|o| {
                claim
                    .instance_types
                    .iter()
                    .any(|t| t.name.as_str() == o.instance_type)
            })
        })
        .map(|c| c.price)
        .reduce(f64::max)
}

/// `claim` with only its types strictly cheaper than `limit`, or why none remain.
fn cheaper(
    mut claim: PlannedNodeClaim,
    limit: f64,
    types: &BTreeMap<&str, &InstanceType>,
) -> Result<PlannedNodeClaim, Unconsolidatable> {
    claim.instance_types.retain(|o| o.price < limit);
    if claim.instance_types.is_empty() {
        return Err(Unconsolidatable::NotCheaper);
    }
    min_values(&claim, &claim.instance_types, types)
        .map_err(|e| Unconsolidatable::MinValues(e.to_string()))?;
    Ok(claim)
}

/// `claim` limited to capacity type `ct`, each type priced at its cheapest offering of that
/// capacity type (types without one dropped), cheapest first.
fn pinned(
    mut claim: PlannedNodeClaim,
    ct: CapacityType,
    types: &BTreeMap<&str, &InstanceType>,
) -> PlannedNodeClaim {
    claim
        .requirements
        .add(labels::CAPACITY_TYPE, Requirement::is_in([ct.as_str()]));
    let requirements = &claim.requirements;
    let mut options: Vec<InstanceTypeOption> = claim
        .instance_types
        .iter()
        .filter_map(|o| {
            let offering = types
                .get(o.name.as_str())?
                .cheapest_offering(requirements)?;
            Some(InstanceTypeOption::at(o.name, offering))
        })
        .collect();
    InstanceTypeOption::cheapest_first(&mut options);
    claim.instance_types = options;
    claim
}

fn spot_to_spot(
    candidates: usize,
    claim: PlannedNodeClaim,
    types: &BTreeMap<&str, &InstanceType>,
    limit: f64,
    settings: Settings,
) -> Result<PlannedNodeClaim, Unconsolidatable> {
    if !settings.spot_to_spot {
        return Err(Unconsolidatable::SpotToSpotDisabled);
    }
    let mut claim = cheaper(pinned(claim, CapacityType::Spot, types), limit, types)?;
    if candidates > 1 {
        return Ok(claim);
    }
    let found = claim.instance_types.len();
    if found < SPOT_TO_SPOT_MIN_OPTIONS {
        return Err(Unconsolidatable::TooFewSpotOptions(found));
    }
    // The cheapest 15, or with minValues the fewest cheapest that keep it (up to 100).
    let keep = (SPOT_TO_SPOT_MIN_OPTIONS..=found.min(SPOT_TO_SPOT_MAX_OPTIONS))
        .find(|&n| min_values(&claim, &claim.instance_types[..n], types).is_ok())
        .ok_or_else(|| {
            Unconsolidatable::MinValues(format!(
                "minValues needs more than the cheapest {SPOT_TO_SPOT_MAX_OPTIONS} spot types"
            ))
        })?;
    claim.instance_types.truncate(keep);
    Ok(claim)
}

/// Whether `options` keep the distinct values each of `claim`'s minValues requirements asks
/// for.
fn min_values(
    claim: &PlannedNodeClaim,
    options: &[InstanceTypeOption],
    types: &BTreeMap<&str, &InstanceType>,
) -> Result<(), crate::model::requirements::MinValuesNotMet> {
    claim.requirements.min_values_met(
        options
            .iter()
            .filter_map(|o| types.get(o.name.as_str()))
            .map(|t| &t.labels),
    )
}

#[cfg(test)]
mod tests;
