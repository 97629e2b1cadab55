//! One binpacking round, pure and deterministic: pending pods and the cluster in, bindings to
//! existing nodes, planned NodeClaims and reasons for the rest out.
//!
//! The objective is the $/h of the new NodeClaims, each launching as the cheapest instance
//! type that holds its pods. Pods are placed one at a time: pods that need a node of their
//! own (hostname anti-affinity they match themselves) first, then by dominant share of a
//! typical instance type, largest first. Each goes to the first existing node with room,
//! else to a planned NodeClaim it joins without raising that claim's price (the one left
//! tightest among the first few an index of spare room finds), else to whichever of growing
//! a claim and opening a new one costs less per unit of capacity bought. Afterwards, claims
//! of the same pool and requirements merge where one type for them costs less (pairs, then
//! groups of up to four: three memory-heavy pods on one 16-vCPU type for less than three
//! 4-vCPU ones, which leaves room the smaller pods then move into), and
//! each claim sheds the pods that keep it one price step up to claims that take them for
//! free, or, failing that, its pods and those of the roomiest claims of its class are
//! repacked together with it one step cheaper. Rounds of up to
//! [`FIRST_FIT_GUARD_MAX_PODS`] pods are also packed first-fit decreasing (upstream's way,
//! [`Packing::FirstFit`]), small rounds and rounds without topology constraints also in
//! [`Order::Balanced`] (beside the others, on a second thread, in rounds of 50 pods or
//! more), and the cheapest plan wins.
//! [`bound::cost_lower_bound`] is the lower bound plans are measured against. A
//! planned NodeClaim keeps every instance type that still fits its pods, so the launch can
//! fall back to the next cheapest.
//!
//! Modelled here: requests (with daemonset overhead per NodePool), node selectors and
//! required node affinity (OR of terms), taints and tolerations, NodePool requirements,
//! limits (pessimistically: a planned NodeClaim reserves the largest capacity among its
//! options) and weights, minValues, exotic instance types only for pods that need them, host
//! ports, and topology spread over any node label (`matchLabels`, `matchExpressions` and
//! `matchLabelKeys` selectors, maxSkew, minDomains, the node affinity and taints policies;
//! `DoNotSchedule` kept, `ScheduleAnyway` tried then relaxed): a spread pod is pinned to the
//! emptiest allowed domain that takes it; and required pod affinity and anti-affinity on
//! any key (selectors as for spread plus `mismatchLabelKeys`; explicit namespaces, a
//! `namespaceSelector` on namespace labels, or an empty one for all), where the first of a
//! group of pods with affinity to each other may go anywhere. Preferences (preferred node
//! and pod affinity, `ScheduleAnyway` spreads) are required at first and relaxed one at a
//! time in upstream's order ([`relaxations`]), or ignored under [`PreferencePolicy::Ignore`];
//! `PreferNoSchedule` taints keep pods off until their very last attempt. A pod's required
//! anti-affinity also keeps the pods it selects out of its node or domain, for pods on
//! existing nodes and pods placed this round alike (kube-scheduler checks both directions).
//! Pods moved after the greedy pass keep the constraints they were placed under and those
//! of the pods they join (anti-affinity both ways, hostname spread counted with the
//! newcomer, host ports) and their domains unless nothing counts them there. Volume
//! topology arrives as [`Pod::volume_requirements`] (see [`crate::model::volumes`]), which
//! narrow where a pod may go but not which nodes its spreads count; existing nodes take no
//! more volumes than their CSI drivers attach. Namespace selectors on labels are resolved
//! against [`SchedulingInput::namespace_labels`] before the round. A constraint that cannot
//! be read (an unknown operator or policy) makes the pod unschedulable with it named, never
//! placed while ignoring it.
//!
//! # Layout
//!
//! One file per phase of a round, each working on the round's state rather than passing it
//! piece by piece:
//!
//! - `input`: what a round is given, and the canonical order the solver works in;
//! - `order`: the order pods are placed in;
//! - `round`: one packing, the `Round` context that owns its state, and the queue of pods;
//! - `attempts`: the constraint sets a pod is tried under, strictest first;
//! - `domains`: where an attempt may go, and the per-node (hostname) rules;
//! - `place`: one pod onto an existing node, a planned NodeClaim or a new one;
//! - `claims`: the plan (planned NodeClaims, what existing nodes took) and the index of
//!   claims with room;
//! - `table`: requirement sets, their merges, and the priced types each allows;
//! - `pools`: each NodePool as the round plans with it (launchable types, limit headroom);
//! - `improve/`: after the greedy pass, `merge`, `shrink`, `reshuffle` and its `refill`;
//! - `output`: what a round decides; [`statics`]: what static NodePools are short of;
//! - `topology`: counts per spread and affinity group; [`bound`]: the lower bound;
//! - `reservations`: reserved capacity a round holds; [`buffers`]: CapacityBuffers as
//!   virtual pods.

