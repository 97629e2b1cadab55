//! Placing one pod under one attempt: on an existing node with room, else on a NodeClaim
//! planned this round, else on a new NodeClaim of the first NodePool in weight order that can
//! make one.
//!
//! Among planned NodeClaims, [`Packing::CheapestGrowth`] takes the one whose launch price
//! grows least (the tightest that does not grow at all), and opens a new NodeClaim only when
//! that costs less per unit of capacity bought than the growth; [`Packing::FirstFit`] takes
//! the first that can grow.

use std::sync::Arc;

use crate::model::pod::ports_conflict;
use crate::model::requirements::Incompatible;
use crate::model::taints::untolerated_avoiding;
use crate::model::volumes::attachments_fit;
use crate::model::{Pod, Requirements, ResourceName, Resources};
use crate::vocab::labels;

use super::attempts::Leniency;
use super::claims::{ClaimState, ClaimTypes, Claims, Plan, retain_types, set_types};
use super::domains::HostnameRules;
use super::pools::PoolState;
use super::table::{
    FreshTypes, GrownFit, Priced, RequirementTable, elementwise_max, fitting_types, min_values_met,
};
use super::topology::{self, Domain, Topology};
use super::{Packing, SchedulingInput};

/// Where a pod went.
pub(super) enum Placed {
    /// The existing node at this position.
    Existing(usize),
    /// The planned NodeClaim at this position.
    Claim(usize),
}

/// One attempt to place a pod, narrowed to one choice of domains.
pub(super) struct Placement<'p> {
    pub(super) input: &'p SchedulingInput,
    pub(super) packing: Packing,
    pub(super) leniency: Leniency,
    /// The pod, by position in the input.
    pub(super) pod_index: usize,
    /// The attempt's requirement alternatives narrowed to the domains chosen.
    pub(super) alternatives: &'p [Requirements],
    /// Their ids in the round's requirement table.
    pub(super) alternative_ids: &'p [usize],
    /// The pod's per-node rules.
    pub(super) hostname: &'p HostnameRules,
    pub(super) topology: &'p Topology,
    /// Per NodePool, whether the attempt tolerates its taints.
    pub(super) tolerated: &'p [bool],
    /// NodePools, heaviest first.
    pub(super) pools: &'p [usize],
}

impl Placement<'_> {
    fn pod(&self) -> &Pod {
        &self.input.pods[self.pod_index]
    }

    /// Whether the pod's per-node rules and the anti-affinity of pods there let it onto
    /// `domain`.
    fn room_on(&self, domain: &Domain) -> bool {
        (self.hostname.is_empty() || self.hostname.allows(self.topology, domain))
            && !self.topology.repels(domain, self.pod_index)
    }
}

/// A planned NodeClaim the pod could join, and what joining costs.
#[derive(Clone, Copy)]
pub(super) struct Growth {
    /// The claim.
    pub(super) index: usize,
    /// Through which of the pod's alternatives.
    pub(super) alternative: usize,
    /// Added $/h.
    pub(super) growth: f64,
    /// $/h per unit of capacity it adds; joins that add nothing score below every growth.
    pub(super) score: f64,
}

/// Whether a pod on the planned NodeClaim binds a host port `pod` needs.
/// How good it is for `pod` to join `claim`, which then launches as `grown` (lower is
/// better). Joining for free scores the claim left with the least room, by the squared sum
/// of its spare shares (CPU and memory), which also favours claims whose spare room has the
/// pod's shape, so neither resource is stranded; below any growth, which scores its added
/// $/h per unit of capacity it adds.
fn join_score(
    claims: &Claims,
    state: &PoolState,
    claim: &ClaimState,
    pod: &Pod,
    grown: Priced,
) -> f64 {
    let current = claim.types[0];
    let growth = grown.price - current.price;
    if growth <= 0.0 {
        let allocatable = &state.allocatable[grown.index];
        let after = claim.requests.add(&pod.requests);
        let share = |r: ResourceName| {
            let total = allocatable.get(r).max(1) as f64;
            (total - after.get(r) as f64) / total
        };
        let left = share(ResourceName::Cpu).powi(2) + share(ResourceName::Memory).powi(2);
        growth + left - FREE_SCORE_OFFSET
    } else {
        let (before, after) = (
            &state.allocatable[current.index],
            &state.allocatable[grown.index],
        );
        growth / claims.gained(pod, &claim.requests, before, after)
    }
}

