//! A NodePool as a round plans with it: the instance types it may launch, what each
//! allows, daemonset overhead, and how much of its limits is left.
//!
//! A DaemonSet's pod is charged on a new node where it would run, as upstream charges it:
//! the pool's taints tolerated (`PreferNoSchedule` aside) and one of its node-affinity
//! alternatives admitted by both the pool's template and the instance type. What every
//! launchable type runs is the pool's `daemon` overhead, carried by each new claim; what only
//! some types run is taken off those types' allocatable, so a DaemonSet that needs arm64
//! costs nothing on amd64 types and one no type can run costs nothing at all. The host ports
//! of the DaemonSets that run on any of the pool's types are taken on every new node: a pod
//! that needs one of them cannot be planned onto the pool.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use foldhash::fast::FixedState;
use ustr::Ustr;

use crate::model::pod::HostPort;
use crate::model::taints::untolerated;
use crate::model::{InstanceType, Pod, Requirements, ResourceName, Resources, Taint};

use super::{InstanceTypeOption, NodePoolTemplate};

/// An instance type a claim may launch as, priced under the claim's requirements.
#[derive(Debug, Clone, Copy)]
pub(super) struct Priced {
    /// Position in the NodePool's catalog.
    pub(super) index: usize,
    /// USD/hour of its cheapest allowed offering.
    pub(super) price: f64,
    /// Position of that offering in the type's offerings.
    pub(super) offering: usize,
}

/// Instance types with their prices, cheapest first (ties by catalog position).
pub(super) type PricedTypes = Arc<[Priced]>;

/// A NodePool as the round plans with it. What it says per instance type never changes in
/// a round and is shared (every packing starts from a copy, a disruption pass's simulations
/// from the same one, and rounds over the same catalog from a [`PoolCache`]).
#[derive(Clone)]
pub(super) struct PoolState {
    /// Indices of launchable types (offering available, compatible with the pool).
    pub(super) types: Arc<[usize]>,
    /// Allocatable of every instance type of the pool, by index.
    pub(super) allocatable: Arc<[Resources]>,
    /// Whether each instance type is exotic (GPU, accelerator, metal), by index.
    pub(super) exotic: Arc<[bool]>,
    /// The pool's requirements (id in the round's [`RequirementTable`]).
    pub(super) requirements: usize,
    /// Requests of the DaemonSets every launchable type runs: each new claim carries them.
    pub(super) daemon: Resources,
    /// Host ports the DaemonSets' pods bind on the pool's new nodes.
    pub(super) daemon_ports: Arc<[HostPort]>,
    /// Per instance type, by index, the requests of the DaemonSets only some types run (not
    /// in `daemon`; already taken off `allocatable`).
    pub(super) daemon_extra: Arc<[Resources]>,
    /// Limit headroom, `None` where unlimited.
    pub(super) headroom: [Option<i64>; crate::model::resources::RESOURCE_COUNT],
    /// The resources with a limit, as bits by index (those whose headroom is `Some`).
    limited: u32,
    pub(super) nodes_left: Option<i64>,
    /// The resources any of the pool's types has (capacity or allocatable), so maxima over
    /// its types skip the rest.
    pub(super) resources: Arc<[usize]>,
    /// Per type, by index, its allocatable and capacity of the [`SMALL`] resources: placing a
    /// pod passes over hundreds of types, and these are a fifth of the memory to read.
    pub(super) small: Arc<[Small]>,
    /// Whether no type has any resource outside the [`SMALL`] ones.
    pub(super) only_small: bool,
    /// What rounds over the same catalog work out once (see [`PoolCatalog`]).
    pub(super) catalog: Arc<PoolCatalog>,
}

/// CPU, memory, pods and ephemeral storage: the resources most types and pods have.
pub(super) const SMALL: usize = 4;

/// One type's allocatable and capacity of the [`SMALL`] resources.
#[derive(Clone, Copy)]
pub(super) struct Small {
    pub(super) allocatable: [i64; SMALL],
    pub(super) capacity: [i64; SMALL],
}

impl PoolState {
    /// Whether the pool has no resource limits (every type is within its headroom).
    pub(super) fn unlimited(&self) -> bool {
        self.limited == 0
    }

    /// A claim that reserved `before` of the pool's limits reserves `after` now.
    pub(super) fn reserve(&mut self, before: &Resources, after: &Resources) {
        let mut bits = self.limited;
        while bits != 0 {
            let r = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(h) = &mut self.headroom[r] {
                *h += before.0[r] - after.0[r];
            }
        }
    }

