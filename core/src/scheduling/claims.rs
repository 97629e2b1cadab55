//! What a round has planned so far ([`Plan`]): the planned NodeClaims, what the round put on
//! existing nodes, and the index that finds the claims with room for a pod without looking at
//! those that have none.

use std::collections::BTreeSet;

use crate::model::pod::HostPort;
use crate::model::volumes::VolumeAttachment;
use crate::model::{Pod, ResourceName, Resources};

use super::NodePoolTemplate;
use super::pools::PoolState;
use super::table::{Priced, RequirementTable, TypeBounds, type_bounds};

/// The round's plan as placement and the improvements after it change it.
#[derive(Clone)]
pub(super) struct Plan {
    /// Requirement sets and what they allow, computed once.
    pub(super) table: RequirementTable,
    /// Per NodePool, by input position.
    pub(super) pool_states: Vec<PoolState>,
    /// The planned NodeClaims.
    pub(super) claims: Claims,
    /// Per existing node, what the round put on it.
    pub(super) existing_use: Vec<NodeUse>,
}

/// What the round has put on an existing node so far, on top of what was there.
#[derive(Clone)]
pub(super) struct NodeUse {
    pub(super) requested: Resources,
    pub(super) host_ports: Vec<HostPort>,
    pub(super) attached: Vec<VolumeAttachment>,
}

#[derive(Clone)]
pub(super) struct ClaimState {
    pub(super) pool: usize,
    /// Id in the round's [`RequirementTable`].
    pub(super) requirements: usize,
    /// Whether GPU, accelerator and metal types may be launched (a pod needs one).
    pub(super) exotic_ok: bool,
    /// Types that fit `requests` within limits, cheapest first under `requirements`. For a
    /// claim of a pool without limits whose requirements ask for no minValues only the first
    /// is sure to fit (see [`ClaimTypes`]); the rest are filtered when the plan is handed out.
    pub(super) types: ClaimTypes,
    /// The largest allocatable among `types`, per resource.
    pub(super) max_allocatable: Resources,
    /// The smallest, per resource: requests within it fit every type.
    pub(super) min_allocatable: Resources,
    pub(super) reserved: Resources,
    pub(super) requests: Resources,
    pub(super) pods: Vec<usize>,
    /// Launches with fewer distinct values than minValues asks for (BestEffort).
    pub(super) min_values_relaxed: bool,
}

/// A claim's launch options, cheapest first: the priced list the claim was opened with,
/// shared with the other claims opened from it, until the options change other than at the
/// front.
///
/// While only the cheapest option decides a claim's price, a pod joining it only has to drop
/// the cheapest options that no longer fit: the claims of pools without limits whose
/// requirements ask for no minValues keep their other options until the plan is handed out
/// ([`ClaimTypes::drop_front`]), where those that no longer fit are left out. Every option
/// kept holds what any pod but the [`SMALL`](super::pools::SMALL) resources asks of the
/// claim, since such a pod makes the claim filter all of them.
#[derive(Clone, Default)]
pub(super) struct ClaimTypes {
    list: TypeList,
    start: usize,
}

#[derive(Clone)]
enum TypeList {
    Shared(std::sync::Arc<[Priced]>),
    Owned(Vec<Priced>),
}

impl Default for TypeList {
    fn default() -> Self {
        TypeList::Owned(Vec::new())
    }
}

impl ClaimTypes {
    /// Options shared with other claims until they change.
    pub(super) fn shared(list: std::sync::Arc<[Priced]>) -> Self {
        ClaimTypes {
            list: TypeList::Shared(list),
            start: 0,
        }
    }

    /// Leaves out the first `count` options.
    pub(super) fn drop_front(&mut self, count: usize) {
        self.start = (self.start + count).min(self.all().len());
    }

    /// Keeps the options `keep` accepts.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Priced) -> bool) {
        match &mut self.list {
            TypeList::Owned(list) if self.start == 0 => list.retain(keep),
            _ => *self = ClaimTypes::from(self.iter().copied().filter(keep).collect::<Vec<_>>()),
        }
    }

    /// No options.
    pub(super) fn clear(&mut self) {
        *self = ClaimTypes::default();
    }

    fn all(&self) -> &[Priced] {
        match &self.list {
            TypeList::Shared(list) => list,
            TypeList::Owned(list) => list,
        }
    }
}

impl From<Vec<Priced>> for ClaimTypes {
    fn from(list: Vec<Priced>) -> Self {
        ClaimTypes {
            list: TypeList::Owned(list),
            start: 0,
        }
    }
}

impl std::ops::Deref for ClaimTypes {
    type Target = [Priced];

    fn deref(&self) -> &[Priced] {
        &self.all()[self.start..]
    }
}

