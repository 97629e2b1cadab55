//! The consolidation methods of a pass (reason `Underutilized`), tried after drift:
//! multi-node, then single-node. Candidates are the nodes [`command::eligible`] and
//! the shared filter ([`super::candidates`]) allow. Multi-node takes them in the order of its
//! search while their pools' `Underutilized` budgets allow; single-node tries each in turn
//! whose pool's budget allows one more node.
//!
//! Two searches decide the command, each a delete or a replace by one cheaper node that
//! validates and orchestrates the same way:
//!
//! - [`Search::Upstream`]: upstream's greedy methods ([`greedy`]): candidates by
//!   disruption cost, multi-node over the first 100, single-node with pools taking turns.
//!   Kept as the baseline `karpenter bench consolidation` measures against.
//! - [`Search::Cluster`] (what the controller runs): candidates ordered by what removing
//!   each saves per pod it moves (the dearest, emptiest nodes first, a node near its expiry
//!   moving almost for free), and the multi-node search reaches every candidate the budgets
//!   allow instead of the first 100. See [`cluster_order`].
//!
//! Below: [`condition`] (the NodeClaim `Consolidatable` condition), [`command`] (which nodes
//! consolidation may take and the delete or replace a simulation allows), [`greedy`]
//! (upstream's searches) and [`prospect`] (candidates ruled out without simulating).

pub mod command;
pub mod condition;
pub mod greedy;
pub mod prospect;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::balanced::Balance;
use super::candidates;
use super::decision::{Blocked, Decision, blocked, leaving};
use super::simulation::{self, Rest, Simulation};
use super::{Method, NodeSnapshot, Snapshot};
use crate::scheduling::{PoolCache, PreparedPools, SchedulingInput};
use command::{Action, Settings, Unconsolidatable};
use condition::Consolidatable;
use greedy::{Context, Found, disruption_cost};
use prospect::Prospects;

/// Upstream's multi-node consolidation timeout.
pub const MULTI_NODE_TIMEOUT: Duration = Duration::from_secs(60);
/// Upstream's single-node consolidation timeout.
pub const SINGLE_NODE_TIMEOUT: Duration = Duration::from_secs(180);

/// How the consolidation methods search for a command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Search {
    /// Candidates by savings per moved pod, multi-node over all of them.
    #[default]
    Cluster,
    /// Upstream's greedy order and limits.
    Upstream,
}

/// What the consolidation methods decided and saw.
#[derive(Debug, Clone, Default)]
pub struct Consolidated {
    /// The command, if a method found one.
    pub command: Option<Decision>,
    /// Candidates before budgets.
    pub eligible: usize,
    /// Candidates the shared filter refused for a reason a person can act on.
    pub blocked: Vec<Blocked>,
    /// Candidates single-node consolidation tried and could not consolidate, with why.
    pub unconsolidatable: Vec<(String, Unconsolidatable)>,
    /// Scheduling simulations run.
    pub simulations: usize,
    /// Methods whose deadline passed before they tried every candidate.
    pub timed_out: Vec<Method>,
    /// The inputs' [`fingerprint`] when the searches ran to the end and found nothing.
    pub consolidated: Option<u64>,
    /// The searches were skipped: nothing changed since they last found nothing.
    pub skipped: bool,
    /// When the single-node search ran: the candidates it could not consolidate, with
    /// those [`Inputs::unconsolidatable`] named that it did not reach (what the next pass
    /// should try last).
    pub refused: Option<BTreeSet<String>>,
}