/// Whether a host port the pod needs is bound on the claim's node already: by a pod planned
/// onto it, or by a DaemonSet's pod (`state` is the claim's pool's).
pub(super) fn host_ports_taken(
    input: &SchedulingInput,
    state: &PoolState,
    claim: &ClaimState,
    pod: &Pod,
) -> bool {
    !pod.host_ports.is_empty()
        && (ports_conflict(&state.daemon_ports, &pod.host_ports)
            || claim
                .pods
                .iter()
                .any(|p| ports_conflict(&input.pods[*p].host_ports, &pod.host_ports)))
}

/// Claims a pod could join for free that are compared before it joins the best of them.
pub(super) const FREE_CANDIDATES: usize = 8;

/// Keeps free joins' scores (at most 2 above it) below any growth's (positive).
pub(super) const FREE_SCORE_OFFSET: f64 = 3.0;

/// Claims priced per pod when it must grow one.
pub(super) const GROWTH_CANDIDATES: usize = 32;

impl Plan {
    /// Places the pod: on an existing node, a planned NodeClaim or a new one. One reason
    /// per NodePool when nothing takes it.
    pub(super) fn place(
        &mut self,
        p: &Placement<'_>,
        work: &mut usize,
    ) -> Result<Placed, Vec<String>> {
        if let Some(i) = self.place_on_existing(p) {
            return Ok(Placed::Existing(i));
        }
        let best = self.best_claim(p, work);
        let mut reasons = Vec::new();
        let growth_is_free =
            best.is_some_and(|b| b.growth <= 0.0 || p.packing == Packing::FirstFit);
        let fresh = if growth_is_free {
            None
        } else {
            self.fresh_claim(p, &mut reasons)
        };
        self.commit(p, best, fresh).ok_or(reasons)
    }

    /// The first existing node with room that the pod may join, which then holds it.
    fn place_on_existing(&mut self, p: &Placement<'_>) -> Option<usize> {
        let (input, pod) = (p.input, p.pod());
        // Naming a node's hostname domain allocates; skip it when nothing could object.
        let check_nodes = !p.hostname.is_empty() || p.topology.repels_on_nodes();
        for (i, node) in input.existing.iter().enumerate() {
            // Room first: it is the cheapest check and rules out the most (full) nodes.
            let used = &mut self.existing_use[i];
            let after = used.requested.add(&pod.requests);
            if !after.fits_in(&node.allocatable)
                || untolerated_avoiding(
                    &node.taints,
                    &pod.tolerations,
                    p.leniency.avoid_soft_taints,
                )
                .is_some()
                || !p.alternatives.iter().any(|alt| alt.admits(&node.labels))
                || (check_nodes
                    && !topology::existing_domain(node, labels::HOSTNAME)
                        .is_some_and(|d| p.room_on(&d)))
            {
                continue;
            }
            if !ports_conflict(&used.host_ports, &pod.host_ports)
                && attachments_fit(&node.attach_limits, &used.attached, &pod.volume_attachments)
            {
                used.requested = after;
                used.host_ports.extend(pod.host_ports.iter().cloned());
                for volume in &pod.volume_attachments {
                    if !used.attached.contains(volume) {
                        used.attached.push(volume.clone());
                    }
                }
                return Some(i);
            }
        }
        None
    }

