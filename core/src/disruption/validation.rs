//! A consolidation command is not started when it is decided: it waits
//! [`VALIDATION_DELAY`] and is checked again against what the cluster is then, as
//! upstream's validation (`commandValidationDelay`): pods that were on their way (a
//! deployment's rollout, a scale-up) would otherwise land on nodes just marked, or leave a
//! replacement that no longer saves anything. The command is still valid when
//!
//! - every candidate is still a consolidation candidate (eligible, passing the shared
//!   filter, not expiring, not nominated);
//! - its pools' `Underutilized` budgets still let all of its candidates go;
//! - a new simulation gives the same kind of command: a delete when it was a delete, a
//!   replacement whose instance types are among the ones decided when it was a replace.
//!
//! Otherwise it is given up with the reason (a `ConsolidationRejected` Event).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::budgets;
use super::candidates;
use super::consolidation::closed;
use super::consolidation::command::{self, Action, Settings, Unconsolidatable};
use super::consolidation::condition;
use super::decision::{Decision, leaving};
use super::pass::{expired, pool_counts};
use super::simulation::{self, Rest};
use super::{NodeSnapshot, Snapshot};
use crate::scheduling::{PoolCache, PreparedPools, SchedulingInput};

/// How long a consolidation command waits before it is checked again (upstream's 15 s).
pub const VALIDATION_DELAY: Duration = Duration::from_secs(15);

/// Why a consolidation command was given up at validation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    /// A candidate's NodeClaim is gone.
    #[error("candidate {0} is gone")]
    Gone(String),
    /// A candidate is no longer one.
    #[error("candidate {nodeclaim} is no longer a consolidation candidate: {why}")]
    NotCandidate {
        /// NodeClaim.
        nodeclaim: String,
        /// Why.
        why: String,
    },
    /// A pool's budget no longer lets all of its candidates go.
    #[error(
        "NodePool {pool}'s Underutilized budgets now allow {allowed} of its {wanted} candidates"
    )]
    Budget {
        /// NodePool.
        pool: String,
        /// Nodes its budgets allow now.
        allowed: usize,
        /// Candidates of it.
        wanted: usize,
    },
    /// The scheduler's next round could not be had, so nothing could be simulated.
    #[error("no scheduling round to simulate against")]
    NoRound,
    /// The new simulation allows no command.
    #[error("{0}")]
    Unconsolidatable(Unconsolidatable),
    /// The new simulation allows a different kind of command.
    #[error("the scheduling simulation changed: {0}")]
    Changed(String),
}

/// Checks `decision` again against `snapshot` and `base` (what the scheduler's next round
/// would see now).
pub fn validate(
    decision: &Decision,
    snapshot: &Snapshot,
    base: Option<&SchedulingInput>,
) -> Result<(), Rejected> {
    validate_cached(decision, snapshot, base, None)
}

/// [`validate`], its simulation's NodePools prepared from `cache`'s catalogs where it has
/// them.
pub fn validate_cached(
    decision: &Decision,
    snapshot: &Snapshot,
    base: Option<&SchedulingInput>,
    cache: Option<&PoolCache>,
) -> Result<(), Rejected> {
    let expiring_names = expired(snapshot);
    let expiring: BTreeSet<&str> = expiring_names.iter().map(String::as_str).collect();
    let mut nodes: Vec<&NodeSnapshot> = Vec::new();
    for name in &decision.candidates {
        let node = snapshot
            .nodes
            .iter()
            .find(|n| &n.nodeclaim == name)
            .ok_or_else(|| Rejected::Gone(name.clone()))?;
        let not = |why: String| Rejected::NotCandidate {
            nodeclaim: name.clone(),
            why,
        };
        if expiring.contains(name.as_str()) {
            return Err(not("it expired".into()));
        }
        let condition = condition::of(snapshot, node);
        command::eligible(snapshot, node, Some(condition)).map_err(|e| not(e.to_string()))?;
        candidates::check(snapshot, node, decision.method).map_err(|e| not(e.to_string()))?;
        nodes.push(node);
    }
    let mut wanted: BTreeMap<&str, usize> = BTreeMap::new();
    for node in &nodes {
        *wanted.entry(node.nodepool.as_str()).or_default() += 1;
    }
    let allowed = budgets::mapping(
        snapshot
            .pools
            .iter()
            .map(|p| (p.name.as_str(), p.budgets.as_slice())),
        &pool_counts(snapshot),
        decision.method.reason(),
        snapshot.now_ms,
    );
    for (pool, wanted) in wanted {
        let allowed = allowed.get(pool).copied().unwrap_or(0);
        if wanted > allowed {
            return Err(Rejected::Budget {
                pool: pool.to_owned(),
                allowed,
                wanted,
            });
        }
    }
    let base = base.ok_or(Rejected::NoRound)?;
    let leaving = leaving(snapshot, &expiring);
    let closed = closed(snapshot);
    let pools = PreparedPools::new(base, cache);
    let rest = Rest {
        leaving: &leaving,
        closed: &closed,
        pools: Some(&pools),
    };
    let simulation = simulation::run(base, &nodes, rest);
    let settings = Settings {
        spot_to_spot: snapshot.spot_to_spot,
    };
    let now = command::decide(&nodes, simulation.outcome(), base, settings)
        .map_err(Rejected::Unconsolidatable)?;
    match (&now.action, decision.replacements.as_slice()) {
        (Action::Delete, []) => Ok(()),
        (Action::Replace(claim), [decided]) => {
            let options: Vec<&str> = decided
                .instance_types
                .iter()
                .map(|o| o.name.as_ref())
                .collect();
            match claim
                .instance_types
                .iter()
                .find(|o| !options.contains(&o.name.as_ref()))
            {
                Some(other) => Err(Rejected::Changed(format!(
                    "the replacement could now be {}, which was not among its instance types",
                    other.name
                ))),
                None => Ok(()),
            }
        }
        (Action::Delete, _) => Err(Rejected::Changed(
            "the candidates' pods now fit without a replacement".into(),
        )),
        (Action::Replace(_), _) => Err(Rejected::Changed(
            "the candidates' pods no longer fit without a replacement".into(),
        )),
    }
}

#[cfg(test)]
mod tests;
