//! Conversions between the domain events and their version 1 stored form: every domain
//! event has one (`From<&DomainEvent>`), and every version 1 payload reads back as the event
//! it was written from ([`v1::Event::into_event`]), failing only on a quantity or resource
//! the model cannot hold, which it names.

use ustr::Ustr;

use super::v1;
use crate::events::{
    DomainEvent, MessageOutcome, NodeClaimPlan, PoolInput, RoundInput, RoundRecord,
};
use crate::model::instance_type::{CapacityType, Offering};
use crate::model::pod::{
    HostPort, NamespaceSelector, PodAffinityTerm, SelectorExpression, SelectorOperator,
    TopologySpread,
};
use crate::model::volumes::VolumeAttachment;
use crate::model::{InstanceType, Pod, Requirements, ResourceName, Resources, Taint, Toleration};
use crate::model::{Reservation, ReservationKind, ReservedCapacity};
use crate::ports::{Instance, InstanceState, InterruptionKind, OfferingKey};
use crate::scheduling::{
    ExistingNode, InstanceTypeOption, Limits, MinValuesPolicy, PreferencePolicy,
};
use crate::vocab::Operator;

mod disruption;
mod history;
mod nominations;

/// A decoding failure: which field, and why.
type Result<T> = std::result::Result<T, String>;

/// One-to-one conversions between a domain enum and its stored twin.
macro_rules! same_variants {
    ($domain:ty, $stored:ty, [$($variant:ident),* $(,)?]) => {
        impl From<$domain> for $stored {
            fn from(value: $domain) -> Self {
                match value {
                    $(<$domain>::$variant => <$stored>::$variant,)*
                }
            }
        }
        impl From<$stored> for $domain {
            fn from(value: $stored) -> Self {
                match value {
                    $(<$stored>::$variant => <$domain>::$variant,)*
                }
            }
        }
    };
}

same_variants!(
    Operator,
    v1::Operator,
    [Gte, Lte, In, NotIn, Exists, DoesNotExist, Gt, Lt]
);
same_variants!(
    SelectorOperator,
    v1::SelectorOperator,
    [In, NotIn, Exists, DoesNotExist]
);
same_variants!(CapacityType, v1::CapacityType, [Reserved, Spot, OnDemand]);
same_variants!(
    ReservationKind,
    v1::ReservationKind,
    [Default, CapacityBlock]
);

fn reservation(r: &Reservation) -> v1::Reservation {
    v1::Reservation {
        id: r.id.clone(),
        kind: r.kind.into(),
    }
}

fn from_reservation(r: v1::Reservation) -> Reservation {
    Reservation {
        id: r.id,
        kind: r.kind.into(),
    }
}
same_variants!(
    InstanceState,
    v1::InstanceState,
    [Running, ShuttingDown, Terminated]
);
same_variants!(
    InterruptionKind,
    v1::InterruptionKind,
    [
        SpotInterrupted,
        ScheduledChange,
        InstanceStopped,
        InstanceTerminated,
        RebalanceRecommendation,
        CapacityBlockExpiring
    ]
);
same_variants!(
    MessageOutcome,
    v1::MessageOutcome,
    [Notice, Ignored, Malformed]
);
same_variants!(PreferencePolicy, v1::PreferencePolicy, [Respect, Ignore]);
same_variants!(MinValuesPolicy, v1::MinValuesPolicy, [Strict, BestEffort]);

/// A known resource's stored name; `None` for an extended resource, stored by its name.
fn stored_resource(r: ResourceName) -> Option<v1::ResourceName> {
    Some(match r {
        ResourceName::Cpu => v1::ResourceName::Cpu,
        ResourceName::Memory => v1::ResourceName::Memory,
        ResourceName::Pods => v1::ResourceName::Pods,
        ResourceName::EphemeralStorage => v1::ResourceName::EphemeralStorage,
        ResourceName::NvidiaGpu => v1::ResourceName::NvidiaGpu,
        ResourceName::AmdGpu => v1::ResourceName::AmdGpu,
        ResourceName::Neuron => v1::ResourceName::Neuron,
        ResourceName::NeuronCore => v1::ResourceName::NeuronCore,
        ResourceName::Gaudi => v1::ResourceName::Gaudi,
        ResourceName::Efa => v1::ResourceName::Efa,
        ResourceName::PodEni => v1::ResourceName::PodEni,
        ResourceName::PrivateIpv4 => v1::ResourceName::PrivateIpv4,
        ResourceName::Extended0
        | ResourceName::Extended1
        | ResourceName::Extended2
        | ResourceName::Extended3
        | ResourceName::Extended4
        | ResourceName::Extended5
        | ResourceName::Extended6
        | ResourceName::Extended7 => return None,
    })
}

