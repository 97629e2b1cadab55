//! Explanations read from a journal, shared by `karpenter journal explain` and the admin
//! endpoint: why a NodeClaim exists and how it went ([`nodeclaim`]), and what a scheduling
//! round's new capacity cost against the lower bound ([`round_cost`]).

pub mod disruption;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::Arc;

use anyhow::Context as _;
use karpenter_core::events::{DomainEvent, NodeClaimPlan, RoundInput, RoundRecord};
use karpenter_core::model::InstanceType;
use karpenter_core::model::time::format_rfc3339;
use karpenter_core::scheduling::bound::cost_lower_bound;
use karpenter_core::scheduling::buffers;
use karpenter_core::scheduling::{Packing, solve_with};
use karpenter_journal::{Envelope, Journal};

/// What [`nodeclaim`] found.
#[derive(Debug)]
pub enum Explanation {
    /// The journal holds no event of it (never planned, or history trimmed).
    NotFound,
    /// Its explanation.
    Found {
        /// Readable lines, each ending in a newline.
        text: String,
        /// Its own journal events, oldest first.
        events: Vec<Envelope<DomainEvent>>,
    },
}

/// Why a NodeClaim exists and how it went, as readable lines: its round and pods, the
/// candidates and prices, what the cloud answered, its lifecycle, and the disruption commands
/// it was part of. [`Explanation::NotFound`] when the journal holds no event of it.
pub fn nodeclaim(journal: &Journal<DomainEvent>, name: &str) -> anyhow::Result<Explanation> {
    let mut out = String::new();
    let events: Vec<Envelope<DomainEvent>> = journal
        .by_entity("NodeClaim", name)
        .collect::<Result<_, _>>()?;
    if events.is_empty() {
        return Ok(Explanation::NotFound);
    }
    writeln!(out, "nodeclaim/{name}")?;
    let replacing = disruption::replaced_by(journal, name)?;
    let first = events.first().map_or(0, |e| e.seq);
    let takeovers: Vec<Envelope<DomainEvent>> = journal
        .by_entity("Journal", "history")
        .filter(|e| e.as_ref().map_or(true, |e| e.seq > first))
        .collect::<Result<_, _>>()?;
    let mut seams = takeovers.iter().peekable();
    for e in &events {
        while let Some(seam) = seams.next_if(|t| t.seq < e.seq) {
            explain_seam(seam, &mut out)?;
        }
        let at = format_rfc3339(e.recorded_at_ms);
        match &e.event {
            DomainEvent::NodeClaimPlanned(plan) => {
                explain_plan(journal, plan, &at, replacing, &mut out)?
            }
            DomainEvent::LaunchRequested { client_token, .. } => writeln!(
                out,
                "{at} [{}] launch intent recorded (flushed before calling the cloud), client token {client_token}",
                e.seq
            )?,
            DomainEvent::NodeClaimLaunched { instance, .. } => writeln!(
                out,
                "{at} [{}] cloud launched {} as {} in {} ({}{}), ${:.4}/h{}, image {}",
                e.seq,
                instance.id,
                instance.instance_type,
                instance.zone,
                instance.capacity_type,
                (instance.reservation.as_ref()).map_or(String::new(), |r| format!(
                    " in capacity reservation {}, type {}",
                    r.id, r.kind
                )),
                instance.price,
                (instance.price_source.as_ref()).map_or(String::new(), |s| format!(" ({s})")),
                instance.image_id
            )?,
            DomainEvent::LaunchFailed {
                reason,
                unavailable,
                ..
            } => {
                let offerings: Vec<String> = unavailable.iter().map(ToString::to_string).collect();
                writeln!(
                    out,
                    "{at} [{}] launch failed: {reason}; unavailable: {}",
                    e.seq,
                    if offerings.is_empty() {
                        "-".into()
                    } else {
                        offerings.join(", ")
                    }
                )?
            }
            DomainEvent::NodeClaimRegistered { node, .. } => {
                writeln!(out, "{at} [{}] node {node} registered", e.seq)?
            }
            DomainEvent::NodeClaimInitialized { .. } => {
                writeln!(out, "{at} [{}] node initialized (Ready)", e.seq)?
            }
            DomainEvent::InterruptionReceived {
                instance_id, kind, ..
            } => writeln!(
                out,
                "{at} [{}] interruption notice for {instance_id}: {kind:?}{}",
                e.seq,
                match kind {
                    karpenter_core::ports::InterruptionKind::CapacityBlockExpiring => {
                        " (its Capacity Block ends in 40 minutes and EC2 takes its instances back 10 minutes later, so it is drained and replaced now)"
                    }
                    _ => "",
                }
            )?,
            DomainEvent::NodeClaimDraining { reason, .. } => {
                writeln!(out, "{at} [{}] draining ({reason})", e.seq)?
            }
            DomainEvent::NodeClaimTerminated { reason, .. } => {
                writeln!(out, "{at} [{}] terminated: {reason}", e.seq)?
            }
            other => writeln!(out, "{at} [{}] {}", e.seq, other.type_name())?,
        }
    }
    disruption::explain(journal, name, &mut out)?;
    Ok(Explanation::Found { text: out, events })
}

