//! Version 1 conversions of a nomination check and what it decided.

use super::v1;
use super::{from_taint, taint};
use crate::events::nominations::{
    Expired, LeftPod, NodeFacts, NominatedClaim, NominatedPod, NominationCheck, NominationOutcome,
    NominationRecord,
};
use crate::model::Toleration;

fn toleration(t: &Toleration) -> v1::Toleration {
    v1::Toleration {
        key: t.key.clone(),
        exists: t.exists,
        value: t.value.clone(),
        effect: t.effect.clone(),
    }
}

fn from_toleration(t: v1::Toleration) -> Toleration {
    Toleration {
        key: t.key,
        exists: t.exists,
        value: t.value,
        effect: t.effect,
    }
}

/// The stored form of a check and its outcome.
pub(super) fn record(r: &NominationRecord) -> v1::NominationRecord {
    let (check, outcome) = (&r.check, &r.outcome);
    v1::NominationRecord {
        at_ms: check.at_ms,
        window_ms: check.window_ms,
        nodes: check
            .nodes
            .iter()
            .map(|n| v1::NodeFacts {
                name: n.name.clone(),
                provider_id: n.provider_id.clone(),
                ready: n.ready,
                unschedulable: n.unschedulable,
                taints: n.taints.iter().map(taint).collect(),
            })
            .collect(),
        claims: check
            .claims
            .iter()
            .map(|c| v1::NominatedClaim {
                nodeclaim: c.nodeclaim.clone(),
                provider_id: c.provider_id.clone(),
                pods: c
                    .pods
                    .iter()
                    .map(|p| {
                        (
                            p.uid.clone(),
                            p.tolerations.iter().map(toleration).collect(),
                        )
                    })
                    .collect(),
                open_since_ms: c.open_since_ms,
            })
            .collect(),
        left: check
            .left
            .iter()
            .map(|l| v1::LeftPod {
                uid: l.uid.clone(),
                node: l.node.clone(),
                since_ms: l.since_ms,
            })
            .collect(),
        in_flight_elsewhere: check.in_flight_elsewhere,
        expired: outcome
            .expired
            .iter()
            .map(|e| v1::Expired {
                uid: e.uid.clone(),
                nodeclaim: e.nodeclaim.clone(),
                node: e.node.clone(),
            })
            .collect(),
        open_since: outcome.open_since.clone(),
        left_since: outcome.left_since.clone(),
    }
}

/// A check and its outcome from their stored form.
pub(super) fn from_record(r: v1::NominationRecord) -> NominationRecord {
    NominationRecord {
        check: NominationCheck {
            at_ms: r.at_ms,
            window_ms: r.window_ms,
            nodes: r
                .nodes
                .into_iter()
                .map(|n| NodeFacts {
                    name: n.name,
                    provider_id: n.provider_id,
                    ready: n.ready,
                    unschedulable: n.unschedulable,
                    taints: n.taints.into_iter().map(from_taint).collect(),
                })
                .collect(),
            claims: r
                .claims
                .into_iter()
                .map(|c| NominatedClaim {
                    nodeclaim: c.nodeclaim,
                    provider_id: c.provider_id,
                    pods: c
                        .pods
                        .into_iter()
                        .map(|(uid, tolerations)| NominatedPod {
                            uid,
                            tolerations: tolerations.into_iter().map(from_toleration).collect(),
                        })
                        .collect(),
                    open_since_ms: c.open_since_ms,
                })
                .collect(),
            left: r
                .left
                .into_iter()
                .map(|l| LeftPod {
                    uid: l.uid,
                    node: l.node,
                    since_ms: l.since_ms,
                })
                .collect(),
            in_flight_elsewhere: r.in_flight_elsewhere,
        },
        outcome: NominationOutcome {
            expired: r
                .expired
                .into_iter()
                .map(|e| Expired {
                    uid: e.uid,
                    nodeclaim: e.nodeclaim,
                    node: e.node,
                })
                .collect(),
            open_since: r.open_since,
            left_since: r.left_since,
        },
    }
}
