//! Garbage collection between the cloud and the NodeClaims, both ways, decided one pass at a
//! time by [`plan`]:
//! - an instance tagged for this cluster that no NodeClaim owns (a crash between the cloud
//!   call and the journal, an actor that failed) is terminated;
//! - a NodeClaim whose instance is terminated or gone is told so and finalizes, instead of
//!   waiting for a node that will never come.
//!
//! # Why it is careful
//! A listing of the cloud is not the truth about an instance launched a moment ago. On EC2,
//! `DescribeInstances` is eventually consistent right after `CreateFleet`: a new instance may
//! be listed without its tags or its launch time, or not at all, for a while; and an instance
//! of a shared CreateFleet call carries its NodeClaim's tag only once the `CreateTags` after
//! it is done. Terminating such an instance loses a node and its pods for nothing, so an
//! instance is collected only when all of these hold:
//! - its launch time is known and older than the grace period (unknown is never "old");
//! - its NodeClaim tag is present and names no owner: neither a NodeClaim whose actor runs
//!   nor one whose launch intent (`LaunchRequested`) the journal holds open, and no live
//!   NodeClaim holds its id;
//! - it was seen collectable, with the same tag, on the previous pass too ([`GcMemory`]).
//!
//! An instance whose NodeClaim tag never arrives (its `CreateTags` failed and so did the
//! termination after it) is therefore never collected here; it is reported in
//! [`GcPlan::untagged`] once past the grace period, and a restart's recovery, which knows
//! every launch the journal recorded, terminates it.
//!
//! The other way is as careful: a NodeClaim whose instance the cloud no longer knows is
//! finalized only when that was so on two consecutive passes and its instance is not younger
//! than the grace period; an instance the listing shows terminated or shutting down ends its
//! NodeClaim at once (a listing does not show that of a running instance).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::ports::{Instance, InstanceState};

/// A NodeClaim that has an instance (launched and not yet terminating).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveClaim {
    /// Name.
    pub name: String,
    /// Its instance.
    pub instance_id: String,
    /// When its instance launched (ms since the Unix epoch), when known.
    pub launched_at_ms: Option<i64>,
}

/// What one pass is given.
#[derive(Debug, Clone, Copy)]
pub struct GcInput<'a> {
    /// What the cloud lists as this cluster's instances.
    pub instances: &'a [Instance],
    /// NodeClaims that own their instances: those whose actors run and those whose launch
    /// intent is open in the journal. Gathered after the listing, so an instance listed was
    /// launched by a NodeClaim already counted.
    pub owners: &'a BTreeSet<String>,
    /// NodeClaims with an instance.
    pub claims: &'a [LiveClaim],
    /// Instances of `claims` the cloud says do not exist (asked one by one when not listed).
    pub gone: &'a BTreeSet<String>,
    /// Now, on the clock the cloud's launch times are on (ms since the Unix epoch).
    pub now_ms: i64,
    /// Instances younger than this are never collected.
    pub grace: Duration,
}

/// What a pass remembers for the next: a thing is acted on only when two consecutive passes
/// saw it so.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcMemory {
    /// Instances that were collectable: `(instance id, nodeclaim tag)`.
    pub collectable: BTreeSet<(String, String)>,
    /// NodeClaims whose instance the cloud did not know: `(nodeclaim, instance id)`.
    pub missing: BTreeSet<(String, String)>,
}

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GcPlan {
    /// Instances to terminate: `(instance id, nodeclaim tag)`.
    pub leaked: Vec<(String, String)>,
    /// NodeClaims whose instance is terminated or gone: `(nodeclaim, instance id)`.
    pub orphaned: Vec<(String, String)>,
    /// Running instances past the grace period that carry no NodeClaim tag and that no live
    /// NodeClaim holds: never collected here, reported so someone looks.
    pub untagged: Vec<String>,
    /// What the next pass is to confirm.
    pub memory: GcMemory,
}

/// Whether `instance` launched at least `grace` before `now_ms`; unknown is not.
fn older_than(launched_at_ms: Option<i64>, now_ms: i64, grace: Duration) -> bool {
    let grace_ms = i64::try_from(grace.as_millis()).unwrap_or(i64::MAX);
    launched_at_ms.is_some_and(|at| now_ms.saturating_sub(at) >= grace_ms)
}

/// Decides a pass from what it was given and what the previous pass saw.
pub fn plan(input: &GcInput<'_>, previous: &GcMemory) -> GcPlan {
    let mut out = GcPlan::default();
    let held: BTreeSet<&str> = input
        .claims
        .iter()
        .map(|c| c.instance_id.as_str())
        .collect();
    for instance in input.instances {
        if instance.state != InstanceState::Running
            || held.contains(instance.id.as_str())
            || !older_than(instance.launched_at_ms, input.now_ms, input.grace)
        {
            continue;
        }
        if instance.nodeclaim.is_empty() {
            out.untagged.push(instance.id.clone());
            continue;
        }
        if input.owners.contains(&instance.nodeclaim) {
            continue;
        }
        let seen = (instance.id.clone(), instance.nodeclaim.clone());
        if previous.collectable.contains(&seen) {
            out.leaked.push(seen.clone());
        }
        out.memory.collectable.insert(seen);
    }
    for claim in input.claims {
        let listed = input.instances.iter().find(|i| i.id == claim.instance_id);
        let seen = (claim.name.clone(), claim.instance_id.clone());
        match listed {
            Some(instance) if instance.state != InstanceState::Running => {
                out.orphaned.push(seen);
            }
            Some(_) => {}
            None if input.gone.contains(&claim.instance_id) => {
                let young = claim
                    .launched_at_ms
                    .is_some_and(|_| !older_than(claim.launched_at_ms, input.now_ms, input.grace));
                if young {
                    continue;
                }
                if previous.missing.contains(&seen) {
                    out.orphaned.push(seen.clone());
                }
                out.memory.missing.insert(seen);
            }
            None => {}
        }
    }
    out
}

#[cfg(test)]
mod tests;
