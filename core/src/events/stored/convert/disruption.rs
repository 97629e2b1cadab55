//! Version 1 conversions of the disruption events: the command a pass decided, with the
//! snapshot and round it decided from, and the phases it went through.

use std::time::Duration;

use super::v1;
use super::{
    Result, from_offering_key, from_pod, from_round_input, offering_key, pod, round_input,
};
use crate::api::nodepool::{Budget, ConsolidationPolicy, DisruptionReason};
use crate::events::NodeClaimState;
use crate::events::disruption::{
    CommandRole, DisruptionInput, DisruptionRecord, DriftMark, Member, Method, NodeSnapshot, Phase,
    PoolPolicy, Snapshot,
};
use crate::ports::BoundPod;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn state_name(state: NodeClaimState) -> &'static str {
    match state {
        NodeClaimState::Pending => "Pending",
        NodeClaimState::Launched => "Launched",
        NodeClaimState::Registered => "Registered",
        NodeClaimState::Initialized => "Initialized",
        NodeClaimState::Draining => "Draining",
        NodeClaimState::Terminating => "Terminating",
        NodeClaimState::Terminated => "Terminated",
    }
}

fn state(name: &str) -> Result<NodeClaimState> {
    Ok(match name {
        "Pending" => NodeClaimState::Pending,
        "Launched" => NodeClaimState::Launched,
        "Registered" => NodeClaimState::Registered,
        "Initialized" => NodeClaimState::Initialized,
        "Draining" => NodeClaimState::Draining,
        "Terminating" => NodeClaimState::Terminating,
        "Terminated" => NodeClaimState::Terminated,
        other => return Err(format!("state: unknown NodeClaim state {other:?}")),
    })
}

fn reason_of(name: &str) -> Result<DisruptionReason> {
    Ok(match name {
        "Empty" => DisruptionReason::Empty,
        "Drifted" => DisruptionReason::Drifted,
        "Underutilized" => DisruptionReason::Underutilized,
        other => return Err(format!("reasons: unknown disruption reason {other:?}")),
    })
}

fn policy_name(policy: ConsolidationPolicy) -> &'static str {
    match policy {
        ConsolidationPolicy::WhenEmpty => "WhenEmpty",
        ConsolidationPolicy::WhenEmptyOrUnderutilized => "WhenEmptyOrUnderutilized",
        ConsolidationPolicy::Balanced => "Balanced",
    }
}

fn policy(name: &str) -> Result<ConsolidationPolicy> {
    Ok(match name {
        "WhenEmpty" => ConsolidationPolicy::WhenEmpty,
        "WhenEmptyOrUnderutilized" => ConsolidationPolicy::WhenEmptyOrUnderutilized,
        "Balanced" => ConsolidationPolicy::Balanced,
        other => return Err(format!("consolidation_policy: unknown policy {other:?}")),
    })
}

fn pool(p: &PoolPolicy) -> v1::PoolPolicy {
    v1::PoolPolicy {
        name: p.name.clone(),
        budgets: p
            .budgets
            .iter()
            .map(|b| v1::Budget {
                nodes: b.nodes.clone(),
                schedule: b.schedule.clone(),
                duration: b.duration.clone(),
                reasons: b
                    .reasons
                    .iter()
                    .map(|r| crate::events::disruption::reason_name(*r).to_owned())
                    .collect(),
            })
            .collect(),
        consolidate_after_ms: p.consolidate_after.map(ms),
        consolidation_policy: policy_name(p.policy).to_owned(),
        replicas: p.replicas,
        node_limit: p.node_limit,
    }
}

fn from_pool(p: v1::PoolPolicy) -> Result<PoolPolicy> {
    let budgets = p
        .budgets
        .into_iter()
        .map(|b| {
            Ok(Budget {
                nodes: b.nodes,
                schedule: b.schedule,
                duration: b.duration,
                reasons: b
                    .reasons
                    .iter()
                    .map(|r| reason_of(r))
                    .collect::<Result<_>>()?,
            })
        })
        .collect::<Result<_>>()
        .map_err(|e| format!("pool {}: {e}", p.name))?;
    Ok(PoolPolicy {
        budgets,
        consolidate_after: p.consolidate_after_ms.map(Duration::from_millis),
        policy: policy(&p.consolidation_policy).map_err(|e| format!("pool {}: {e}", p.name))?,
        replicas: p.replicas,
        node_limit: p.node_limit,
        name: p.name,
    })
}