    /// The planned NodeClaim the pod would best join (see the module doc).
    fn best_claim(&mut self, p: &Placement<'_>, work: &mut usize) -> Option<Growth> {
        let Plan {
            table,
            pool_states,
            claims,
            ..
        } = self;
        let (input, pod) = (p.input, p.pod());
        let mut best: Option<Growth> = None;
        // `None` when cheap checks rule the claim out, else whether to take it: first fit
        // takes any that has room, cheapest growth any it joins for free.
        let mut consider = |index: usize, claim: &ClaimState| {
            *work += 1;
            if !p.tolerated[claim.pool]
                || !claim
                    .requests
                    .add(&pod.requests)
                    .fits_in(&claim.max_allocatable)
                || !p.room_on(&Domain::Claim(index))
                || host_ports_taken(input, &pool_states[claim.pool], claim, pod)
            {
                return None;
            }
            let state = &pool_states[claim.pool];
            let Some((alternative, grown)) = claim_growth(table, p, state, claim) else {
                return Some(false);
            };
            let growth = grown.price - claim.types[0].price;
            let score = join_score(claims, state, claim, pod, grown);
            if best.is_none_or(|b| score < b.score) {
                best = Some(Growth {
                    index,
                    alternative,
                    growth,
                    score,
                });
            }
            Some(p.packing == Packing::FirstFit || growth <= 0.0)
        };
        match p.packing {
            Packing::FirstFit => {
                for (index, claim) in claims.all.iter().enumerate() {
                    if consider(index, claim) == Some(true) {
                        break;
                    }
                }
            }
            Packing::CheapestGrowth => {
                // The tightest claim the pod joins without raising its price; failing that,
                // the cheapest growth among a bounded number of the others (tightest first,
                // which packed best), so a round stays near-linear in its pods.
                if !p
                    .hostname
                    .excludes_every_claim(p.topology, claims.all.len())
                {
                    let mut free = false;
                    let mut free_seen = 0;
                    for index in claims.with_room(&pod.requests) {
                        if consider(index, &claims.all[index]) == Some(true) {
                            free = true;
                            free_seen += 1;
                            if free_seen >= FREE_CANDIDATES {
                                break;
                            }
                        }
                    }
                    if !free {
                        // Claims with a little room first, then the most recent full ones.
                        let full = (0..claims.all.len())
                            .rev()
                            .filter(|i| claims.open_keys[*i].is_none());
                        let mut priced = 0;
                        for index in claims.without_room(&pod.requests).chain(full) {
                            if consider(index, &claims.all[index]).is_some() {
                                priced += 1;
                                if priced >= GROWTH_CANDIDATES {
                                    break;
                                }
                            }
                        }
                    }
                }
            }
        }
        best
    }

    /// A new NodeClaim for the pod from the first NodePool, heaviest first, that can make
    /// one; each pool that cannot says why in `reasons`.
    fn fresh_claim(&mut self, p: &Placement<'_>, reasons: &mut Vec<String>) -> Option<FreshClaim> {
        if !p.hostname.allows_new_node() {
            reasons.push(
                "pod affinity: must share a node with a matching pod, and none has room".to_owned(),
            );
            return None;
        }
        for &pool_index in p.pools {
            match new_claim(
                &mut self.table,
                p,
                &self.pool_states[pool_index],
                pool_index,
            ) {
                Ok(claim) => return Some(claim),
                Err(reason) => reasons.push(format!(
                    "nodepool {:?}: {reason}",
                    p.input.nodepools[pool_index].name
                )),
            }
        }
        None
    }

    /// Growing a claim and opening one are compared by price per unit of capacity bought,
    /// as the room either leaves is what later pods fill; the winner takes the pod.
    fn commit(
        &mut self,
        p: &Placement<'_>,
        best: Option<Growth>,
        fresh: Option<FreshClaim>,
    ) -> Option<Placed> {
        let pod = p.pod();
        let fresh_score = fresh.as_ref().map(|claim| {
            let state = &self.pool_states[claim.pool];
            let cheapest = claim.cheapest();
            let usable = state.allocatable[cheapest.index].sub(&state.daemon);
            let gained = self
                .claims
                .gained(pod, &Resources::ZERO, &Resources::ZERO, &usable);
            cheapest.price / gained
        });
        match (best, fresh) {
            (Some(b), _) if fresh_score.is_none_or(|f| b.score <= f) => {
                let claim = &mut self.claims.all[b.index];
                let state = &mut self.pool_states[claim.pool];
                add_to_claim(
                    p.input,
                    &mut self.table,
                    state,
                    claim,
                    p.pod_index,
                    p.alternative_ids[b.alternative],
                );
                self.claims.reindex(b.index, &state.allocatable);
                Some(Placed::Claim(b.index))
            }
            (_, Some(fresh)) => {
                let pool_index = fresh.pool;
                let state = &mut self.pool_states[pool_index];
                let claim = fresh.into_claim(&p.input.nodepools[pool_index], state);
                for r in ResourceName::ALL {
                    if let Some(h) = &mut state.headroom[r as usize] {
                        *h -= claim.reserved.get(r);
                    }
                }
                if let Some(n) = &mut state.nodes_left {
                    *n -= 1;
                }
                Some(Placed::Claim(self.claims.push(claim, &state.allocatable)))
            }
            _ => None,
        }
    }
}

