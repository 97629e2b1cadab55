//! One packing of a round ([`Round`]): the pods are placed one at a time in the given order,
//! each under its attempts (strictest first); a pod whose required pod affinity or spread
//! others decide goes to the back of the queue while the round makes progress, as upstream's
//! queue does. Then, for [`Packing::CheapestGrowth`], the plan is improved
//! ([`super::improve`]) and the planned NodeClaims are handed out.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::model::pod::TopologySpread;
use crate::model::{Pod, Requirement, Requirements};
use crate::vocab::labels;

use super::attempts::{
    AttemptPolicy, Leniency, Tolerated, affinity_targets, others_decide, unplaceable,
};
use super::claims::{Claims, NodeUse, Plan};
use super::domains::{HostnameRules, Reach, RoundDomains, Want, domain_choices};
use super::improve::Improve;
use super::order::{Order, first_fit_decreasing_order, placement_order, typical_memory_per_core};
use super::output::planned_claims;
use super::place::{Placed, Placement};
use super::pools::{PoolCache, PoolState};
use super::table::RequirementTable;
use super::topology::{self, Topology};
use super::{Binding, Packing, PreferencePolicy, SchedulingInput, SchedulingResult, Unschedulable};

/// What every packing of a round starts from: the NodePools' states, their requirements
/// interned, the constraint groups with the existing nodes' pods counted, and the domains
/// the pools offer. Working out which of hundreds of instance types each pool may launch is
/// most of a small round's cost, and counting a large cluster's pods most of a small round's
/// over it, so a round's packings share them.
#[derive(Clone)]
pub(super) struct Prepared {
    table: RequirementTable,
    pool_states: Vec<PoolState>,
    topology: Topology,
    domains: RoundDomains,
    /// The median memory per vCPU of the pools' instance types.
    bytes_per_core: f64,
}

/// The NodePools' part of [`Prepared`]: what each may launch, for any round with the same
/// NodePools and DaemonSets.
#[derive(Clone)]
pub(super) struct PreparedPools {
    table: RequirementTable,
    pool_states: Vec<PoolState>,
    /// [`typical_memory_per_core`] of the pools' types.
    bytes_per_core: f64,
}

impl PreparedPools {
    /// `input`'s, with the catalogs `cache` has of recent rounds.
    pub(super) fn new(input: &SchedulingInput, cache: Option<&PoolCache>) -> Self {
        let mut table = RequirementTable::default();
        let pool_states: Vec<PoolState> = input
            .nodepools
            .iter()
            .map(|p| {
                let requirements = table.intern(&p.requirements);
                PoolState::new(p, &input.daemonsets, requirements, cache)
            })
            .collect();
        PreparedPools {
            table,
            bytes_per_core: typical_memory_per_core(&pool_states),
            pool_states,
        }
    }
}

impl Prepared {
    pub(super) fn new(input: &SchedulingInput, cache: Option<&PoolCache>) -> Self {
        Prepared::with_pools(input, PreparedPools::new(input, cache))
    }

    /// `input`'s, with its NodePools prepared already (`pools` must be of `input`'s
    /// NodePools and DaemonSets).
    pub(super) fn with_pools(input: &SchedulingInput, pools: PreparedPools) -> Self {
        let PreparedPools {
            table,
            pool_states,
            bytes_per_core,
        } = pools;
        let topology = Topology::new(
            &input.pods,
            &input.existing,
            input.preference_policy == PreferencePolicy::Respect,
        );
        let domains = RoundDomains::new(input, &pool_states);
        Prepared {
            table,
            bytes_per_core,
            pool_states,
            topology,
            domains,
        }
    }
}

/// One packing, and whether it completed: it stops early, with a partial result, once it has
/// looked at more than `budget` planned NodeClaims in all. `prepared` is `input`'s.
pub(super) fn pack(
    input: &SchedulingInput,
    prepared: &Prepared,
    packing: Packing,
    order: Order,
    budget: usize,
) -> (SchedulingResult, bool) {
    let mut round = Round::new(input, prepared.clone(), packing, budget);
    let order = match packing {
        Packing::CheapestGrowth => placement_order(input, order, prepared.bytes_per_core),
        Packing::FirstFit => first_fit_decreasing_order(input),
    };
    if !round.place_all(order) {
        return (round.result, false);
    }
    if packing == Packing::CheapestGrowth {
        Improve::new(
            input,
            &mut round.plan,
            &mut round.topology,
            &round.constrained_as,
        )
        .run();
    }
    let mut result = round.result;
    result.new_claims = planned_claims(
        input,
        &round.plan.table,
        &round.plan.pool_states,
        round.plan.claims.all,
    );
    (result, true)
}