    /// Whether a node of `capacity` stays within the pool's limit headroom per resource,
    /// crediting `credit` (what the claim reserves already).
    #[inline]
    pub(super) fn within_headroom(&self, capacity: &Resources, credit: &Resources) -> bool {
        let mut bits = self.limited;
        while bits != 0 {
            let r = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if self.headroom[r].is_some_and(|h| capacity.0[r] > h + credit.0[r]) {
                return false;
            }
        }
        true
    }

    /// The state of NodePool `pool` at the start of a round; `requirements` is the id of
    /// its requirements in the round's table. Its per-type arrays come from `cache` when
    /// an earlier round prepared the same pool over the same catalog and DaemonSets.
    pub(super) fn new(
        pool: &NodePoolTemplate,
        daemonsets: &[Pod],
        requirements: usize,
        cache: Option<&PoolCache>,
    ) -> PoolState {
        let catalog = match cache {
            Some(cache) => cache.catalog(pool, daemonsets),
            None => Arc::new(PoolCatalog::new(pool, daemonsets)),
        };
        let mut headroom = [None; crate::model::resources::RESOURCE_COUNT];
        let mut limited = 0u32;
        for (r, limit) in &pool.limits.resources {
            headroom[*r as usize] = Some(limit - pool.usage.get(*r));
            limited |= 1 << *r as usize;
        }
        let arrays = &catalog.arrays;
        PoolState {
            types: arrays.types.clone(),
            allocatable: arrays.allocatable.clone(),
            exotic: arrays.exotic.clone(),
            requirements,
            daemon: arrays.daemon,
            daemon_ports: arrays.daemon_ports.clone(),
            daemon_extra: arrays.daemon_extra.clone(),
            headroom,
            limited,
            nodes_left: pool.limits.nodes.map(|n| n - pool.node_count),
            resources: arrays.resources.clone(),
            small: arrays.small.clone(),
            only_small: arrays.only_small,
            catalog,
        }
    }
}

/// What a NodePool's instance types say given its requirements, taints and the cluster's
/// DaemonSets: computed once per such combination ([`PoolCache`]), then shared by every
/// round, packing and simulation over it, with what those rounds work out as they go (the
/// priced types of each requirement set, the domains of each topology key, the launch
/// options each type gives). Checking hundreds of instance types against the pool was most
/// of what a small round, and each disruption pass, cost.
pub(super) struct PoolCatalog {
    /// What it was made from: the same instance types (by identity), requirements, taints
    /// and DaemonSets make the same catalog.
    instance_types: Vec<Arc<InstanceType>>,
    requirements: Requirements,
    taints: Vec<Taint>,
    daemonsets: Vec<Pod>,
    /// The per-type arrays of [`PoolState`].
    arrays: PoolArrays,
    /// Requirement set → the launchable types it allows, priced, cheapest first.
    priced: Mutex<HashMap<Requirements, PricedTypes, FixedState>>,
    /// Topology key → the values the pool's new nodes could have (ordinary types, all).
    domains: Mutex<HashMap<String, Arc<KeyDomains>, FixedState>>,
    /// Per type, the launch options its offerings give.
    options: OnceLock<TypeOptions>,
    /// The memory per vCPU of every type with CPU, sorted.
    memory_per_core: OnceLock<Vec<f64>>,
}

/// A pool's values of one topology key: with its ordinary instance types, and with its
/// exotic ones too.
#[derive(Default)]
pub(super) struct KeyDomains {
    pub(super) ordinary: BTreeSet<String>,
    pub(super) all: BTreeSet<String>,
}

/// Per type, the launch options its offerings give, in offering order: those of type `i`
/// start at `start[i]` in `options`.
pub(super) struct TypeOptions {
    pub(super) start: Vec<usize>,
    pub(super) options: Vec<InstanceTypeOption>,
}

#[derive(Clone)]
struct PoolArrays {
    types: Arc<[usize]>,
    allocatable: Arc<[Resources]>,
    exotic: Arc<[bool]>,
    daemon: Resources,
    daemon_ports: Arc<[HostPort]>,
    daemon_extra: Arc<[Resources]>,
    resources: Arc<[usize]>,
    small: Arc<[Small]>,
    only_small: bool,
}

/// Requirement sets whose priced types a catalog keeps; past it they are dropped and priced
/// again as rounds meet them (a set over a full catalog is some 20 KB).
const PRICED_KEPT: usize = 512;