/// A new process taking the journal's history over between two of a NodeClaim's events:
/// the records before were written by the leader before it.
fn explain_seam(seam: &Envelope<DomainEvent>, out: &mut String) -> anyhow::Result<()> {
    let DomainEvent::HistoryTakenOver(t) = &seam.event else {
        return Ok(());
    };
    writeln!(
        out,
        "{} [{}] -- {} took the journal's history over from {} (stored through seq {}{}); what follows it recorded{}",
        format_rfc3339(seam.recorded_at_ms),
        seam.seq,
        t.holder,
        t.location,
        t.through,
        t.snapshot
            .map_or(String::new(), |s| format!(", from its snapshot at seq {s}")),
        t.set_aside.as_ref().map_or(String::new(), |s| format!(
            "; its own journal (through seq {}) differed and was set aside to {}",
            s.last, s.path
        ))
    )?;
    Ok(())
}

fn explain_plan(
    journal: &Journal<DomainEvent>,
    plan: &NodeClaimPlan,
    at: &str,
    replacing: Option<u64>,
    out: &mut String,
) -> anyhow::Result<()> {
    if let Some(command) = replacing {
        writeln!(
            out,
            "{at} planned by disruption command {command} as a replacement, for nodepool {}",
            plan.nodepool
        )?;
        return explain_options(plan, &BTreeMap::new(), out);
    }
    let round: Option<RoundRecord> = journal
        .by_entity("Round", &plan.round.to_string())
        .filter_map(|e| e.ok())
        .find_map(|e| match e.event {
            DomainEvent::RoundCompleted(r) => Some(*r),
            _ => None,
        });
    let static_pool = round
        .as_ref()
        .and_then(|r| r.input.as_ref())
        .and_then(|i| i.nodepools.iter().find(|p| p.name == plan.nodepool))
        .and_then(|p| p.replicas.map(|replicas| (replicas, p.node_count)));
    if let (Some(r), Some((replicas, had))) = (&round, static_pool) {
        writeln!(
            out,
            "{at} planned by round {} for static nodepool {}: it keeps {replicas} node(s) and had {had} NodeClaim(s)",
            r.round, plan.nodepool
        )?;
        return explain_options(plan, &BTreeMap::new(), out);
    }
    match &round {
        Some(r) => writeln!(
            out,
            "{at} planned by round {} ({} pending pods, {} NodeClaims planned, {} unschedulable, computed in {} µs) for nodepool {}",
            r.round,
            r.pods,
            r.nodeclaims.len(),
            r.unschedulable.len(),
            r.duration_us,
            plan.nodepool
        )?,
        None => writeln!(
            out,
            "{at} planned by round {} for nodepool {}",
            plan.round, plan.nodepool
        )?,
    }
    let names: BTreeMap<&str, String> = round
        .as_ref()
        .and_then(|r| r.input.as_ref())
        .map(|i| i.pods.iter().map(|p| (p.uid.as_str(), p.key())).collect())
        .unwrap_or_default();
    explain_options(plan, &names, out)
}

/// A plan's pods (named where `names` knows them), requests and instance types.
fn explain_options(
    plan: &NodeClaimPlan,
    names: &BTreeMap<&str, String>,
    out: &mut String,
) -> anyhow::Result<()> {
    let shown: Vec<String> = plan
        .pods
        .iter()
        .take(10)
        .map(|uid| {
            names
                .get(uid.as_str())
                .cloned()
                .unwrap_or_else(|| uid.clone())
        })
        .collect();
    writeln!(
        out,
        "  pods ({}): {}{}",
        plan.pods.len(),
        shown.join(", "),
        if plan.pods.len() > 10 { ", …" } else { "" }
    )?;
    let mut buffers: BTreeMap<String, usize> = BTreeMap::new();
    for key in plan.pods.iter().filter_map(|uid| buffers::buffer_of(uid)) {
        *buffers.entry(key).or_default() += 1;
    }
    for (buffer, chunks) in buffers {
        writeln!(
            out,
            "  headroom launched ahead of demand for CapacityBuffer {buffer} ({chunks} chunk(s))"
        )?;
    }
    writeln!(
        out,
        "  requests: {}",
        plan.requests
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    )?;
    writeln!(
        out,
        "  candidates ({} instance types, cheapest first):",
        plan.instance_types.len()
    )?;
    for option in plan.instance_types.iter().take(8) {
        writeln!(
            out,
            "    {:<16} ${:.4}/h {} {}",
            option.name, option.price, option.zone, option.capacity_type
        )?;
    }
    if plan.instance_types.len() > 8 {
        writeln!(out, "    … {} more", plan.instance_types.len() - 8)?;
    }
    Ok(())
}