fn bound_pod(p: &BoundPod) -> v1::BoundPod {
    v1::BoundPod {
        node: p.node.clone(),
        pod: pod(&p.pod),
        reschedulable: p.reschedulable,
        do_not_disrupt: p.do_not_disrupt.clone(),
        created_ms: p.created_ms,
        pdbs: p.pdbs.clone(),
    }
}

fn from_bound_pod(p: v1::BoundPod) -> Result<BoundPod> {
    Ok(BoundPod {
        node: p.node,
        pod: from_pod(p.pod)?,
        reschedulable: p.reschedulable,
        do_not_disrupt: p.do_not_disrupt,
        created_ms: p.created_ms,
        pdbs: p.pdbs,
    })
}

fn role_name(role: CommandRole) -> &'static str {
    match role {
        CommandRole::Candidate => "Candidate",
        CommandRole::Replacement => "Replacement",
    }
}

fn role(name: &str) -> Result<CommandRole> {
    match name {
        "Candidate" => Ok(CommandRole::Candidate),
        "Replacement" => Ok(CommandRole::Replacement),
        other => Err(format!("command: unknown role {other:?}")),
    }
}

fn node(n: &NodeSnapshot) -> v1::NodeSnapshot {
    v1::NodeSnapshot {
        nodeclaim: n.nodeclaim.clone(),
        nodepool: n.nodepool.clone(),
        node: n.node.clone(),
        state: state_name(n.state).to_owned(),
        ready: n.ready,
        command: n.command.map(|r| role_name(r).to_owned()),
        nominated: n.nominated,
        do_not_disrupt: n.do_not_disrupt,
        created_ms: n.created_ms,
        initialized_ms: n.initialized_ms,
        last_pod_event_ms: n.last_pod_event_ms,
        expire_after_ms: n.expire_after.map(ms),
        termination_grace_period_ms: n.termination_grace_period.map(ms),
        drifted: n.drifted.as_ref().map(|d| v1::DriftMark {
            reason: d.reason.clone(),
            since_ms: d.since_ms,
        }),
        price: n.price,
        offering: n.offering.as_ref().map(offering_key),
        pods: n.pods.iter().map(bound_pod).collect(),
        conditions: (n.conditions.iter())
            .map(|c| v1::NodeCondition {
                type_: c.type_.clone(),
                status: c.status.clone(),
                since_ms: c.since_ms,
            })
            .collect(),
    }
}

fn from_node(n: v1::NodeSnapshot) -> Result<NodeSnapshot> {
    let name = n.nodeclaim.clone();
    let inner = || -> Result<NodeSnapshot> {
        Ok(NodeSnapshot {
            state: state(&n.state)?,
            command: n.command.as_deref().map(role).transpose()?,
            pods: n
                .pods
                .into_iter()
                .map(from_bound_pod)
                .collect::<Result<_>>()?,
            nodeclaim: n.nodeclaim,
            nodepool: n.nodepool,
            node: n.node,
            ready: n.ready,
            nominated: n.nominated,
            do_not_disrupt: n.do_not_disrupt,
            created_ms: n.created_ms,
            initialized_ms: n.initialized_ms,
            last_pod_event_ms: n.last_pod_event_ms,
            expire_after: n.expire_after_ms.map(Duration::from_millis),
            termination_grace_period: n.termination_grace_period_ms.map(Duration::from_millis),
            drifted: n.drifted.map(|d| DriftMark {
                reason: d.reason,
                since_ms: d.since_ms,
            }),
            price: n.price,
            offering: n.offering.map(from_offering_key),
            conditions: (n.conditions.into_iter())
                .map(|c| crate::ports::NodeCondition {
                    type_: c.type_,
                    status: c.status,
                    since_ms: c.since_ms,
                })
                .collect(),
        })
    };
    inner().map_err(|e| format!("nodeclaim {name}: {e}"))
}

