//! The recorded scheduling rounds of a journal, for `journal cost`, `verify` and `export`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use karpenter_core::events::{DomainEvent, NodeClaimPlan, RoundRecord};
use karpenter_core::model::InstanceType;
use karpenter_journal::Journal;

/// The recorded scheduling rounds, the catalogs their inputs refer to, and the NodeClaims each
/// planned.
pub(super) struct Rounds {
    pub(super) catalogs: BTreeMap<String, Vec<Arc<InstanceType>>>,
    pub(super) rounds: Vec<RoundRecord>,
    /// NodeClaims each round planned (disruption replacements left out).
    pub(super) plans: BTreeMap<u64, Vec<NodeClaimPlan>>,
    /// Disruption commands' replacements, by name.
    pub(super) replacements: BTreeMap<String, NodeClaimPlan>,
}

/// [`Rounds`] of `journal`.
pub(super) fn rounds_of(journal: &Journal<DomainEvent>) -> anyhow::Result<Rounds> {
    let mut out = Rounds {
        catalogs: BTreeMap::new(),
        rounds: Vec::new(),
        plans: BTreeMap::new(),
        replacements: BTreeMap::new(),
    };
    let mut replacing = BTreeSet::new();
    for envelope in journal.read_from(0) {
        match envelope?.event {
            DomainEvent::InstanceTypesObserved {
                digest,
                instance_types,
            } => {
                out.catalogs.insert(digest, instance_types);
            }
            DomainEvent::RoundCompleted(r) => out.rounds.push(*r),
            // A command's replacements are recorded right after it.
            DomainEvent::DisruptionDecided(r) => replacing.extend(r.replacements),
            DomainEvent::NodeClaimPlanned(p) if replacing.contains(&p.nodeclaim) => {
                out.replacements.insert(p.nodeclaim.clone(), *p);
            }
            DomainEvent::NodeClaimPlanned(p) => out.plans.entry(p.round).or_default().push(*p),
            _ => {}
        }
    }
    Ok(out)
}