impl PoolCatalog {
    fn new(pool: &NodePoolTemplate, daemonsets: &[Pod]) -> Self {
        let types: Vec<usize> = pool
            .instance_types
            .iter()
            .enumerate()
            .filter(|(_, it)| {
                it.requirements.compatible(&pool.requirements).is_ok()
                    && it.cheapest_offering(&pool.requirements).is_some()
            })
            .map(|(i, _)| i)
            .collect();
        let daemons = PoolDaemons::of(pool, daemonsets);
        let overhead = daemons.overhead(pool, &types);
        let allocatable: Vec<Resources> = pool
            .instance_types
            .iter()
            .zip(&overhead.extra)
            .map(|(it, extra)| it.allocatable().sub(extra).max(&Resources::ZERO))
            .collect();
        let resources: Arc<[usize]> = (0..crate::model::resources::RESOURCE_COUNT)
            .filter(|r| pool.instance_types.iter().any(|it| it.capacity.0[*r] != 0))
            .collect();
        let arrays = PoolArrays {
            types: types.into(),
            small: allocatable
                .iter()
                .zip(&pool.instance_types)
                .map(|(a, it)| Small {
                    allocatable: std::array::from_fn(|r| a.0[r]),
                    capacity: std::array::from_fn(|r| it.capacity.0[r]),
                })
                .collect(),
            only_small: resources.iter().all(|r| *r < SMALL),
            resources,
            allocatable: allocatable.into(),
            exotic: pool
                .instance_types
                .iter()
                .map(|it| it.is_exotic())
                .collect(),
            daemon: overhead.common,
            daemon_ports: overhead.ports.into(),
            daemon_extra: overhead.extra.into(),
        };
        PoolCatalog {
            instance_types: pool.instance_types.clone(),
            requirements: pool.requirements.clone(),
            taints: pool.taints.clone(),
            daemonsets: daemonsets.to_vec(),
            arrays,
            priced: Mutex::default(),
            domains: Mutex::default(),
            options: OnceLock::new(),
            memory_per_core: OnceLock::new(),
        }
    }

    /// Whether it is the catalog of `pool` with `daemonsets`.
    fn is_of(&self, pool: &NodePoolTemplate, daemonsets: &[Pod]) -> bool {
        self.instance_types.len() == pool.instance_types.len()
            && self
                .instance_types
                .iter()
                .zip(&pool.instance_types)
                .all(|(a, b)| Arc::ptr_eq(a, b))
            && self.requirements == pool.requirements
            && self.taints == pool.taints
            && self.daemonsets == daemonsets
    }

    /// The priced types of `requirements`, if a round priced them.
    pub(super) fn priced(&self, requirements: &Requirements) -> Option<PricedTypes> {
        lock(&self.priced).get(requirements).cloned()
    }

    /// Keeps the priced types of `requirements`.
    pub(super) fn keep_priced(&self, requirements: &Requirements, types: &PricedTypes) {
        let mut priced = lock(&self.priced);
        if priced.len() >= PRICED_KEPT {
            priced.clear();
        }
        priced.insert(requirements.clone(), types.clone());
    }

    /// The values of `key` the pool's new nodes could have, made by `make` the first time.
    pub(super) fn domains(&self, key: &str, make: impl FnOnce() -> KeyDomains) -> Arc<KeyDomains> {
        if let Some(domains) = lock(&self.domains).get(key) {
            return domains.clone();
        }
        let domains = Arc::new(make());
        lock(&self.domains).insert(key.to_owned(), domains.clone());
        domains
    }

    /// The launch options of every type, made the first time they are asked for.
    pub(super) fn options(&self) -> &TypeOptions {
        self.options.get_or_init(|| {
            let mut start = Vec::with_capacity(self.instance_types.len());
            let mut options = Vec::new();
            for it in &self.instance_types {
                start.push(options.len());
                let name = Ustr::from(&it.name);
                options.extend(it.offerings.iter().map(|o| InstanceTypeOption {
                    name,
                    price: o.price,
                    zone: Ustr::from(&o.zone),
                    capacity_type: o.capacity_type,
                }));
            }
            TypeOptions { start, options }
        })
    }

    /// The memory per vCPU of every type with CPU, sorted.
    pub(super) fn memory_per_core(&self) -> &[f64] {
        self.memory_per_core.get_or_init(|| {
            let mut ratios: Vec<f64> = self
                .instance_types
                .iter()
                .filter(|it| it.capacity.get(ResourceName::Cpu) > 0)
                .map(|it| {
                    it.capacity.get(ResourceName::Memory) as f64
                        / (it.capacity.get(ResourceName::Cpu) as f64 / 1000.0)
                })
                .collect();
            ratios.sort_by(f64::total_cmp);
            ratios
        })
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The [`PoolCatalog`]s of recent rounds, for the rounds and disruption passes that follow
/// them over the same NodePools: a controller's catalogs change only when a NodePool, its
/// node class, the cloud's offerings or the DaemonSets do. Keeps the most recently used.
#[derive(Default)]
pub struct PoolCache(Mutex<Vec<Arc<PoolCatalog>>>);

impl std::fmt::Debug for PoolCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("PoolCache")
            .field(&lock(&self.0).len())
            .finish()
    }
}