/// What the consolidation methods decide from.
pub struct Inputs<'a> {
    /// The pass's snapshot.
    pub snapshot: &'a Snapshot,
    /// Every initialized NodeClaim's `Consolidatable` condition.
    pub conditions: &'a BTreeMap<String, Consolidatable>,
    /// NodeClaims expiring in this pass.
    pub expiring: &'a BTreeSet<&'a str>,
    /// The scheduler's next round; without it nothing is decided.
    pub base: Option<&'a SchedulingInput>,
    /// Per pool, how many more nodes the `Underutilized` budgets let go.
    pub budget: &'a BTreeMap<String, usize>,
    /// Whether to look for a command at all (an earlier method may have one).
    pub decide: bool,
    /// Which search.
    pub search: Search,
    /// Whether the searches stop at upstream's timeouts (off when a decision is checked
    /// again from the journal).
    pub timeouts: bool,
    /// The [`fingerprint`] of the last inputs the searches found nothing in: the same
    /// inputs again are not searched (upstream's `IsConsolidated`).
    pub consolidated: Option<u64>,
    /// NodeClaims the last single-node search could not consolidate: [`Search::Cluster`]
    /// tries them after the others, so a pass goes on where the last one stopped instead
    /// of simulating the same refusals again.
    pub unconsolidatable: &'a BTreeSet<String>,
    /// The catalogs of recent rounds over the base's NodePools.
    pub cache: Option<&'a PoolCache>,
    /// The content digests of the base's NodePool catalogs, if known ([`fingerprint`]).
    pub catalogs: Option<&'a [String]>,
}

/// What the searches' outcome depends on, hashed: the candidates with their pods (and what
/// evicting each costs), price and offering, the budgets, the pools' policies and Balanced
/// totals, and the round the simulations start from (its pods, nodes with what is requested
/// on them, NodePools with their requirements, taints and types, each offering with how
/// many its reservation takes, or the catalogs' content digests when `inputs` has them).
/// Equal fingerprints mean the searches would find what they found before.
fn fingerprint(
    inputs: &Inputs<'_>,
    candidates: &[&NodeSnapshot],
    (closed, leaving): (&BTreeSet<String>, &BTreeSet<String>),
    base: &SchedulingInput,
) -> u64 {
    let snapshot = inputs.snapshot;
    use std::hash::{BuildHasher, Hash, Hasher};
    let mut h = foldhash::fast::FixedState::default().build_hasher();
    for c in candidates {
        c.nodeclaim.hash(&mut h);
        c.price.to_bits().hash(&mut h);
        c.offering.hash(&mut h);
        for p in c.reschedulable() {
            p.pod.uid.hash(&mut h);
            (p.pod.priority, p.pod.deletion_cost).hash(&mut h);
        }
    }
    inputs.budget.hash(&mut h);
    closed.hash(&mut h);
    leaving.hash(&mut h);
    snapshot.spot_to_spot.hash(&mut h);
    let balance = Balance::new(snapshot);
    for pool in &snapshot.pools {
        (&pool.name, pool.policy).hash(&mut h);
        if let Some(t) = balance.totals(&pool.name) {
            (t.cost.to_bits(), t.disruption.to_bits()).hash(&mut h);
        }
    }
    for p in &base.pods {
        p.uid.hash(&mut h);
    }
    for n in &base.existing {
        (&n.name, n.requested, &n.taints, n.pods.len()).hash(&mut h);
    }
    for pool in &base.nodepools {
        (&pool.name, pool.instance_types.len(), pool.usage).hash(&mut h);
        (&pool.limits.resources, pool.limits.nodes).hash(&mut h);
        (&pool.requirements, &pool.taints).hash(&mut h);
        if inputs.catalogs.is_some() {
            continue;
        }
        for t in &pool.instance_types {
            for o in &t.offerings {
                o.price.to_bits().hash(&mut h);
                o.available.hash(&mut h);
                o.reserved.as_ref().map(|r| r.remaining).hash(&mut h);
            }
        }
    }
    inputs.catalogs.hash(&mut h);
    h.finish()
}