/// The type a claim would launch as if the pod joined it, and through which of the pod's
/// requirement alternatives (ids in `table`); `None` when it cannot join.
pub(super) fn claim_growth(
    table: &mut RequirementTable,
    p: &Placement<'_>,
    state: &PoolState,
    claim: &ClaimState,
) -> Option<(usize, Priced)> {
    let (input, pod) = (p.input, p.pod());
    let (alternatives, relax_min_values) = (p.alternative_ids, p.leniency.relax_min_values);
    let pool = &input.nodepools[claim.pool];
    let grown = GrownFit::new(&claim.requests, &pod.requests);
    let requests = grown.requests;
    // A claim already launching without its minValues (or allowed to this attempt) grows
    // like any other.
    let has_min_values = !relax_min_values
        && !claim.min_values_relaxed
        && table
            .get(claim.requirements)
            .iter()
            .any(|(_, r)| r.min_values.is_some());
    for (index, &alternative) in alternatives.iter().enumerate() {
        let Some(merged) = table.merge(claim.requirements, alternative) else {
            continue;
        };
        let unlimited = state.unlimited();
        let within_limits = |i: usize| {
            unlimited || state.within_headroom(&pool.instance_types[i].capacity, &claim.reserved)
        };
        if !has_min_values {
            // Types stay in price order, so the first that still fits sets the new price.
            let price = if merged == claim.requirements {
                // The claim's types hold its requests: only what the pod asks for is checked.
                claim
                    .types
                    .iter()
                    .find(|t| grown.fits(state, t.index) && within_limits(t.index))
                    .copied()
            } else {
                table
                    .priced_types(pool, claim.pool, state, merged)
                    .iter()
                    .find(|t| {
                        (claim.exotic_ok || !state.exotic[t.index])
                            && grown.fits_fully(state, t.index)
                            && within_limits(t.index)
                    })
                    .copied()
            };
            match price {
                Some(cheapest) => return Some((index, cheapest)),
                None => continue,
            }
        }
        let priced = table.priced_types(pool, claim.pool, state, merged);
        let types = fitting_types(
            pool,
            state,
            &priced,
            claim.exotic_ok,
            &requests,
            &claim.reserved,
        );
        if types.is_empty()
            || min_values_met(&types, &pool.instance_types, table.get(merged)).is_err()
        {
            continue;
        }
        return Some((index, types[0]));
    }
    None
}