/// The NodeClaims planned so far, with an index of those that still have room for the
/// smallest pod of the round at their current price: a grid of spare CPU × spare memory
/// buckets (half-octaves), each ordered by exact spare room, so a pod finds the tightest
/// claim it fits without looking at the ones it cannot.
#[derive(Clone)]
pub(super) struct Claims {
    pub(super) all: Vec<ClaimState>,
    /// Per bucket (row-major), the open claims in it; only as long as the last bucket used.
    pub(super) open: Vec<BTreeSet<Spare>>,
    /// Per CPU bucket, a bit per memory bucket whose set is not empty.
    pub(super) rows: [u128; SPARE_BUCKETS],
    /// A bit per CPU bucket with any claim.
    pub(super) nonempty_rows: u128,
    /// Each claim's bucket and key in `open`, if it is there.
    pub(super) open_keys: Vec<Option<(usize, Spare)>>,
    /// Per resource, the smallest request of any pod in the round.
    pub(super) smallest: Resources,
    /// Memory that counts as much as one vCPU when sizing capacity (see [`Claims::gained`]).
    pub(super) bytes_per_core: f64,
}

/// Spare CPU (millicores) and memory (bytes) of a claim at its current price, and its index.
pub(super) type Spare = (i64, i64, usize);

/// Buckets per resource: two per power of two up to 2^63.
pub(super) const SPARE_BUCKETS: usize = 128;

/// Half-octave bucket of a quantity: values in one bucket differ by less than 1.5×.
pub(super) fn spare_bucket(value: i64) -> usize {
    if value <= 1 {
        return 0;
    }
    let octave = 63 - value.leading_zeros() as usize;
    let upper_half = (value >> (octave - 1)) & 1;
    2 * octave + upper_half as usize
}

/// Positions of the set bits of `mask` from `from` upwards.
pub(super) fn set_bits(mask: u128, from: usize) -> impl Iterator<Item = usize> {
    let mut rest = if from >= 128 { 0 } else { mask >> from << from };
    std::iter::from_fn(move || {
        (rest != 0).then(|| {
            let bit = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            bit
        })
    })
}

impl Claims {
    pub(super) fn new(pods: &[Pod], bytes_per_core: f64) -> Self {
        let mut smallest = Resources::ZERO;
        for r in [ResourceName::Cpu, ResourceName::Memory, ResourceName::Pods] {
            smallest.set(r, pods.iter().map(|p| p.requests.get(r)).min().unwrap_or(0));
        }
        Claims {
            all: Vec::new(),
            // Grown as buckets are used: a round over a few pods touches a few of them.
            open: Vec::new(),
            rows: [0; SPARE_BUCKETS],
            nonempty_rows: 0,
            open_keys: Vec::new(),
            smallest,
            bytes_per_core,
        }
    }

    /// The capacity a claim holding `used` gains by launching as a type with allocatable
    /// `after` instead of `before`: in vCPU-equivalents (CPU, or memory at the round's typical
    /// memory per vCPU, whichever is larger), or, for a pod that needs GPUs or other
    /// accelerators, in copies of that pod, since that is the capacity it buys.
    pub(super) fn gained(
        &self,
        pod: &Pod,
        used: &Resources,
        before: &Resources,
        after: &Resources,
    ) -> f64 {
        let gained = if pod.needs_exotic() {
            let copies = |allocatable: &Resources| {
                copies_fitting(&pod.requests, &allocatable.sub(used)) as f64
            };
            copies(after) - copies(before)
        } else {
            let units = |r: &Resources| {
                let cpu = r.get(ResourceName::Cpu) as f64 / 1000.0;
                let memory = r.get(ResourceName::Memory) as f64 / self.bytes_per_core;
                cpu.max(memory)
            };
            units(after) - units(before)
        };
        gained.max(MIN_GAIN)
    }

    pub(super) fn push(&mut self, claim: ClaimState, allocatable: &[Resources]) -> usize {
        self.all.push(claim);
        self.open_keys.push(None);
        let index = self.all.len() - 1;
        self.reindex(index, allocatable);
        index
    }

    /// Files the claim under its spare room at its cheapest type after it changed.
    pub(super) fn reindex(&mut self, index: usize, allocatable: &[Resources]) {
        if let Some((bucket, key)) = self.open_keys[index].take() {
            self.open[bucket].remove(&key);
            if self.open[bucket].is_empty() {
                let (row, column) = (bucket / SPARE_BUCKETS, bucket % SPARE_BUCKETS);
                self.rows[row] &= !(1 << column);
                if self.rows[row] == 0 {
                    self.nonempty_rows &= !(1 << row);
                }
            }
        }
        let claim = &self.all[index];
        let Some(cheapest) = claim.types.first() else {
            return;
        };
        let spare = allocatable[cheapest.index].sub(&claim.requests);
        if self.smallest.fits_in(&spare) {
            let (cpu, memory) = (
                spare.get(ResourceName::Cpu),
                spare.get(ResourceName::Memory),
            );
            let (row, column) = (spare_bucket(cpu), spare_bucket(memory));
            let bucket = row * SPARE_BUCKETS + column;
            let key = (cpu, memory, index);
            if self.open.len() <= bucket {
                self.open.resize_with(bucket + 1, BTreeSet::new);
            }
            self.open[bucket].insert(key);
            self.rows[row] |= 1 << column;
            self.nonempty_rows |= 1 << row;
            self.open_keys[index] = Some((bucket, key));
        }
    }