/// The candidates: eligible for consolidation and passing the shared filter.
pub fn candidates<'a>(inputs: &Inputs<'a>) -> (Vec<&'a NodeSnapshot>, Vec<Blocked>) {
    let snapshot = inputs.snapshot;
    let mut out = Vec::new();
    let mut reported = Vec::new();
    for node in &snapshot.nodes {
        if inputs.expiring.contains(node.nodeclaim.as_str()) {
            continue;
        }
        let condition = inputs.conditions.get(&node.nodeclaim).copied();
        if command::eligible(snapshot, node, condition).is_err() {
            continue;
        }
        match candidates::check(snapshot, node, Method::SingleNodeConsolidation) {
            Ok(()) => out.push(node),
            Err(why) => reported.extend(blocked(node, &why)),
        }
    }
    (out, reported)
}

/// Whether some node may be a consolidation candidate (so a pass needs the scheduler's next
/// round to simulate).
pub fn may_consolidate(snapshot: &Snapshot) -> bool {
    snapshot.nodes.iter().any(|node| {
        let dynamic = snapshot
            .pool(&node.nodepool)
            .is_some_and(|p| !p.is_static());
        dynamic && command::eligible(snapshot, node, Some(condition::of(snapshot, node))).is_ok()
    })
}

/// Nodes and NodeClaims younger than their pool's `consolidateAfter`: no destination for
/// moved pods.
pub fn closed(snapshot: &Snapshot) -> BTreeSet<String> {
    snapshot
        .nodes
        .iter()
        .filter(|n| {
            let after = snapshot.pool(&n.nodepool).and_then(|p| p.consolidate_after);
            match (n.initialized_ms, after) {
                (Some(at), Some(after)) => {
                    let after = i64::try_from(after.as_millis()).unwrap_or(i64::MAX);
                    snapshot.now_ms.saturating_sub(at) < after
                }
                _ => false,
            }
        })
        .flat_map(|n| n.node.iter().cloned().chain([n.nodeclaim.clone()]))
        .collect()
}

/// The candidates in the order [`Search::Cluster`] takes them: most saved per pod moved
/// first (the node's price over its [`disruption_cost`]), then by name.
pub fn cluster_order<'a>(candidates: &[&'a NodeSnapshot], now_ms: i64) -> Vec<&'a NodeSnapshot> {
    let score = |n: &NodeSnapshot| {
        let cost = disruption_cost(n, now_ms);
        if cost <= f64::EPSILON {
            f64::INFINITY
        } else {
            n.price / cost
        }
    };
    let mut sorted = candidates.to_vec();
    sorted.sort_by(|a, b| {
        score(b)
            .total_cmp(&score(a))
            .then_with(|| a.nodeclaim.cmp(&b.nodeclaim))
    });
    sorted
}