fn from_stored_resource(r: v1::ResourceName) -> ResourceName {
    match r {
        v1::ResourceName::Cpu => ResourceName::Cpu,
        v1::ResourceName::Memory => ResourceName::Memory,
        v1::ResourceName::Pods => ResourceName::Pods,
        v1::ResourceName::EphemeralStorage => ResourceName::EphemeralStorage,
        v1::ResourceName::NvidiaGpu => ResourceName::NvidiaGpu,
        v1::ResourceName::AmdGpu => ResourceName::AmdGpu,
        v1::ResourceName::Neuron => ResourceName::Neuron,
        v1::ResourceName::NeuronCore => ResourceName::NeuronCore,
        v1::ResourceName::Gaudi => ResourceName::Gaudi,
        v1::ResourceName::Efa => ResourceName::Efa,
        v1::ResourceName::PodEni => ResourceName::PodEni,
        v1::ResourceName::PrivateIpv4 => ResourceName::PrivateIpv4,
    }
}

fn quantities(r: &Resources) -> v1::Quantities {
    v1::Quantities(
        r.to_quantities()
            .into_iter()
            .map(|(name, value)| (name.to_owned(), value))
            .collect(),
    )
}

fn resources(q: &v1::Quantities, field: &str) -> Result<Resources> {
    let (resources, unknown) =
        Resources::from_quantities(q.0.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .map_err(|e| format!("{field}: {e}"))?;
    match unknown.first() {
        Some(name) => Err(format!("{field}: unknown resource {name:?}")),
        None => Ok(resources),
    }
}

fn requirements(r: &Requirements) -> Vec<v1::Requirement> {
    r.entries()
        .into_iter()
        .map(|(key, operator, values, min_values)| v1::Requirement {
            key,
            operator: operator.into(),
            values,
            min_values,
        })
        .collect()
}

fn from_requirements(stored: &[v1::Requirement]) -> Requirements {
    Requirements::from_entries(stored.iter().map(|r| {
        (
            r.key.as_str(),
            Operator::from(r.operator),
            r.values.as_slice(),
            r.min_values,
        )
    }))
}

fn taint(t: &Taint) -> v1::Taint {
    v1::Taint {
        key: t.key.clone(),
        value: t.value.clone(),
        effect: t.effect.clone(),
    }
}

fn from_taint(t: v1::Taint) -> Taint {
    Taint {
        key: t.key,
        value: t.value,
        effect: t.effect,
    }
}

fn expressions(e: &[SelectorExpression]) -> Vec<v1::SelectorExpression> {
    e.iter()
        .map(|e| v1::SelectorExpression {
            key: e.key.clone(),
            operator: e.operator.into(),
            values: e.values.clone(),
        })
        .collect()
}

fn from_expressions(e: Vec<v1::SelectorExpression>) -> Vec<SelectorExpression> {
    e.into_iter()
        .map(|e| SelectorExpression {
            key: e.key,
            operator: e.operator.into(),
            values: e.values,
        })
        .collect()
}

fn affinity_term(t: &PodAffinityTerm) -> v1::PodAffinityTerm {
    v1::PodAffinityTerm {
        topology_key: t.topology_key.clone(),
        selector: t.selector.clone(),
        expressions: expressions(&t.expressions),
        namespaces: t.namespaces.clone(),
        all_namespaces: t.all_namespaces,
        namespace_selector: t
            .namespace_selector
            .as_ref()
            .map(|s| v1::NamespaceSelector {
                match_labels: s.match_labels.clone(),
                expressions: expressions(&s.expressions),
            }),
        anti: t.anti,
    }
}

fn from_affinity_term(t: v1::PodAffinityTerm) -> PodAffinityTerm {
    PodAffinityTerm {
        topology_key: t.topology_key,
        selector: t.selector,
        expressions: from_expressions(t.expressions),
        namespaces: t.namespaces,
        all_namespaces: t.all_namespaces,
        namespace_selector: t.namespace_selector.map(|s| NamespaceSelector {
            match_labels: s.match_labels,
            expressions: from_expressions(s.expressions),
        }),
        anti: t.anti,
    }
}

fn spread(s: &TopologySpread) -> v1::TopologySpread {
    v1::TopologySpread {
        topology_key: s.topology_key.clone(),
        max_skew: s.max_skew,
        selector: s.selector.clone(),
        expressions: expressions(&s.expressions),
        schedule_anyway: s.schedule_anyway,
        min_domains: s.min_domains,
        ignore_node_affinity: s.ignore_node_affinity,
        honor_node_taints: s.honor_node_taints,
    }
}

fn from_spread(s: v1::TopologySpread) -> TopologySpread {
    TopologySpread {
        topology_key: s.topology_key,
        max_skew: s.max_skew,
        selector: s.selector,
        expressions: from_expressions(s.expressions),
        schedule_anyway: s.schedule_anyway,
        min_domains: s.min_domains,
        ignore_node_affinity: s.ignore_node_affinity,
        honor_node_taints: s.honor_node_taints,
    }
}

fn host_ports(p: &[HostPort]) -> Vec<v1::HostPort> {
    p.iter()
        .map(|p| v1::HostPort {
            ip: p.ip.clone(),
            protocol: p.protocol.clone(),
            port: p.port,
        })
        .collect()
}

fn from_host_ports(p: Vec<v1::HostPort>) -> Vec<HostPort> {
    p.into_iter()
        .map(|p| HostPort {
            ip: p.ip,
            protocol: p.protocol,
            port: p.port,
        })
        .collect()
}

fn attachments(a: &[VolumeAttachment]) -> Vec<v1::VolumeAttachment> {
    a.iter()
        .map(|a| v1::VolumeAttachment {
            driver: a.driver.clone(),
            volume: a.volume.clone(),
        })
        .collect()
}

fn from_attachments(a: Vec<v1::VolumeAttachment>) -> Vec<VolumeAttachment> {
    a.into_iter()
        .map(|a| VolumeAttachment {
            driver: a.driver,
            volume: a.volume,
        })
        .collect()
}

fn pod(p: &Pod) -> v1::Pod {
    v1::Pod {
        uid: p.uid.clone(),
        namespace: p.namespace.clone(),
        name: p.name.clone(),
        labels: p.labels.clone(),
        requests: quantities(&p.requests),
        node_selector: requirements(&p.node_selector),
        affinity_terms: p.affinity_terms.iter().map(requirements).collect(),
        tolerations: p
            .tolerations
            .iter()
            .map(|t| v1::Toleration {
                key: t.key.clone(),
                exists: t.exists,
                value: t.value.clone(),
                effect: t.effect.clone(),
            })
            .collect(),
        spread: p.spread.iter().map(spread).collect(),
        pod_affinity: p.pod_affinity.iter().map(affinity_term).collect(),
        preferred_node_affinity: p
            .preferred_node_affinity
            .iter()
            .map(|(w, r)| (*w, requirements(r)))
            .collect(),
        preferred_pod_affinity: p
            .preferred_pod_affinity
            .iter()
            .map(|(w, t)| (*w, affinity_term(t)))
            .collect(),
        volume_requirements: p.volume_requirements.iter().map(requirements).collect(),
        volume_attachments: attachments(&p.volume_attachments),
        blocked: p.blocked.clone(),
        host_ports: host_ports(&p.host_ports),
        unsupported: p.unsupported.clone(),
        unknown_resources: p.unknown_resources.clone(),
        priority: p.priority,
        deletion_cost: p.deletion_cost,
        owner: p.owner.clone(),
    }
}

fn from_pod(p: v1::Pod) -> Result<Pod> {
    Ok(Pod {
        requests: resources(&p.requests, &format!("pod {}: requests", p.uid))?,
        uid: p.uid,
        namespace: p.namespace,
        name: p.name,
        labels: p.labels,
        node_selector: from_requirements(&p.node_selector),
        affinity_terms: p
            .affinity_terms
            .iter()
            .map(|r| from_requirements(r))
            .collect(),
        tolerations: p
            .tolerations
            .into_iter()
            .map(|t| Toleration {
                key: t.key,
                exists: t.exists,
                value: t.value,
                effect: t.effect,
            })
            .collect(),
        spread: p.spread.into_iter().map(from_spread).collect(),
        pod_affinity: p.pod_affinity.into_iter().map(from_affinity_term).collect(),
        preferred_node_affinity: p
            .preferred_node_affinity
            .iter()
            .map(|(w, r)| (*w, from_requirements(r)))
            .collect(),
        preferred_pod_affinity: p
            .preferred_pod_affinity
            .into_iter()
            .map(|(w, t)| (w, from_affinity_term(t)))
            .collect(),
        volume_requirements: p
            .volume_requirements
            .iter()
            .map(|r| from_requirements(r))
            .collect(),
        volume_attachments: from_attachments(p.volume_attachments),
        blocked: p.blocked,
        host_ports: from_host_ports(p.host_ports),
        unsupported: p.unsupported,
        unknown_resources: p.unknown_resources,
        priority: p.priority,
        deletion_cost: p.deletion_cost,
        owner: p.owner,
    })
}

fn existing(n: &ExistingNode) -> v1::ExistingNode {
    v1::ExistingNode {
        name: n.name.clone(),
        labels: n.labels.clone(),
        taints: n.taints.iter().map(taint).collect(),
        allocatable: quantities(&n.allocatable),
        requested: quantities(&n.requested),
        pods: n.pods.clone(),
        anti_affinity: n
            .anti_affinity
            .iter()
            .map(|(ns, t)| (ns.clone(), affinity_term(t)))
            .collect(),
        host_ports: host_ports(&n.host_ports),
        attach_limits: n.attach_limits.clone(),
        attached: attachments(&n.attached),
    }
}

fn from_existing(n: v1::ExistingNode) -> Result<ExistingNode> {
    Ok(ExistingNode {
        allocatable: resources(&n.allocatable, &format!("node {}: allocatable", n.name))?,
        requested: resources(&n.requested, &format!("node {}: requested", n.name))?,
        name: n.name,
        labels: n.labels,
        taints: n.taints.into_iter().map(from_taint).collect(),
        pods: n.pods,
        anti_affinity: n
            .anti_affinity
            .into_iter()
            .map(|(ns, t)| (ns, from_affinity_term(t)))
            .collect(),
        host_ports: from_host_ports(n.host_ports),
        attach_limits: n.attach_limits,
        attached: from_attachments(n.attached),
    })
}

fn pool_input(p: &PoolInput) -> v1::PoolInput {
    v1::PoolInput {
        name: p.name.clone(),
        weight: p.weight,
        requirements: requirements(&p.requirements),
        taints: p.taints.iter().map(taint).collect(),
        limits: v1::Limits {
            resources: (p.limits.resources.iter())
                .filter_map(|(r, v)| Some((stored_resource(*r)?, *v)))
                .collect(),
            extended: (p.limits.resources.iter())
                .filter(|(r, _)| stored_resource(**r).is_none())
                .map(|(r, v)| (r.as_str().to_owned(), *v))
                .collect(),
            nodes: p.limits.nodes,
        },
        usage: quantities(&p.usage),
        node_count: p.node_count,
        catalog: p.catalog.clone(),
        replicas: p.replicas,
    }
}

fn from_pool_input(p: v1::PoolInput) -> Result<PoolInput> {
    let pool = p.name.clone();
    Ok(PoolInput {
        usage: resources(&p.usage, &format!("nodepool {}: usage", p.name))?,
        name: p.name,
        weight: p.weight,
        requirements: from_requirements(&p.requirements),
        taints: p.taints.into_iter().map(from_taint).collect(),
        limits: Limits {
            resources: (p.limits.resources.into_iter())
                .map(|(r, v)| Ok((from_stored_resource(r), v)))
                .chain(p.limits.extended.into_iter().map(|(name, v)| {
                    ResourceName::register(&name)
                        .map(|r| (r, v))
                        .ok_or_else(|| {
                            format!("nodepool {pool}: limits: unknown resource {name:?}")
                        })
                }))
                .collect::<Result<_>>()?,
            nodes: p.limits.nodes,
        },
        node_count: p.node_count,
        catalog: p.catalog,
        replicas: p.replicas,
    })
}

fn round_input(i: &RoundInput) -> v1::RoundInput {
    v1::RoundInput {
        pods: i.pods.iter().map(pod).collect(),
        nodepools: i.nodepools.iter().map(pool_input).collect(),
        existing: i.existing.iter().map(existing).collect(),
        daemonsets: i.daemonsets.iter().map(pod).collect(),
        preference_policy: i.preference_policy.into(),
        min_values_policy: i.min_values_policy.into(),
        namespace_labels: i.namespace_labels.clone(),
    }
}

fn from_round_input(i: v1::RoundInput) -> Result<RoundInput> {
    Ok(RoundInput {
        pods: i.pods.into_iter().map(from_pod).collect::<Result<_>>()?,
        nodepools: i
            .nodepools
            .into_iter()
            .map(from_pool_input)
            .collect::<Result<_>>()?,
        existing: i
            .existing
            .into_iter()
            .map(from_existing)
            .collect::<Result<_>>()?,
        daemonsets: i
            .daemonsets
            .into_iter()
            .map(from_pod)
            .collect::<Result<_>>()?,
        preference_policy: i.preference_policy.into(),
        min_values_policy: i.min_values_policy.into(),
        namespace_labels: i.namespace_labels,
    })
}

fn round_record(r: &RoundRecord) -> v1::RoundRecord {
    v1::RoundRecord {
        round: r.round,
        pods: r.pods as u64,
        bindings: r.bindings.clone(),
        nodeclaims: r.nodeclaims.clone(),
        unschedulable: r.unschedulable.clone(),
        duration_us: r.duration_us,
        input: r.input.as_deref().map(|i| Box::new(round_input(i))),
        repeats: r.repeats,
    }
}

fn from_round_record(r: v1::RoundRecord) -> Result<RoundRecord> {
    Ok(RoundRecord {
        round: r.round,
        pods: usize::try_from(r.pods).map_err(|e| format!("round {}: pods: {e}", r.round))?,
        bindings: r.bindings,
        nodeclaims: r.nodeclaims,
        unschedulable: r.unschedulable,
        duration_us: r.duration_us,
        input: match r.input {
            Some(i) => Some(Box::new(from_round_input(*i)?)),
            None => None,
        },
        repeats: r.repeats,
    })
}

/// An instance type as version 1 stores it (what catalog digests hash).
pub(super) fn instance_type(t: &InstanceType) -> v1::InstanceType {
    v1::InstanceType {
        name: t.name.clone(),
        labels: t.labels.clone(),
        capacity: quantities(&t.capacity),
        overhead: quantities(&t.overhead),
        offerings: t
            .offerings
            .iter()
            .map(|o| v1::Offering {
                zone: o.zone.clone(),
                capacity_type: o.capacity_type.into(),
                price: o.price,
                available: o.available,
                overlay: o.overlay.clone(),
                reserved: o.reserved.as_ref().map(|r| v1::ReservedCapacity {
                    reservation: reservation(&r.reservation),
                    remaining: r.remaining,
                }),
            })
            .collect(),
    }
}

fn from_instance_type(t: v1::InstanceType) -> Result<InstanceType> {
    let capacity = resources(&t.capacity, &format!("instance type {}: capacity", t.name))?;
    let overhead = resources(&t.overhead, &format!("instance type {}: overhead", t.name))?;
    let offerings = t
        .offerings
        .into_iter()
        .map(|o| Offering {
            overlay: o.overlay,
            reserved: o.reserved.map(|r| ReservedCapacity {
                reservation: from_reservation(r.reservation),
                remaining: r.remaining,
            }),
            ..Offering::new(o.zone, o.capacity_type.into(), o.price, o.available)
        })
        .collect();
    Ok(InstanceType::new(
        t.name, t.labels, capacity, overhead, offerings,
    ))
}

fn instance(i: &Instance) -> v1::Instance {
    v1::Instance {
        id: i.id.clone(),
        provider_id: i.provider_id.clone(),
        instance_type: i.instance_type.clone(),
        zone: i.zone.clone(),
        capacity_type: i.capacity_type.into(),
        price: i.price,
        image_id: i.image_id.clone(),
        nodeclaim: i.nodeclaim.clone(),
        nodepool: i.nodepool.clone(),
        state: i.state.into(),
        launched_at_ms: i.launched_at_ms,
        price_source: i.price_source.clone(),
        reservation: i.reservation.as_ref().map(reservation),
    }
}

fn from_instance(i: v1::Instance) -> Instance {
    Instance {
        id: i.id,
        provider_id: i.provider_id,
        instance_type: i.instance_type,
        zone: i.zone,
        capacity_type: i.capacity_type.into(),
        price: i.price,
        image_id: i.image_id,
        nodeclaim: i.nodeclaim,
        nodepool: i.nodepool,
        state: i.state.into(),
        launched_at_ms: i.launched_at_ms,
        price_source: i.price_source,
        reservation: i.reservation.map(from_reservation),
    }
}

fn plan(p: &NodeClaimPlan) -> v1::NodeClaimPlan {
    v1::NodeClaimPlan {
        nodeclaim: p.nodeclaim.clone(),
        nodepool: p.nodepool.clone(),
        round: p.round,
        pods: p.pods.clone(),
        requests: p.requests.clone(),
        instance_types: p
            .instance_types
            .iter()
            .map(|o| v1::InstanceTypeOption {
                name: o.name.to_string(),
                price: o.price,
                zone: o.zone.to_string(),
                capacity_type: o.capacity_type.into(),
            })
            .collect(),
        min_values_relaxed: p.min_values_relaxed,
    }
}

fn from_plan(p: v1::NodeClaimPlan) -> NodeClaimPlan {
    NodeClaimPlan {
        nodeclaim: p.nodeclaim,
        nodepool: p.nodepool,
        round: p.round,
        pods: p.pods,
        requests: p.requests,
        instance_types: p
            .instance_types
            .into_iter()
            .map(|o| InstanceTypeOption {
                name: Ustr::from(&o.name),
                price: o.price,
                zone: Ustr::from(&o.zone),
                capacity_type: o.capacity_type.into(),
            })
            .collect(),
        min_values_relaxed: p.min_values_relaxed,
    }
}

fn offering_key(k: &OfferingKey) -> v1::OfferingKey {
    v1::OfferingKey {
        instance_type: k.instance_type.clone(),
        zone: k.zone.clone(),
        capacity_type: k.capacity_type.into(),
    }
}

fn from_offering_key(k: v1::OfferingKey) -> OfferingKey {
    OfferingKey {
        instance_type: k.instance_type,
        zone: k.zone,
        capacity_type: k.capacity_type.into(),
    }
}

impl From<&DomainEvent> for v1::Event {
    fn from(event: &DomainEvent) -> Self {
        use v1::Event as S;
        let c = String::clone;
        match event {
            DomainEvent::NodePoolObserved {
                nodepool,
                weight,
                hash,
            } => S::NodePoolObserved {
                nodepool: c(nodepool),
                weight: *weight,
                hash: c(hash),
            },
            DomainEvent::PodPending { uid, pod, requests } => S::PodPending {
                uid: c(uid),
                pod: c(pod),
                requests: requests.clone(),
            },
            DomainEvent::PodBound { uid, node, pod } => S::PodBound {
                uid: c(uid),
                node: c(node),
                pod: pod.clone(),
            },
            DomainEvent::PodDeleted { uid } => S::PodDeleted { uid: c(uid) },
            DomainEvent::NominationExpired {
                uid,
                nodeclaim,
                node,
            } => S::NominationExpired {
                uid: c(uid),
                nodeclaim: c(nodeclaim),
                node: c(node),
            },
            DomainEvent::RoundCompleted(r) => S::RoundCompleted(Box::new(round_record(r))),
            DomainEvent::NominationsChecked(r) => {
                S::NominationsChecked(Box::new(nominations::record(r)))
            }
            DomainEvent::InstanceTypesObserved {
                digest,
                instance_types,
            } => S::InstanceTypesObserved {
                digest: c(digest),
                instance_types: instance_types.iter().map(|t| instance_type(t)).collect(),
            },
            DomainEvent::NodeClaimPlanned(p) => S::NodeClaimPlanned(Box::new(plan(p))),
            DomainEvent::LaunchRequested {
                nodeclaim,
                client_token,
            } => S::LaunchRequested {
                nodeclaim: c(nodeclaim),
                client_token: c(client_token),
            },
            DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance: i,
            } => S::NodeClaimLaunched {
                nodeclaim: c(nodeclaim),
                instance: Box::new(instance(i)),
            },
            DomainEvent::LaunchFailed {
                nodeclaim,
                reason,
                unavailable,
            } => S::LaunchFailed {
                nodeclaim: c(nodeclaim),
                reason: c(reason),
                unavailable: unavailable.iter().map(offering_key).collect(),
            },
            DomainEvent::NodeClaimRegistered { nodeclaim, node } => S::NodeClaimRegistered {
                nodeclaim: c(nodeclaim),
                node: c(node),
            },
            DomainEvent::NodeClaimInitialized { nodeclaim } => S::NodeClaimInitialized {
                nodeclaim: c(nodeclaim),
            },
            DomainEvent::InterruptionReceived {
                nodeclaim,
                instance_id,
                kind,
            } => S::InterruptionReceived {
                nodeclaim: c(nodeclaim),
                instance_id: c(instance_id),
                kind: (*kind).into(),
            },
            DomainEvent::NodeClaimDraining { nodeclaim, reason } => S::NodeClaimDraining {
                nodeclaim: c(nodeclaim),
                reason: c(reason),
            },
            DomainEvent::NodeClaimTerminating { nodeclaim, reason } => S::NodeClaimTerminating {
                nodeclaim: c(nodeclaim),
                reason: c(reason),
            },
            DomainEvent::NodeClaimTerminated { nodeclaim, reason } => S::NodeClaimTerminated {
                nodeclaim: c(nodeclaim),
                reason: c(reason),
            },
            DomainEvent::InterruptionMessage {
                queue,
                message_id,
                outcome,
                kind,
                instance_ids,
                detail,
            } => S::InterruptionMessage {
                queue: c(queue),
                message_id: c(message_id),
                outcome: (*outcome).into(),
                kind: kind.map(Into::into),
                instance_ids: instance_ids.clone(),
                detail: c(detail),
            },
            DomainEvent::InstanceGarbageCollected {
                instance_id,
                nodeclaim,
                reason,
            } => S::InstanceGarbageCollected {
                instance_id: c(instance_id),
                nodeclaim: c(nodeclaim),
                reason: c(reason),
            },
            DomainEvent::DisruptionDecided(r) => {
                S::DisruptionDecided(Box::new(disruption::record(r)))
            }
            DomainEvent::DisruptionProgressed { command, phase } => {
                let (phase, detail) = disruption::phase(phase);
                S::DisruptionProgressed {
                    command: *command,
                    phase,
                    detail,
                }
            }
            DomainEvent::JournalTrimmed {
                through,
                events,
                bytes,
            } => S::JournalTrimmed {
                through: *through,
                events: *events,
                bytes: *bytes,
            },
            DomainEvent::JournalShipped {
                through,
                segments,
                bytes,
            } => S::JournalShipped {
                through: *through,
                segments: *segments,
                bytes: *bytes,
            },
            DomainEvent::HistoryTakenOver(t) => S::HistoryTakenOver(Box::new(history::takeover(t))),
        }
    }
}

