//! What disruption does to a NodeClaim: its `Drifted` and `Consolidatable` conditions, the
//! mark a disruption command puts on it (and takes back), and the drain that follows.

use std::borrow::Cow;

use crate::api::NodePool;
use crate::api::nodeclaim::{condition, drift, foreign_pool_hash, nodepool_hash, stamp_pool_hash};
use crate::ports::NodeClassHash;

use super::{Call, Command, Live, Metric, Update, condition_set, info, release, start_draining};

/// The reason of a forceful disruption (node repair, upstream's `unhealthy`): the drain
/// takes the NodeClaim's terminationGracePeriod as over from the start, as upstream's
/// termination-timestamp annotation of now does, so no PodDisruptionBudget or
/// `do-not-disrupt` pod holds it.
pub const FORCEFUL_REASON: &str = "unhealthy";

/// Its drift from its pool as it is now. A NodeClaim another controller stamped (upstream's
/// hash version, or none: one taken over) is first stamped with the pool's template as it is
/// now, as upstream re-stamps its own on a hash version change: the switch itself drifts
/// nothing, and later template changes do.
pub(super) fn drifted(live: &Live, pool: &NodePool) -> Vec<Command> {
    let mut out = Vec::new();
    let mut judged = Cow::Borrowed(&live.object);
    if let Some(version) = foreign_pool_hash(&live.object) {
        let hash = nodepool_hash(&pool.spec.template);
        out.push(info(format!(
            "NodePool hash stamped by another controller (version {version}); stamping the pool's template as it is now, from which drift is judged"
        )));
        stamp_pool_hash(judged.to_mut(), &hash);
        out.push(Command::Update(Update::PoolHash(hash)));
    }
    let pool_drift = drift(&judged, pool).map(|(reason, message)| (reason.to_owned(), message));
    if pool_drift != live.pool_drift {
        out.push(Command::Update(Update::PoolDrift(pool_drift.clone())));
    }
    // The pool's reason wins: it is what upstream checks first.
    out.extend(drift_condition(
        live,
        pool_drift.as_ref().or(live.provider_drift.as_ref()),
    ));
    if matches!(judged, Cow::Owned(_))
        && live.object_exists
        && !out.contains(&Command::Call(Call::WriteObject))
    {
        out.push(Command::Call(Call::WriteObject));
    }
    out
}

/// The node class hash as it is now, stamped over another controller's (another version, or
/// none), so the class's later changes drift the NodeClaim and the switch itself does not.
pub(super) fn restamp_class(live: &Live, hash: NodeClassHash) -> Vec<Command> {
    let stamped = NodeClassHash::stamped_on(&live.object);
    if stamped.as_ref().is_some_and(|s| s.version == hash.version) {
        return Vec::new();
    }
    let version = stamped.map_or_else(|| "none".to_owned(), |s| s.version);
    let mut out = vec![
        info(format!(
            "Node class hash stamped by another controller (version {version}); stamping the class as it is now, from which drift is judged"
        )),
        Command::Update(Update::ClassHash(hash)),
    ];
    if live.object_exists {
        out.push(Command::Call(Call::WriteObject));
    }
    out
}

/// The `Drifted` condition brought to `wanted` (`None`: absent), written once the object
/// exists; nothing when it already says so.
pub(super) fn drift_condition(live: &Live, wanted: Option<&(String, String)>) -> Vec<Command> {
    let current = live
        .object
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::DRIFTED));
    let mut out = Vec::new();
    match wanted {
        Some((reason, message)) => {
            if current.is_some_and(|c| &c.reason == reason && &c.message == message) {
                return out;
            }
            out.push(info(format!("NodeClaim drifted ({reason}): {message}")));
            out.push(condition_set(condition::DRIFTED, true, reason, message));
        }
        None if current.is_some() => {
            out.push(Command::Update(Update::RemoveCondition(condition::DRIFTED)))
        }
        None => return out,
    }
    if live.object_exists {
        out.push(Command::Call(Call::WriteObject));
    }
    out
}

/// A disruption command marks the NodeClaim (or takes the mark back): the
/// `DisruptionReason` condition on the object, the disrupted taint on its node.
pub(super) fn mark_disrupted(live: &Live, reason: Option<String>) -> Vec<Command> {
    let mut out = vec![Command::Update(Update::Disruption(reason.clone()))];
    match &reason {
        Some(reason) => out.push(condition_set(
            condition::DISRUPTION_REASON,
            true,
            reason,
            &format!("Disrupting the node: {reason}"),
        )),
        None => out.push(Command::Update(Update::RemoveCondition(
            condition::DISRUPTION_REASON,
        ))),
    }
    if live.object_exists {
        out.push(Command::Call(Call::WriteObject));
    }
    if let Some(node) = &live.view.node {
        out.push(Command::Call(Call::MarkNode {
            node: node.clone(),
            disrupted: reason.is_some(),
        }));
    }
    out
}

/// Disrupted by a command or expired: drained, then terminated, like a deletion that starts
/// now; a NodeClaim that never launched is let go at once.
pub(super) fn disrupt(live: &Live, reason: &str, now_ms: i64) -> Vec<Command> {
    let mut out = vec![Command::Metric(Metric::Disrupted(reason.to_owned()))];
    if live.view.instance.is_none() {
        out.push(info(format!(
            "NodeClaim disrupted ({reason}) before it launched; releasing it."
        )));
        out.extend(release(live, reason));
        return out;
    }
    out.push(info(format!(
        "NodeClaim disrupted ({reason}); draining before termination."
    )));
    out.extend(start_draining(live, reason, now_ms));
    out
}

/// The `Consolidatable` condition brought to `wanted`, written when it changes.
pub(super) fn consolidatable(live: &Live, wanted: bool) -> Vec<Command> {
    let current = live.object.condition_is_true(condition::CONSOLIDATABLE);
    let mut out = match (wanted, current) {
        (true, false) => vec![condition_set(
            condition::CONSOLIDATABLE,
            true,
            condition::CONSOLIDATABLE,
            "",
        )],
        (false, true) => vec![Command::Update(Update::RemoveCondition(
            condition::CONSOLIDATABLE,
        ))],
        _ => return Vec::new(),
    };
    if live.object_exists {
        out.push(Command::Call(Call::WriteObject));
    }
    out
}