/// Runs the consolidation methods.
pub fn run(inputs: &Inputs<'_>) -> Consolidated {
    let snapshot = inputs.snapshot;
    let (eligible, blocked) = candidates(inputs);
    let mut out = Consolidated {
        eligible: eligible.len(),
        blocked,
        ..Consolidated::default()
    };
    let Some(base) = inputs.base.filter(|_| inputs.decide) else {
        return out;
    };
    let leaving = leaving(snapshot, inputs.expiring);
    let closed = closed(snapshot);
    let fingerprint = fingerprint(inputs, &eligible, (&closed, &leaving), base);
    if inputs.consolidated == Some(fingerprint) {
        out.skipped = true;
        out.consolidated = Some(fingerprint);
        return out;
    }
    let pools = PreparedPools::new(base, inputs.cache);
    let balance = Balance::new(snapshot);
    let mut context = Context {
        base,
        rest: Rest {
            leaving: &leaving,
            closed: &closed,
            pools: Some(&pools),
        },
        settings: Settings {
            spot_to_spot: snapshot.spot_to_spot,
        },
        balance: &balance,
        deadline: None,
    };
    let deadline = |timeout| inputs.timeouts.then(|| Instant::now() + timeout);
    let sorted = match inputs.search {
        Search::Upstream => greedy::by_disruption_cost(&eligible, snapshot.now_ms),
        Search::Cluster => cluster_order(&eligible, snapshot.now_ms),
    };
    let allowed = super::budgets::within(sorted.iter().copied(), &mut inputs.budget.clone());
    context.deadline = deadline(MULTI_NODE_TIMEOUT);
    let mut prospects = Prospects::new(base, &leaving, snapshot.spot_to_spot);
    let (multi, placed) = match inputs.search {
        Search::Upstream => (greedy::multi_node(&context, &allowed), BTreeSet::new()),
        Search::Cluster => narrowed(&context, &allowed, &prospects),
    };
    out.simulations += multi.simulations;
    if multi.timed_out {
        out.timed_out.push(Method::MultiNodeConsolidation);
    }
    if let Some(found) = multi.found {
        out.command = Some(decision(
            Method::MultiNodeConsolidation,
            found,
            snapshot,
            &balance,
        ));
        return out;
    }
    // One node goes at a time: every candidate of a pool whose budget allows one more is
    // tried, not only the first ones the budget counts (as upstream).
    let open: Vec<&NodeSnapshot> = sorted
        .iter()
        .copied()
        .filter(|c| inputs.budget.get(&c.nodepool).is_some_and(|l| *l > 0))
        .collect();
    context.deadline = deadline(SINGLE_NODE_TIMEOUT);
    let single = match inputs.search {
        Search::Upstream => greedy::single_node(&context, &open),
        Search::Cluster => {
            // The candidates whose pods the rest of the cluster took in a multi-node
            // simulation first: the likeliest to go alone.
            let (likely, mut others): (Vec<&NodeSnapshot>, Vec<&NodeSnapshot>) = open
                .iter()
                .copied()
                .partition(|c| placed.contains(c.nodeclaim.as_str()));
            // Then the nodes with the least to move: their pods find room most easily.
            others.sort_by_key(|c| moving_cpu(c));
            // Those the last search could not consolidate last: one command rarely changes
            // that, and the next pass would otherwise simulate the same refusals first.
            let (fresh, refused): (Vec<&NodeSnapshot>, Vec<&NodeSnapshot>) = likely
                .into_iter()
                .chain(others)
                .partition(|c| !inputs.unconsolidatable.contains(&c.nodeclaim));
            // Candidates no command can take alone are told, as the search reaches them,
            // without a simulation.
            let mut hopeless = Vec::new();
            let simulated =
                fresh
                    .into_iter()
                    .chain(refused)
                    .filter(|c| match prospects.hopeless(c) {
                        Some(why) => {
                            hopeless.push((c.nodeclaim.clone(), why));
                            false
                        }
                        None => true,
                    });
            let mut single = greedy::first_valid(&context, simulated);
            single.unconsolidatable.splice(0..0, hopeless);
            single
        }
    };
    out.simulations += single.simulations;
    let taken: &[String] = single.found.as_ref().map_or(&[], |f| &f.candidates);
    out.refused = Some(
        eligible
            .iter()
            .map(|c| &c.nodeclaim)
            .filter(|c| inputs.unconsolidatable.contains(*c) && !taken.contains(c))
            .chain(single.unconsolidatable.iter().map(|(c, _)| c))
            .cloned()
            .collect(),
    );
    if single.timed_out {
        out.timed_out.push(Method::SingleNodeConsolidation);
    }
    out.unconsolidatable = single.unconsolidatable;
    if single.found.is_none() && out.timed_out.is_empty() {
        out.consolidated = Some(fingerprint);
    }
    out.command = single
        .found
        .map(|found| decision(Method::SingleNodeConsolidation, found, snapshot, &balance));
    out
}

/// At most this many simulations narrow a multi-node command down.
const MAX_NARROWING: usize = 8;