    /// Open claims with at least `requests` CPU and memory to spare, tightest buckets first.
    pub(super) fn with_room(&self, requests: &Resources) -> impl Iterator<Item = usize> + '_ {
        let (cpu, memory) = (
            requests.get(ResourceName::Cpu),
            requests.get(ResourceName::Memory),
        );
        let column = spare_bucket(memory);
        set_bits(self.nonempty_rows, spare_bucket(cpu))
            .flat_map(move |row| {
                set_bits(self.rows[row], column).map(move |c| row * SPARE_BUCKETS + c)
            })
            .flat_map(|bucket| self.open[bucket].iter())
            .filter(move |(c, m, _)| *c >= cpu && *m >= memory)
            .map(|(_, _, index)| *index)
    }

    /// Open claims short of `requests` in CPU or memory, tightest buckets first.
    pub(super) fn without_room(&self, requests: &Resources) -> impl Iterator<Item = usize> + '_ {
        let (cpu, memory) = (
            requests.get(ResourceName::Cpu),
            requests.get(ResourceName::Memory),
        );
        set_bits(self.nonempty_rows, 0)
            .flat_map(move |row| set_bits(self.rows[row], 0).map(move |c| row * SPARE_BUCKETS + c))
            .flat_map(|bucket| self.open[bucket].iter())
            .filter(move |(c, m, _)| *c < cpu || *m < memory)
            .map(|(_, _, index)| *index)
    }
}

/// Capacity gains below this count as this much (no division by zero).
pub(super) const MIN_GAIN: f64 = 1e-3;

/// How many copies of `pod` fit in `room`.
pub(super) fn copies_fitting(pod: &Resources, room: &Resources) -> i64 {
    ResourceName::ALL
        .into_iter()
        .filter(|r| pod.get(*r) > 0)
        .map(|r| room.get(r).max(0) / pod.get(r))
        .min()
        .unwrap_or(1)
}

/// Gives up a claim whose pods all moved: its limit reservation and node count return to
/// the pool, and it plans no launch.
pub(super) fn retire(state: &mut PoolState, claim: &mut ClaimState) {
    for r in ResourceName::ALL {
        if let Some(h) = &mut state.headroom[r as usize] {
            *h += claim.reserved.get(r);
        }
    }
    if let Some(n) = &mut state.nodes_left {
        *n += 1;
    }
    claim.reserved = Resources::ZERO;
    claim.max_allocatable = Resources::ZERO;
    claim.min_allocatable = Resources::ZERO;
    claim.requests = Resources::ZERO;
    claim.types.clear();
}

/// Gives a claim new launch options, moving its limit reservation (the largest capacity
/// among them) with them.
pub(super) fn set_types(
    pool: &NodePoolTemplate,
    state: &mut PoolState,
    claim: &mut ClaimState,
    types: Vec<Priced>,
) {
    let bounds = type_bounds(state, pool, &types);
    set_bounds(state, claim, bounds);
    claim.types = types.into();
}

/// Gives `claim` the bounds of its launch options, moving the pool's limit headroom by the
/// change in what it reserves.
fn set_bounds(state: &mut PoolState, claim: &mut ClaimState, bounds: TypeBounds) {
    state.reserve(&claim.reserved, &bounds.reserved);
    claim.max_allocatable = bounds.largest;
    claim.min_allocatable = bounds.smallest;
    claim.reserved = bounds.reserved;
}

/// Keeps the claim's launch options `keep` accepts (given the pool's state), its bounds
/// following them (worked out over the types kept in the same pass: a dropped type often
/// shares a maximum, such as the ephemeral storage every type has alike, with those kept).
pub(super) fn retain_types(
    pool: &NodePoolTemplate,
    state: &mut PoolState,
    claim: &mut ClaimState,
    mut keep: impl FnMut(&PoolState, &Priced) -> bool,
) {
    let mut bounds = TypeBounds::start(state);
    let read: &PoolState = state;
    claim.types.retain(|t| {
        let kept = keep(read, t);
        if kept {
            bounds.include(read, pool, t.index);
        }
        kept
    });
    if claim.types.is_empty() {
        bounds = type_bounds(state, pool, &[]);
    }
    set_bounds(state, claim, bounds);
}

/// The type a claim would launch as one price step down: the most expensive of its
/// requirements' types that is cheaper than its current one.
pub(super) fn cheaper_target(
    pool: &NodePoolTemplate,
    claim: &ClaimState,
    table: &mut RequirementTable,
    state: &PoolState,
) -> Option<usize> {
    let current = claim.types.first()?.price;
    let pool_index = claim.pool;
    let priced = table.priced_types(pool, pool_index, state, claim.requirements);
    priced
        .iter()
        .rev()
        .find(|t| t.price < current && (claim.exotic_ok || !state.exotic[t.index]))
        .map(|t| t.index)
}