mod attempts;
pub mod bound;
pub mod buffers;
mod claims;
mod domains;
mod improve;
mod input;
mod order;
mod output;
mod place;
mod pools;
mod reservations;
mod round;
pub mod statics;
mod table;
#[cfg(test)]
mod tests;
mod topology;

pub use input::{
    AntiAffinityOf, ExistingNode, Limits, MinValuesPolicy, NodePoolTemplate, PodLabels,
    PreferencePolicy, SchedulingInput, StaticPool, UnknownChoice, anti_affinity_of,
};
pub use output::{Binding, InstanceTypeOption, PlannedNodeClaim, SchedulingResult, Unschedulable};
pub use pools::PoolCache;
pub use reservations::{ReservedOfferingMode, credit_reservations};

use input::canonical;
pub(crate) use input::parse_choice;
use order::Order;
use round::{Prepared, pack};
use table::PRICE_EPSILON;

/// How a round chooses among the NodeClaims it has planned when a pod could join several.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Packing {
    /// The NodeClaim whose launch price grows least, a new one only when that is cheaper.
    #[default]
    CheapestGrowth,
    /// The first NodeClaim any of whose instance types has room (plain first-fit decreasing,
    /// as upstream packs; kept as the benchmark's baseline).
    FirstFit,
}

/// Runs one round.
pub fn solve(input: &SchedulingInput) -> SchedulingResult {
    solve_with(input, Packing::default())
}

/// Rounds up to this many pods are also packed first-fit, and the cheaper plan wins: the
/// greedy is a heuristic, small rounds are where it varies most, and there the second
/// packing costs well under a millisecond per hundred pods.
pub const FIRST_FIT_GUARD_MAX_PODS: usize = 500;

/// Larger rounds are packed first-fit too when they need few NodeClaims (first fit looks at
/// every planned NodeClaim per pod, so it is cheap then), within a bounded amount of work.
const FIRST_FIT_GUARD_MAX_CLAIMS: usize = 32;

/// A round's NodePools prepared once (which instance types each may launch, its
/// requirements interned) for several rounds over the same NodePools and DaemonSets, such
/// as a disruption pass's simulations: on a catalog of hundreds of types it is most of what
/// a small round costs.
#[derive(Clone)]
pub struct PreparedPools(round::PreparedPools);

impl std::fmt::Debug for PreparedPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PreparedPools")
    }
}

impl PreparedPools {
    /// `input`'s NodePools, prepared (from `cache`'s catalogs where it has them); the rounds
    /// given them share what they price.
    pub fn new(input: &SchedulingInput, cache: Option<&PoolCache>) -> Self {
        PreparedPools(round::PreparedPools::new(input, cache))
    }
}

/// [`solve`], its NodePools prepared already when `pools` is given (prepared from an input
/// with the same NodePools and DaemonSets), with NodeClaims planned into used-up
/// reservations handled as `mode` says (disruption's simulations fall back).
pub fn solve_in(
    input: &SchedulingInput,
    pools: Option<&PreparedPools>,
    mode: ReservedOfferingMode,
) -> SchedulingResult {
    let input = &*canonical(input);
    let prepared = match pools {
        Some(pools) => Prepared::with_pools(input, pools.0.clone()),
        None => Prepared::new(input, None),
    };
    let mut result = solve_from(input, Packing::default(), prepared);
    reservations::hold_reservations(input, &mut result, mode);
    result
}

/// [`solve`], its NodePools prepared from `cache`'s catalogs where an earlier round over the
/// same NodePools left them (a controller's rounds and disruption passes share one).
pub fn solve_cached(input: &SchedulingInput, cache: &PoolCache) -> SchedulingResult {
    solve_prepared(input, Packing::default(), Some(cache))
}

/// Runs one round with the given packing strategy; the NodeClaims static pools are short
/// of come after those planned for pods.
pub fn solve_with(input: &SchedulingInput, packing: Packing) -> SchedulingResult {
    solve_prepared(input, packing, None)
}