/// Multi-node consolidation over every candidate the budgets allow, narrowed by what the
/// simulation says: all of them are tried together; when no command takes them all, the
/// candidates whose pods the simulation could not put on the rest of the cluster (they
/// needed new nodes, or fit nowhere) are dropped — their nodes stay, with their room, for
/// the others' pods — and the rest is tried, until a command takes two or more of them.
/// When that would drop all but one, the set is cut once instead to the candidates whose
/// pods fit the room the others leave ([`Prospects::packable`]), and narrowed from there.
/// After a scale-in this finds, in a simulation or two, a large set of nodes scattered
/// through the order where a prefix search stops at the first node that cannot go.
fn narrowed<'a>(
    context: &Context<'_>,
    allowed: &[&'a NodeSnapshot],
    prospects: &Prospects<'_>,
) -> (greedy::Search, BTreeSet<&'a str>) {
    let mut search = greedy::Search::default();
    let mut placed = BTreeSet::new();
    let mut packed = false;
    let mut set: Vec<&NodeSnapshot> = allowed.to_vec();
    for _ in 0..MAX_NARROWING {
        if set.len() < 2 {
            break;
        }
        if context.expired() {
            search.timed_out = true;
            break;
        }
        search.simulations += 1;
        let simulation = simulation::run(context.base, &set, context.rest);
        let stuck = stuck(&simulation, &set);
        placed.extend(
            set.iter()
                .map(|c| c.nodeclaim.as_str())
                .filter(|c| !stuck.contains(c)),
        );
        let decided = command::decide(&set, simulation.outcome(), context.base, context.settings)
            .and_then(|c| {
                (context.balance.approve(&set, c.savings))
                    .map(|()| c)
                    .map_err(Unconsolidatable::NotWorthIt)
            });
        match decided {
            Ok(consolidation) => {
                search.found = Some(Found {
                    candidates: set.iter().map(|c| c.nodeclaim.clone()).collect(),
                    consolidation,
                    simulation,
                });
                break;
            }
            Err(_) if stuck.is_empty() => break,
            Err(_) if set.len() - stuck.len() >= 2 => {
                set.retain(|c| !stuck.contains(c.nodeclaim.as_str()));
            }
            Err(_) if !packed => {
                packed = true;
                let cut = prospects.packable(&set);
                if cut.len() == set.len() {
                    break;
                }
                set = cut;
            }
            Err(_) => break,
        }
    }
    (search, placed)
}

/// The candidates some of whose moved pods the simulation did not bind to an existing node.
fn stuck<'a>(simulation: &Simulation, candidates: &[&'a NodeSnapshot]) -> BTreeSet<&'a str> {
    let bound: BTreeSet<&str> = simulation
        .result
        .bindings
        .iter()
        .map(|b| b.pod.as_str())
        .collect();
    candidates
        .iter()
        .filter(|c| {
            c.reschedulable()
                .any(|p| !bound.contains(p.pod.uid.as_str()))
        })
        .map(|c| c.nodeclaim.as_str())
        .collect()
}

/// The CPU (millicores) of the pods that would move off `node`.
fn moving_cpu(node: &NodeSnapshot) -> i64 {
    node.reschedulable()
        .map(|p| p.pod.requests.get(crate::model::ResourceName::Cpu))
        .sum()
}

/// The command `found`, with its scores in the Balanced pools it takes nodes of.
fn decision(method: Method, found: Found, snapshot: &Snapshot, balance: &Balance) -> Decision {
    let replacements = match found.consolidation.action {
        Action::Delete => Vec::new(),
        Action::Replace(claim) => vec![*claim],
    };
    let nodes: Vec<&NodeSnapshot> = (snapshot.nodes.iter())
        .filter(|n| found.candidates.contains(&n.nodeclaim))
        .collect();
    Decision {
        method,
        scores: balance.scores(&nodes, found.consolidation.savings),
        candidates: found.candidates,
        replacements,
        simulation: Some(found.simulation),
        savings: found.consolidation.savings,
    }
}

#[cfg(test)]
mod tests;