/// Adds the pod to a claim through `alternative` (an id [`claim_growth`] accepted).
pub(super) fn add_to_claim(
    input: &SchedulingInput,
    table: &mut RequirementTable,
    state: &mut PoolState,
    claim: &mut ClaimState,
    pod_index: usize,
    alternative: usize,
) {
    let pool = &input.nodepools[claim.pool];
    let grown = GrownFit::new(&claim.requests, &input.pods[pod_index].requests);
    let merged = table
        .merge(claim.requirements, alternative)
        .unwrap_or(claim.requirements);
    if merged == claim.requirements {
        // The claim's types hold its requests: only what the pod asks for is checked, and
        // nothing when the smallest of them holds it (limits aside).
        let (unlimited, credit) = (state.unlimited(), claim.reserved);
        if unlimited && grown.fits_in(&claim.min_allocatable) {
            claim.requests = grown.requests;
            claim.pods.push(pod_index);
            return;
        }
        if unlimited && !table.has_min_values(claim.requirements) {
            // Only the cheapest option prices the claim: those ahead of the first that still
            // fits go, the rest are filtered when the plan is handed out.
            let fit = claim.types.iter().position(|t| grown.fits(state, t.index));
            claim.types.drop_front(fit.unwrap_or(usize::MAX));
            claim.requests = grown.requests;
            claim.pods.push(pod_index);
            return;
        }
        retain_types(pool, state, claim, |state, t| {
            grown.fits(state, t.index)
                && (unlimited
                    || state.within_headroom(&pool.instance_types[t.index].capacity, &credit))
        });
    } else {
        claim.requirements = merged;
        let priced = table.priced_types(pool, claim.pool, state, merged);
        let types = if state.unlimited() {
            // Narrowed requirements price types anew (an offering in the pod's zone, say),
            // but those they allow that hold the claim's requests are among its types.
            let mut held = vec![0u64; pool.instance_types.len().div_ceil(64)];
            for t in claim.types.iter() {
                held[t.index / 64] |= 1 << (t.index % 64);
            }
            priced
                .iter()
                .filter(|t| {
                    held[t.index / 64] & (1 << (t.index % 64)) != 0 && grown.fits(state, t.index)
                })
                .copied()
                .collect()
        } else {
            // Limits may admit types again that they kept out when the claim was made.
            fitting_types(
                pool,
                state,
                &priced,
                claim.exotic_ok,
                &grown.requests,
                &claim.reserved,
            )
        };
        set_types(pool, state, claim, types);
    }
    claim.requests = grown.requests;
    claim.pods.push(pod_index);
    if !claim.min_values_relaxed {
        claim.min_values_relaxed = min_values_met(
            &claim.types,
            &pool.instance_types,
            table.get(claim.requirements),
        )
        .is_err();
    }
}

/// A NodeClaim a pod could open: priced for the comparison with joining a planned one, and
/// made a [`ClaimState`] only when it wins (most pods join one).
pub(super) struct FreshClaim {
    pool: usize,
    requirements: usize,
    exotic_ok: bool,
    types: Arc<FreshTypes>,
    requests: Resources,
    pod_index: usize,
    min_values_relaxed: bool,
}

impl FreshClaim {
    /// The cheapest type it would launch as.
    fn cheapest(&self) -> Priced {
        self.types.types[0]
    }

    /// The planned NodeClaim, its bounds set (`state` is its pool's).
    fn into_claim(self, pool: &super::NodePoolTemplate, state: &PoolState) -> ClaimState {
        let bounds = self.types.bounds(pool, state);
        ClaimState {
            pool: self.pool,
            requirements: self.requirements,
            exotic_ok: self.exotic_ok,
            types: ClaimTypes::shared(self.types.types.clone()),
            max_allocatable: bounds.largest,
            min_allocatable: bounds.smallest,
            reserved: bounds.reserved,
            requests: self.requests,
            pods: vec![self.pod_index],
            min_values_relaxed: self.min_values_relaxed,
        }
    }
}