impl v1::Event {
    /// The domain event this payload was written from.
    pub fn into_event(self) -> Result<DomainEvent> {
        use v1::Event as S;
        Ok(match self {
            S::NodePoolObserved {
                nodepool,
                weight,
                hash,
            } => DomainEvent::NodePoolObserved {
                nodepool,
                weight,
                hash,
            },
            S::PodPending { uid, pod, requests } => DomainEvent::PodPending { uid, pod, requests },
            S::PodBound { uid, node, pod } => DomainEvent::PodBound { uid, node, pod },
            S::PodDeleted { uid } => DomainEvent::PodDeleted { uid },
            S::NominationExpired {
                uid,
                nodeclaim,
                node,
            } => DomainEvent::NominationExpired {
                uid,
                nodeclaim,
                node,
            },
            S::RoundCompleted(r) => DomainEvent::RoundCompleted(Box::new(from_round_record(*r)?)),
            S::NominationsChecked(r) => {
                DomainEvent::NominationsChecked(Box::new(nominations::from_record(*r)))
            }
            S::InstanceTypesObserved {
                digest,
                instance_types,
            } => DomainEvent::InstanceTypesObserved {
                digest,
                instance_types: instance_types
                    .into_iter()
                    .map(|t| from_instance_type(t).map(std::sync::Arc::new))
                    .collect::<Result<_>>()?,
            },
            S::NodeClaimPlanned(p) => DomainEvent::NodeClaimPlanned(Box::new(from_plan(*p))),
            S::LaunchRequested {
                nodeclaim,
                client_token,
            } => DomainEvent::LaunchRequested {
                nodeclaim,
                client_token,
            },
            S::NodeClaimLaunched {
                nodeclaim,
                instance,
            } => DomainEvent::NodeClaimLaunched {
                nodeclaim,
                instance: Box::new(from_instance(*instance)),
            },
            S::LaunchFailed {
                nodeclaim,
                reason,
                unavailable,
            } => DomainEvent::LaunchFailed {
                nodeclaim,
                reason,
                unavailable: unavailable.into_iter().map(from_offering_key).collect(),
            },
            S::NodeClaimRegistered { nodeclaim, node } => {
                DomainEvent::NodeClaimRegistered { nodeclaim, node }
            }
            S::NodeClaimInitialized { nodeclaim } => {
                DomainEvent::NodeClaimInitialized { nodeclaim }
            }
            S::InterruptionReceived {
                nodeclaim,
                instance_id,
                kind,
            } => DomainEvent::InterruptionReceived {
                nodeclaim,
                instance_id,
                kind: kind.into(),
            },
            S::NodeClaimDraining { nodeclaim, reason } => {
                DomainEvent::NodeClaimDraining { nodeclaim, reason }
            }
            S::NodeClaimTerminating { nodeclaim, reason } => {
                DomainEvent::NodeClaimTerminating { nodeclaim, reason }
            }
            S::NodeClaimTerminated { nodeclaim, reason } => {
                DomainEvent::NodeClaimTerminated { nodeclaim, reason }
            }
            S::InterruptionMessage {
                queue,
                message_id,
                outcome,
                kind,
                instance_ids,
                detail,
            } => DomainEvent::InterruptionMessage {
                queue,
                message_id,
                outcome: outcome.into(),
                kind: kind.map(Into::into),
                instance_ids,
                detail,
            },
            S::InstanceGarbageCollected {
                instance_id,
                nodeclaim,
                reason,
            } => DomainEvent::InstanceGarbageCollected {
                instance_id,
                nodeclaim,
                reason,
            },
            S::DisruptionDecided(r) => {
                DomainEvent::DisruptionDecided(Box::new(disruption::from_record(*r)?))
            }
            S::DisruptionProgressed {
                command,
                phase,
                detail,
            } => DomainEvent::DisruptionProgressed {
                command,
                phase: disruption::from_phase(&phase, &detail)?,
            },
            S::JournalTrimmed {
                through,
                events,
                bytes,
            } => DomainEvent::JournalTrimmed {
                through,
                events,
                bytes,
            },
            S::JournalShipped {
                through,
                segments,
                bytes,
            } => DomainEvent::JournalShipped {
                through,
                segments,
                bytes,
            },
            S::HistoryTakenOver(t) => {
                DomainEvent::HistoryTakenOver(Box::new(history::from_takeover(*t)))
            }
        })
    }
}
