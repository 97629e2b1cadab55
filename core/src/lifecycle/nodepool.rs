//! A NodePool's count of its NodeClaims against its limits, as its actor keeps it: a planned
//! NodeClaim reserves the largest capacity among its launch options (pessimistic, as
//! upstream), a launched one counts its instance type's capacity, an ended one nothing; a
//! NodeClaim is created only while the limits hold with it counted.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::model::{InstanceType, ResourceName, Resources};
use crate::scheduling::{InstanceTypeOption, Limits};

/// The NodeClaims a NodePool counts, with the capacity each counts for, and its limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PoolCount {
    limits: Limits,
    claims: BTreeMap<String, Resources>,
}

/// Whether a planned NodeClaim may be created.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Create it, counting it at this capacity.
    Create(Resources),
    /// Refuse it: the limit it would break.
    Refuse(LimitReached),
}

/// The limit a NodeClaim would break.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LimitReached {
    /// `limits.nodes`.
    #[error("limit of {limit} nodes reached")]
    Nodes {
        /// The limit.
        limit: i64,
    },
    /// A resource limit.
    #[error("{} would reach {usage} of its limit {limit}", resource.as_str())]
    Resource {
        /// The resource.
        resource: ResourceName,
        /// What the pool would use with the NodeClaim counted.
        usage: i64,
        /// The limit.
        limit: i64,
    },
}

impl PoolCount {
    /// Nothing counted yet, under `limits`.
    pub fn new(limits: Limits) -> Self {
        PoolCount {
            limits,
            claims: BTreeMap::new(),
        }
    }

    /// The NodePool's limits changed.
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The limits.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Summed capacity of the NodeClaims counted.
    pub fn usage(&self) -> Resources {
        self.claims
            .values()
            .fold(Resources::ZERO, |acc, r| acc.add(r))
    }

    /// NodeClaims counted (against the node limit).
    pub fn nodes(&self) -> i64 {
        self.claims.len() as i64
    }

    /// Names of the NodeClaims counted.
    pub fn nodeclaims(&self) -> impl Iterator<Item = &String> {
        self.claims.keys()
    }

    /// Whether a NodeClaim planned with `options` may be created: it counts at the largest
    /// capacity among them (`types` knows each option's capacity), and every limit must
    /// hold with it counted.
    pub fn admit(&self, options: &[InstanceTypeOption], types: &[Arc<InstanceType>]) -> Admission {
        let reservation = options
            .iter()
            .map(|o| capacity_of(types, &o.name))
            .fold(Resources::ZERO, |acc, r| acc.max(&r));
        if let Some(nodes) = self.limits.nodes
            && self.nodes() + 1 > nodes
        {
            return Admission::Refuse(LimitReached::Nodes { limit: nodes });
        }
        let usage = self.usage().add(&reservation);
        let broken = self
            .limits
            .resources
            .iter()
            .find(|(r, limit)| usage.get(**r) > **limit);
        match broken {
            Some((r, limit)) => Admission::Refuse(LimitReached::Resource {
                resource: *r,
                usage: usage.get(*r),
                limit: *limit,
            }),
            None => Admission::Create(reservation),
        }
    }

    /// Counts `nodeclaim` at `capacity` (created, adopted, or launched as a known type).
    pub fn count(&mut self, nodeclaim: &str, capacity: Resources) {
        self.claims.insert(nodeclaim.to_owned(), capacity);
    }

    /// Stops counting `nodeclaim` (it ended); whether it was counted.
    pub fn forget(&mut self, nodeclaim: &str) -> bool {
        self.claims.remove(nodeclaim).is_some()
    }
}

/// The capacity of the instance type named `name` among `types` (nothing if unknown).
pub fn capacity_of(types: &[Arc<InstanceType>], name: &str) -> Resources {
    types
        .iter()
        .find(|t| t.name == name)
        .map(|t| t.capacity)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{CapacityType, ResourceName};

    fn types() -> Vec<Arc<InstanceType>> {
        [("m.large", 2), ("m.xlarge", 4), ("m.2xlarge", 8)]
            .into_iter()
            .map(|(name, cpu)| {
                Arc::new(InstanceType::new(
                    name,
                    Default::default(),
                    Resources::cpu_memory(cpu * 1000, cpu << 32),
                    Resources::ZERO,
                    Vec::new(),
                ))
            })
            .collect()
    }

    fn options(names: &[&str]) -> Vec<InstanceTypeOption> {
        names
            .iter()
            .map(|n| InstanceTypeOption {
                name: (*n).into(),
                price: 0.1,
                zone: "a".into(),
                capacity_type: CapacityType::Spot,
            })
            .collect()
    }

    #[test]
    fn a_planned_nodeclaim_reserves_its_largest_option_and_is_refused_past_a_limit() {
        let mut limits = Limits::default();
        limits.resources.insert(ResourceName::Cpu, 12_000);
        let mut count = PoolCount::new(limits);
        let plan = options(&["m.large", "m.2xlarge"]);
        assert_eq!(
            count.admit(&plan, &types()),
            Admission::Create(Resources::cpu_memory(8000, 8 << 32))
        );
        count.count("a", Resources::cpu_memory(8000, 8 << 32));
        assert_eq!(
            count.admit(&plan, &types()),
            Admission::Refuse(LimitReached::Resource {
                resource: ResourceName::Cpu,
                usage: 16000,
                limit: 12000
            })
        );
        // Launched as the small type, it counts only that: the next one fits again.
        count.count("a", Resources::cpu_memory(2000, 2 << 32));
        assert!(matches!(count.admit(&plan, &types()), Admission::Create(_)));
        assert!(count.forget("a"));
        assert!(!count.forget("a"));
        assert_eq!(count.usage(), Resources::ZERO);
    }

    #[test]
    fn the_node_limit_counts_every_nodeclaim_and_changes_with_the_pool() {
        let mut count = PoolCount::new(Limits {
            nodes: Some(1),
            ..Limits::default()
        });
        let plan = options(&["m.large"]);
        count.count("a", Resources::ZERO);
        assert_eq!(
            count.admit(&plan, &types()),
            Admission::Refuse(LimitReached::Nodes { limit: 1 })
        );
        count.set_limits(Limits::default());
        assert!(matches!(count.admit(&plan, &types()), Admission::Create(_)));
        assert_eq!(count.nodes(), 1);
        assert_eq!(count.nodeclaims().collect::<Vec<_>>(), ["a"]);
        // An option the catalog no longer lists reserves nothing.
        assert_eq!(
            count.admit(&options(&["gone.large"]), &types()),
            Admission::Create(Resources::ZERO)
        );
    }
}