/// Catalogs a [`PoolCache`] keeps: a few for each of a cluster's NodePools.
const CATALOGS_KEPT: usize = 32;

impl PoolCache {
    /// How many catalogs it keeps.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        lock(&self.0).len()
    }

    /// The catalog of `pool` with `daemonsets`, made if no recent round made it.
    fn catalog(&self, pool: &NodePoolTemplate, daemonsets: &[Pod]) -> Arc<PoolCatalog> {
        {
            let mut kept = lock(&self.0);
            if let Some(at) = kept.iter().position(|c| c.is_of(pool, daemonsets)) {
                let catalog = kept.remove(at);
                kept.insert(0, catalog.clone());
                return catalog;
            }
        }
        // Made outside the lock: it checks every instance type.
        let catalog = Arc::new(PoolCatalog::new(pool, daemonsets));
        let mut kept = lock(&self.0);
        if let Some(made) = kept.iter().find(|c| c.is_of(pool, daemonsets)) {
            // Another round made it meanwhile.
            return made.clone();
        }
        kept.insert(0, catalog.clone());
        kept.truncate(CATALOGS_KEPT);
        catalog
    }
}

/// The DaemonSets whose pods would run on some new node of a pool, each with the
/// node-affinity alternatives of its pod the pool's template admits.
pub(super) struct PoolDaemons<'a>(Vec<(&'a Pod, Vec<Requirements>)>);

/// What a pool's DaemonSets hold on its new nodes (see the module doc).
pub(super) struct DaemonOverhead {
    /// Requests of those every launchable type runs.
    pub(super) common: Resources,
    /// Per instance type, by index, requests of those only some launchable types run.
    pub(super) extra: Vec<Resources>,
    /// Host ports of those any launchable type runs.
    pub(super) ports: Vec<HostPort>,
}

impl<'a> PoolDaemons<'a> {
    /// The DaemonSets of `daemonsets` that tolerate the pool's taints and that its template
    /// admits.
    pub(super) fn of(pool: &NodePoolTemplate, daemonsets: &'a [Pod]) -> Self {
        PoolDaemons(
            daemonsets
                .iter()
                .filter(|ds| untolerated(&pool.taints, &ds.tolerations).is_none())
                .map(|ds| {
                    let admitted = ds
                        .requirement_alternatives()
                        .into_iter()
                        .filter(|alt| alt.compatible_with_template(&pool.requirements).is_ok())
                        .collect::<Vec<_>>();
                    (ds, admitted)
                })
                .filter(|(_, admitted)| !admitted.is_empty())
                .collect(),
        )
    }

    /// Whether DaemonSet `alternatives` run on nodes of instance type `it`.
    fn run_on(alternatives: &[Requirements], it: &InstanceType) -> bool {
        alternatives
            .iter()
            .any(|alt| it.requirements.compatible(alt).is_ok())
    }

    /// Summed requests of the DaemonSets that run on `it`.
    pub(super) fn requests_on(&self, it: &InstanceType) -> Resources {
        self.0
            .iter()
            .filter(|(_, alternatives)| Self::run_on(alternatives, it))
            .fold(Resources::ZERO, |acc, (ds, _)| acc.add(&ds.requests))
    }

    /// Their overhead on the pool's new nodes, `launchable` being the indices of the types
    /// the pool may launch.
    pub(super) fn overhead(&self, pool: &NodePoolTemplate, launchable: &[usize]) -> DaemonOverhead {
        let mut out = DaemonOverhead {
            common: Resources::ZERO,
            extra: vec![Resources::ZERO; pool.instance_types.len()],
            ports: Vec::new(),
        };
        for (ds, alternatives) in &self.0 {
            let runs: Vec<bool> = pool
                .instance_types
                .iter()
                .map(|it| Self::run_on(alternatives, it))
                .collect();
            // Without launchable types nothing is planned; every admitted DaemonSet counts.
            let everywhere = launchable.iter().all(|&i| runs[i]);
            if everywhere {
                out.common = out.common.add(&ds.requests);
            } else {
                for (extra, _) in out.extra.iter_mut().zip(&runs).filter(|(_, on)| **on) {
                    *extra = extra.add(&ds.requests);
                }
            }
            if everywhere || launchable.iter().any(|&i| runs[i]) {
                out.ports.extend(ds.host_ports.iter().cloned());
            }
        }
        out.ports.sort();
        out.ports.dedup();
        out
    }
}