/// A new NodeClaim of pool `pool_index` for the pod, or why the pool cannot make one.
pub(super) fn new_claim(
    table: &mut RequirementTable,
    p: &Placement<'_>,
    state: &PoolState,
    pool_index: usize,
) -> Result<FreshClaim, String> {
    let (input, pod_index) = (p.input, p.pod_index);
    let (alternatives, tolerated) = (p.alternative_ids, p.tolerated[pool_index]);
    let relax_min_values = p.leniency.relax_min_values;
    let pool = &input.nodepools[pool_index];
    let pod = &input.pods[pod_index];
    if !tolerated {
        // PreferNoSchedule taints only keep a pod off until its last attempt.
        let taint = untolerated_avoiding(&pool.taints, &pod.tolerations, true)
            .map(ToString::to_string)
            .unwrap_or_default();
        return Err(format!("untolerated taint {taint}"));
    }
    if state.nodes_left.is_some_and(|n| n <= 0) {
        return Err(format!(
            "limit of {} nodes reached",
            pool.limits.nodes.unwrap_or_default()
        ));
    }
    if let Some(port) = pod
        .host_ports
        .iter()
        .find(|port| state.daemon_ports.iter().any(|d| d.conflicts_with(port)))
    {
        return Err(format!(
            "host port {}/{} is bound by a DaemonSet's pod on the NodePool's new nodes",
            port.port, port.protocol
        ));
    }
    let requests = state.daemon.add(&pod.requests);
    let exotic_ok = pod.needs_exotic();
    let mut last_error: Option<String> = None;
    for &alt in alternatives {
        let Some(requirements) = table.merge(state.requirements, alt) else {
            if let Err(Incompatible {
                key,
                wanted,
                allowed,
            }) = table.get(alt).compatible_with_template(&pool.requirements)
            {
                last_error = Some(format!(
                    "requirement {key} {wanted} conflicts with the NodePool's {allowed}"
                ));
            }
            continue;
        };
        let types = table.fresh_types(pool, pool_index, state, requirements, exotic_ok, &requests);
        if types.types.is_empty() {
            let priced = table.priced_types(pool, pool_index, state, requirements);
            last_error = Some(why_nothing_fits(
                table,
                pool,
                state,
                &priced,
                exotic_ok,
                pod,
                requirements,
            ));
            continue;
        }
        let mut min_values_relaxed = false;
        if let Err(e) = min_values_met(&types.types, &pool.instance_types, table.get(requirements))
        {
            if !relax_min_values {
                last_error = Some(e.to_string());
                continue;
            }
            min_values_relaxed = true;
        }
        return Ok(FreshClaim {
            pool: pool_index,
            requirements,
            exotic_ok,
            types,
            requests,
            pod_index,
            min_values_relaxed,
        });
    }
    Err(last_error.unwrap_or_else(|| "incompatible".into()))
}

/// Why no type of `priced` (a pool's types under `requirements`) can launch the pod: none
/// is allowed, none has room, or those that do would pass the pool's limits.
fn why_nothing_fits(
    table: &RequirementTable,
    pool: &super::NodePoolTemplate,
    state: &PoolState,
    priced: &[Priced],
    exotic_ok: bool,
    pod: &Pod,
    requirements: usize,
) -> String {
    let candidates: Vec<usize> = priced
        .iter()
        .map(|t| t.index)
        .filter(|i| exotic_ok || !state.exotic[*i])
        .collect();
    if candidates.is_empty() {
        return no_offering_reason(pool, table.get(requirements));
    }
    let requests = state.daemon.add(&pod.requests);
    if !candidates
        .iter()
        .any(|i| requests.fits_in(&state.allocatable[*i]))
    {
        let biggest = elementwise_max(candidates.iter().map(|i| state.allocatable[*i]));
        let short = requests
            .first_excess(&biggest)
            .map_or("resources", ResourceName::as_str);
        return format!(
            "no instance type has room for {} (with daemonsets {}); insufficient {short}",
            pod.requests, state.daemon
        );
    }
    "would exceed the NodePool's limits".into()
}

/// Why no instance type can launch under `requirements`: none is allowed, or every offering
/// of those that are has been marked unavailable (an insufficient-capacity error or an
/// interruption, for a few minutes) — the case a person should hear about.
fn no_offering_reason(pool: &super::NodePoolTemplate, requirements: &Requirements) -> String {
    let (mut types, mut offerings) = (0, 0);
    for it in &pool.instance_types {
        if it.requirements.compatible(requirements).is_err() {
            continue;
        }
        let unavailable = it
            .allowed_offerings(requirements)
            .filter(|o| !o.available)
            .count();
        if unavailable > 0 {
            types += 1;
            offerings += unavailable;
        }
    }
    let reason = "no instance type with an available offering satisfies the requirements";
    if offerings == 0 {
        return reason.into();
    }
    format!(
        "{reason}: the {offerings} offering(s) of {types} instance type(s) that would are \
         unavailable for now after insufficient capacity or an interruption; tried again as \
         they expire"
    )
}