/// The state of one packing.
struct Round<'a> {
    input: &'a SchedulingInput,
    packing: Packing,
    /// NodePools by position, heaviest first (then by name).
    pools: Vec<usize>,
    /// What has been planned.
    plan: Plan,
    /// Where the pods placed so far are, per constraint group.
    topology: Topology,
    /// The domains of the pools and nodes.
    domains: RoundDomains,
    /// What shapes every pod's attempts.
    policy: AttemptPolicy,
    /// Per pod, the keys it is pinned to one domain of (others' affinity follows it).
    pinned_keys: Vec<Vec<String>>,
    /// Per pod placed on a planned NodeClaim with its preferences or without some of them:
    /// the constraints it was placed under, which later moves keep (boxed: most pods are
    /// placed under their own, and a round may have tens of thousands).
    constrained_as: Vec<Option<Box<Pod>>>,
    /// Planned NodeClaims looked at so far.
    work: usize,
    /// How many the packing may look at before it gives up.
    budget: usize,
    /// Bindings and unschedulable pods so far.
    result: SchedulingResult,
}

impl<'a> Round<'a> {
    fn new(
        input: &'a SchedulingInput,
        prepared: Prepared,
        packing: Packing,
        budget: usize,
    ) -> Self {
        let mut pools: Vec<usize> = (0..input.nodepools.len()).collect();
        pools.sort_by(|a, b| {
            let (a, b) = (&input.nodepools[*a], &input.nodepools[*b]);
            b.weight.cmp(&a.weight).then_with(|| a.name.cmp(&b.name))
        });
        let Prepared {
            table,
            pool_states,
            topology,
            domains,
            bytes_per_core,
        } = prepared;
        let existing_use = input
            .existing
            .iter()
            .map(|n| NodeUse {
                requested: n.requested,
                host_ports: n.host_ports.clone(),
                attached: n.attached.clone(),
            })
            .collect();
        let claims = Claims::new(&input.pods, bytes_per_core);
        Round {
            input,
            packing,
            pools,
            plan: Plan {
                table,
                pool_states,
                claims,
                existing_use,
            },
            topology,
            domains,
            policy: AttemptPolicy::of(input),
            pinned_keys: affinity_targets(input),
            constrained_as: vec![None; input.pods.len()],
            work: 0,
            budget,
            result: SchedulingResult::default(),
        }
    }

    /// Places the pods in `order`. A pod that fails goes to the back and is tried again
    /// while the round makes progress, so a pod whose required pod affinity or spread others
    /// decide (a follower ahead of its target) joins them once they are placed. False when
    /// the budget ran out first.
    fn place_all(&mut self, order: Vec<usize>) -> bool {
        let input = self.input;
        let mut queue: VecDeque<usize> = order.into();
        let mut progress = 0usize;
        // Per pod, how many pods had been placed when it last failed: meeting it again with
        // none placed since means a whole cycle made no progress.
        let mut failed_at: BTreeMap<usize, (usize, String)> = BTreeMap::new();
        while let Some(pod_index) = queue.pop_front() {
            if self.work > self.budget {
                return false;
            }
            if failed_at
                .get(&pod_index)
                .is_some_and(|(when, _)| *when == progress)
            {
                queue.push_front(pod_index);
                break;
            }
            let pod = &input.pods[pod_index];
            if let Some(reason) = unplaceable(pod) {
                self.unschedulable(pod, reason);
                continue;
            }
            match self.try_pod(pod_index) {
                Ok(()) => progress += 1,
                Err(reason) if others_decide(pod) => {
                    failed_at.insert(pod_index, (progress, reason));
                    queue.push_back(pod_index);
                }
                Err(reason) => self.unschedulable(pod, reason),
            }
        }
        // What is left failed a whole cycle without progress.
        for pod_index in queue {
            let reason = failed_at
                .remove(&pod_index)
                .map(|(_, reason)| reason)
                .unwrap_or_default();
            self.unschedulable(&input.pods[pod_index], reason);
        }
        true
    }

    fn unschedulable(&mut self, pod: &Pod, reason: String) {
        self.result.unschedulable.push(Unschedulable {
            pod: pod.uid.clone(),
            reason,
        });
    }