fn snapshot(s: &Snapshot) -> v1::Snapshot {
    v1::Snapshot {
        now_ms: s.now_ms,
        pools: s.pools.iter().map(pool).collect(),
        nodes: s.nodes.iter().map(node).collect(),
        pdbs: s.pdbs.clone(),
        spot_to_spot: s.spot_to_spot,
        static_capacity: s.static_capacity,
        buffered: s.buffered.clone(),
        scaling_out: s.scaling_out.clone(),
        repair: s.repair.clone(),
    }
}

fn from_snapshot(s: v1::Snapshot) -> Result<Snapshot> {
    Ok(Snapshot {
        now_ms: s.now_ms,
        pools: s.pools.into_iter().map(from_pool).collect::<Result<_>>()?,
        nodes: s.nodes.into_iter().map(from_node).collect::<Result<_>>()?,
        pdbs: s.pdbs,
        spot_to_spot: s.spot_to_spot,
        static_capacity: s.static_capacity,
        buffered: s.buffered,
        scaling_out: s.scaling_out,
        repair: s.repair,
    })
}

/// The stored form of a decided command.
pub(super) fn record(r: &DisruptionRecord) -> v1::DisruptionRecord {
    v1::DisruptionRecord {
        command: r.command,
        method: r.method.name().to_owned(),
        candidates: r
            .candidates
            .iter()
            .map(|m| v1::Member {
                nodeclaim: m.nodeclaim.clone(),
                node: m.node.clone(),
            })
            .collect(),
        replacements: r.replacements.clone(),
        moved: r.moved.clone(),
        savings: r.savings,
        allowed: r
            .allowed
            .iter()
            .map(|(k, v)| (k.clone(), u64::try_from(*v).unwrap_or(u64::MAX)))
            .collect(),
        input: r.input.as_ref().map(|i| {
            Box::new(v1::DisruptionInput {
                snapshot: snapshot(&i.snapshot),
                base: i.base.as_ref().map(round_input),
                unconsolidatable: i.unconsolidatable.iter().cloned().collect(),
            })
        }),
    }
}

/// A decided command read back.
pub(super) fn from_record(r: v1::DisruptionRecord) -> Result<DisruptionRecord> {
    let command = r.command;
    let inner = || -> Result<DisruptionRecord> {
        Ok(DisruptionRecord {
            command,
            method: Method::parse(&r.method)
                .ok_or_else(|| format!("method: unknown method {:?}", r.method))?,
            candidates: r
                .candidates
                .into_iter()
                .map(|m| Member {
                    nodeclaim: m.nodeclaim,
                    node: m.node,
                })
                .collect(),
            replacements: r.replacements,
            moved: r.moved,
            savings: r.savings,
            allowed: r
                .allowed
                .into_iter()
                .map(|(k, v)| (k, usize::try_from(v).unwrap_or(usize::MAX)))
                .collect(),
            input: match r.input {
                None => None,
                Some(i) => Some(Box::new(DisruptionInput {
                    snapshot: from_snapshot(i.snapshot)?,
                    base: i.base.map(from_round_input).transpose()?,
                    unconsolidatable: i.unconsolidatable.into_iter().collect(),
                })),
            },
        })
    };
    inner().map_err(|e| format!("command {command}: {e}"))
}

/// A phase as stored: its name and, for `Abandoned`, why.
pub(super) fn phase(p: &Phase) -> (String, String) {
    let detail = match p {
        Phase::Abandoned(why) => why.clone(),
        _ => String::new(),
    };
    (p.name().to_owned(), detail)
}

/// A phase read back.
pub(super) fn from_phase(name: &str, detail: &str) -> Result<Phase> {
    Phase::parse(name, detail).ok_or_else(|| format!("phase: unknown phase {name:?}"))
}