/// A round's recorded input: its own, or for a round that repeats an earlier one's input,
/// that round's.
pub fn recorded_input<'a>(
    record: &'a RoundRecord,
    by_number: &BTreeMap<u64, &'a RoundRecord>,
) -> Option<&'a RoundInput> {
    match (&record.input, record.repeats) {
        (Some(input), _) => Some(input),
        (None, Some(of)) => by_number.get(&of).and_then(|r| r.input.as_deref()),
        (None, None) => None,
    }
}

/// What one round's new capacity cost, solved again from its recorded input, against first-fit
/// decreasing and against the lower bound no plan can beat.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct RoundCost {
    /// Round number.
    pub round: u64,
    /// Pods the round considered.
    pub pods: usize,
    /// NodeClaims it planned.
    pub nodeclaims: usize,
    /// $/h of those NodeClaims (cheapest option each).
    pub cost: f64,
    /// $/h first-fit decreasing would have planned.
    pub ffd: f64,
    /// Lower bound, $/h, of the capacity the pods placed on new NodeClaims need.
    pub bound: f64,
}

impl RoundCost {
    /// `cost / bound`, or `None` when the bound is zero (the pods fit existing nodes' spare
    /// room in total, though not pod by pod).
    pub fn ratio(&self) -> Option<f64> {
        (self.bound > 1e-9).then(|| self.cost / self.bound)
    }
}

/// The cost of round `round` planned from `input`; `None` when it planned no NodeClaim.
pub fn cost_of(
    round: u64,
    input: &karpenter_core::scheduling::SchedulingInput,
) -> anyhow::Result<Option<RoundCost>> {
    let ours = solve_with(input, Packing::CheapestGrowth);
    if ours.new_claims.is_empty() {
        return Ok(None);
    }
    let ffd = solve_with(input, Packing::FirstFit);
    // Pods bound to existing nodes need no new capacity; the bound covers the rest.
    let placed_on_new: BTreeSet<&str> = ours
        .new_claims
        .iter()
        .flat_map(|c| c.pods.iter().map(String::as_str))
        .collect();
    let mut needing = input.clone();
    needing
        .pods
        .retain(|p| placed_on_new.contains(p.uid.as_str()));
    let bound =
        cost_lower_bound(&needing).with_context(|| format!("lower bound of round {round}"))?;
    Ok(Some(RoundCost {
        round,
        pods: input.pods.len(),
        nodeclaims: ours.new_claims.len(),
        cost: ours.new_capacity_cost(),
        ffd: ffd.new_capacity_cost(),
        bound,
    }))
}

/// Why [`round_cost`] has no figure.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NoCost {
    /// The journal holds no record of the round (not yet written, or trimmed).
    NoRound,
    /// Its input, or a catalog the input refers to, is not in the journal.
    NoInput,
    /// It planned no NodeClaim.
    NoNodeClaims,
}

/// The cost of round `round` as recorded in `journal`, reading only that round's records and
/// the catalogs its input names.
pub fn round_cost(
    journal: &Journal<DomainEvent>,
    round: u64,
) -> anyhow::Result<Result<RoundCost, NoCost>> {
    let read = |number: u64| -> anyhow::Result<Option<RoundRecord>> {
        for envelope in journal.by_entity("Round", &number.to_string()) {
            if let DomainEvent::RoundCompleted(r) = envelope?.event {
                return Ok(Some(*r));
            }
        }
        Ok(None)
    };
    let Some(record) = read(round)? else {
        return Ok(Err(NoCost::NoRound));
    };
    let repeated = match (&record.input, record.repeats) {
        (None, Some(of)) => read(of)?,
        _ => None,
    };
    let by_number: BTreeMap<u64, &RoundRecord> = repeated.iter().map(|r| (r.round, r)).collect();
    let Some(input) = recorded_input(&record, &by_number) else {
        return Ok(Err(NoCost::NoInput));
    };
    let mut catalogs: BTreeMap<String, Vec<Arc<InstanceType>>> = BTreeMap::new();
    for pool in &input.nodepools {
        if catalogs.contains_key(&pool.catalog) {
            continue;
        }
        for envelope in journal.by_entity("InstanceTypes", &pool.catalog) {
            if let DomainEvent::InstanceTypesObserved {
                digest,
                instance_types,
            } = envelope?.event
            {
                catalogs.insert(digest, instance_types);
                break;
            }
        }
    }
    let Some(input) = input.rebuild(&catalogs) else {
        return Ok(Err(NoCost::NoInput));
    };
    Ok(cost_of(round, &input)?.ok_or(NoCost::NoNodeClaims))
}