    /// Places the pod under the first of its attempts that works; otherwise the reasons
    /// the last one failed.
    fn try_pod(&mut self, pod_index: usize) -> Result<(), String> {
        let input = self.input;
        let pod = &input.pods[pod_index];
        let tolerated = Tolerated::of(input, pod);
        let mut reasons = Vec::new();
        for (attempt, leniency) in self.policy.attempts(pod) {
            match self.try_attempt(pod_index, &attempt, leniency, tolerated.under(leniency)) {
                Ok(placed) => {
                    self.record(pod_index, attempt, placed);
                    return Ok(());
                }
                Err(why) => reasons = why,
            }
        }
        Err(if reasons.is_empty() {
            "no NodePool is ready to create nodes".to_owned()
        } else {
            reasons.join("; ")
        })
    }

    /// One attempt: the domains the pod's constraints allow, emptiest first, each tried in
    /// turn.
    fn try_attempt(
        &mut self,
        pod_index: usize,
        pod: &Pod,
        leniency: Leniency,
        tolerated: &[bool],
    ) -> Result<Placed, Vec<String>> {
        let input = self.input;
        let base = pod.requirement_alternatives();
        let constraints: Vec<&TopologySpread> = pod.spread.iter().collect();
        // Where the pod could go, and per spread the domains its policies count.
        let repelled = self.topology.repelled_domains(pod_index);
        let pinned = &self.pinned_keys[pod_index];
        let want = Want {
            pod,
            required: &input.pods[pod_index],
            base: &base,
            constraints: &constraints,
            tolerated,
        };
        let others = !repelled.is_empty() || !pinned.is_empty();
        let (reachable, counted) = self.domains.reach(input, &want, others);
        let reach = Reach {
            reachable: &reachable,
            counted: &counted,
            repelled: &repelled,
            pinned,
        };
        let choices = domain_choices(&self.topology, &constraints, pod, &base, &reach);
        if choices.is_empty() {
            let keys: BTreeSet<&str> = constraints
                .iter()
                .map(|c| c.topology_key.as_str())
                .chain(pod.pod_affinity.iter().map(|t| t.topology_key.as_str()))
                .chain(repelled.keys().copied())
                .filter(|k| *k != labels::HOSTNAME)
                .collect();
            return Err(vec![format!(
                "no {} satisfies the pod's requirements, topology spread (within maxSkew) and pod (anti-)affinity together (its own and that of pods already placed)",
                keys.into_iter().collect::<Vec<_>>().join(" and ")
            )]);
        }
        let hostname = HostnameRules::new(pod, &constraints, &self.topology);
        let mut reasons = Vec::new();
        for choice in choices {
            let alternatives: Vec<Requirements> = base
                .iter()
                .map(|alt| {
                    let mut narrowed = alt.clone();
                    for (key, domain) in &choice {
                        narrowed.add(key, Requirement::is_in([domain.clone()]));
                    }
                    narrowed
                })
                .collect();
            let alternative_ids: Vec<usize> = alternatives
                .iter()
                .map(|alt| self.plan.table.intern(alt))
                .collect();
            let placement = Placement {
                input,
                packing: self.packing,
                leniency,
                pod_index,
                alternatives: &alternatives,
                alternative_ids: &alternative_ids,
                hostname: &hostname,
                topology: &self.topology,
                tolerated,
                pools: &self.pools,
            };
            match self.plan.place(&placement, &mut self.work) {
                Ok(placed) => return Ok(placed),
                Err(why) => reasons = why,
            }
        }
        Err(reasons)
    }

    /// Counts a placed pod where it went; a binding for an existing node.
    fn record(&mut self, pod_index: usize, attempt: Cow<'_, Pod>, placed: Placed) {
        let input = self.input;
        match placed {
            Placed::Existing(i) => {
                let node = &input.existing[i];
                // Counted by its labels; only its required anti-affinity repels others.
                self.topology.record(&input.pods, pod_index, |key| {
                    topology::existing_domain(node, key)
                });
                self.result.bindings.push(Binding {
                    pod: attempt.uid.clone(),
                    node: node.name.clone(),
                });
            }
            Placed::Claim(i) => {
                let requirements = self.plan.table.get(self.plan.claims.all[i].requirements);
                self.topology.record(&input.pods, pod_index, |key| {
                    topology::claim_domain(requirements, i, key)
                });
                if let Cow::Owned(placed_as) = attempt {
                    self.constrained_as[pod_index] = Some(Box::new(placed_as));
                }
            }
        }
    }
}