fn solve_prepared(
    input: &SchedulingInput,
    packing: Packing,
    cache: Option<&PoolCache>,
) -> SchedulingResult {
    let input = &*canonical(input);
    let prepared = Prepared::new(input, cache);
    let mut result = solve_from(input, packing, prepared);
    reservations::hold_reservations(input, &mut result, ReservedOfferingMode::Strict);
    result.new_claims.extend(statics::static_claims(input));
    result
}

fn solve_from(input: &SchedulingInput, packing: Packing, prepared: Prepared) -> SchedulingResult {
    let unbounded = usize::MAX;
    if packing != Packing::CheapestGrowth {
        return pack(input, &prepared, packing, Order::Largest, unbounded).0;
    }
    let unconstrained = input.pods.iter().all(|p| {
        let ignored = input.preference_policy == PreferencePolicy::Ignore;
        p.pod_affinity.is_empty()
            && p.spread.iter().all(|s| s.schedule_anyway && ignored)
            && (p.preferred_pod_affinity.is_empty() || ignored)
    });
    let small = input.pods.len() <= FIRST_FIT_GUARD_MAX_PODS;
    let first_fit = || {
        pack(
            input,
            &prepared,
            Packing::FirstFit,
            Order::Largest,
            unbounded,
        )
    };
    let (mut result, balanced, mut small_first_fit) =
        if input.pods.len() <= BALANCED_GUARD_MAX_PODS || unconstrained {
            // The packings are independent: the balanced one runs beside the others.
            let (balanced, (largest, first_fit)) = beside(
                input.pods.len() >= PARALLEL_MIN_PODS,
                || pack(input, &prepared, packing, Order::Balanced, unbounded).0,
                || {
                    let largest = pack(input, &prepared, packing, Order::Largest, unbounded).0;
                    (largest, small.then(first_fit))
                },
            );
            (largest, Some(balanced), first_fit)
        } else {
            let largest = pack(input, &prepared, packing, Order::Largest, unbounded).0;
            (largest, None, None)
        };
    if let Some(balanced) = balanced
        && better(&balanced, &result)
    {
        result = balanced;
    }
    let budget = if small {
        unbounded
    } else if result.new_claims.len() <= FIRST_FIT_GUARD_MAX_CLAIMS {
        2 * FIRST_FIT_GUARD_MAX_CLAIMS * input.pods.len()
    } else {
        return result;
    };
    let first_fit = match small_first_fit.take() {
        Some(done) => done,
        None => pack(input, &prepared, Packing::FirstFit, Order::Largest, budget),
    };
    match first_fit {
        (first_fit, true) if better(&first_fit, &result) => first_fit,
        _ => result,
    }
}

/// Rounds of at least this many pods run their independent packings on two threads: below
/// it, starting a thread costs more than it saves.
const PARALLEL_MIN_PODS: usize = 50;

/// `a` and `b`, on two threads when `parallel` (and a thread can be started), else one
/// after the other.
fn beside<A: Send, B>(
    parallel: bool,
    a: impl FnOnce() -> A + Send,
    b: impl FnOnce() -> B,
) -> (A, B) {
    if !parallel {
        let b = b();
        return (a(), b);
    }
    // Taken by the thread, or here when none can be started.
    let a = std::sync::Mutex::new(Some(a));
    let take = |a: &std::sync::Mutex<Option<_>>| {
        a.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    };
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("scheduling-packing".into())
            .spawn_scoped(scope, || take(&a).map(|a| a()));
        let b = b();
        let done = match spawned {
            Ok(handle) => handle
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            Err(_) => None,
        };
        match done.or_else(|| take(&a).map(|a| a())) {
            Some(a) => (a, b),
            None => unreachable!("the packing runs on the thread or, failing that, here"),
        }
    })
}

/// Whether plan `a` beats plan `b`: it leaves no more pods unplaced and costs less.
fn better(a: &SchedulingResult, b: &SchedulingResult) -> bool {
    a.unschedulable.len() <= b.unschedulable.len()
        && a.new_capacity_cost() + PRICE_EPSILON < b.new_capacity_cost()
}

/// Rounds up to this many pods, and rounds without topology constraints, are also packed in
/// [`Order::Balanced`], and the cheaper plan wins: which order packs better depends on how
/// many pods a node holds, which constraints decide.
const BALANCED_GUARD_MAX_PODS: usize = 500;
