//! Whether an instance still matches its EC2NodeClass, as upstream's AWS provider judges it
//! (`IsDrifted`), without any network: the static hash stamped on the NodeClaim against the
//! class's own (`NodeClassDrift`), then the instance's image, subnet and security groups
//! against what the class resolves to now (`AMIDrift`, `SubnetDrift`, `SecurityGroupDrift`),
//! and the reservation a reserved instance runs in against those the class selects
//! (`CapacityReservationDrift`).

use std::collections::{BTreeMap, BTreeSet};

use karpenter_core::ports::{Drift, NodeClassHash};

use crate::nodeclass::ResolvedNodeClass;

/// What is known of the instance.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceFacts<'a> {
    /// Its image.
    pub image_id: &'a str,
    /// Its subnet, when EC2 says.
    pub subnet_id: Option<&'a str>,
    /// Its security groups.
    pub security_groups: &'a [String],
    /// Its instance type's labels (arch, GPU, …), which pick the images it may boot.
    pub type_labels: &'a BTreeMap<String, String>,
    /// The capacity reservation it was launched into (`None` as well without the
    /// `ReservedCapacity` gate).
    pub reservation: Option<&'a str>,
}

fn drift(reason: &str, message: String) -> Option<Drift> {
    Some(Drift {
        reason: reason.into(),
        message,
    })
}

/// Why the instance no longer matches `resolved` (the class named `class`, whose static hash
/// is now `current`); `None` while it does. A hash of another version is not compared.
pub fn judge(
    class: &str,
    stamped: Option<&NodeClassHash>,
    current: &NodeClassHash,
    instance: &InstanceFacts<'_>,
    resolved: &ResolvedNodeClass,
) -> Option<Drift> {
    if let Some(drift) = current.drift_from(stamped, class) {
        return Some(drift);
    }
    let images: Vec<&str> = resolved
        .amis
        .iter()
        .filter(|a| a.requirements.admits(instance.type_labels))
        .map(|a| a.id.as_str())
        .collect();
    if !images.is_empty() && !images.contains(&instance.image_id) {
        return drift(
            "AMIDrift",
            format!(
                "image {} is no longer among the images EC2NodeClass {class} resolves to for its instance type ({})",
                instance.image_id,
                images.join(", ")
            ),
        );
    }
    if let Some(subnet) = instance.subnet_id
        && !resolved.subnets.is_empty()
        && !resolved.subnets.iter().any(|s| s.id == subnet)
    {
        return drift(
            "SubnetDrift",
            format!("subnet {subnet} is no longer selected by EC2NodeClass {class}"),
        );
    }
    let wanted: BTreeSet<&str> = resolved
        .security_groups
        .iter()
        .map(|(id, _)| id.as_str())
        .collect();
    let actual: BTreeSet<&str> = instance
        .security_groups
        .iter()
        .map(String::as_str)
        .collect();
    if !wanted.is_empty() && !actual.is_empty() && wanted != actual {
        let list = |s: &BTreeSet<&str>| s.iter().copied().collect::<Vec<_>>().join(", ");
        return drift(
            "SecurityGroupDrift",
            format!(
                "security groups [{}] differ from those EC2NodeClass {class} selects [{}]",
                list(&actual),
                list(&wanted)
            ),
        );
    }
    if let Some(id) = instance.reservation
        && !resolved.capacity_reservations.iter().any(|r| r.id == id)
    {
        return drift(
            "CapacityReservationDrift",
            format!("capacity reservation {id} is no longer selected by EC2NodeClass {class}"),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::selection::{Ami, Subnet};
    use karpenter_core::api::ec2nodeclass::EC2NODECLASS_HASH_VERSION;
    use karpenter_core::model::{Requirement, Requirements};

    fn resolved() -> ResolvedNodeClass {
        let mut arm = Requirements::new();
        arm.add("kubernetes.io/arch", Requirement::is_in(["arm64"]));
        let mut amd = Requirements::new();
        amd.add("kubernetes.io/arch", Requirement::is_in(["amd64"]));
        let ami = |id: &str, requirements: Requirements| Ami {
            id: id.into(),
            name: id.into(),
            created: "2026-11-01T00:00:00Z".into(),
            deprecated: false,
            requirements,
        };
        ResolvedNodeClass {
            name: "default".into(),
            family: karpenter_core::api::ec2nodeclass::AmiFamily::AL2023,
            subnets: vec![Subnet {
                id: "subnet-a".into(),
                zone: "us-west-2a".into(),
                zone_id: None,
                available_ips: 100,
            }],
            subnet_per_zone: BTreeMap::new(),
            security_groups: vec![("sg-1".into(), "nodes".into())],
            amis: vec![ami("ami-amd-2", amd), ami("ami-arm-2", arm)],
            capacity_reservations: Vec::new(),
            instance_profile: None,
            conditions: Vec::new(),
        }
    }

    fn facts<'a>(
        image: &'a str,
        subnet: &'a str,
        groups: &'a [String],
        labels: &'a BTreeMap<String, String>,
    ) -> InstanceFacts<'a> {
        InstanceFacts {
            image_id: image,
            subnet_id: Some(subnet),
            security_groups: groups,
            type_labels: labels,
            reservation: None,
        }
    }

    #[test]
    fn each_kind_of_drift_is_named_and_a_matching_instance_is_not_drifted() {
        let resolved = resolved();
        let amd: BTreeMap<String, String> =
            [("kubernetes.io/arch".to_owned(), "amd64".to_owned())].into();
        let groups = vec!["sg-1".to_owned()];
        let same = NodeClassHash {
            hash: "1".into(),
            version: EC2NODECLASS_HASH_VERSION.into(),
        };
        let ok = facts("ami-amd-2", "subnet-a", &groups, &amd);
        assert_eq!(judge("default", Some(&same), &same, &ok, &resolved), None);
        let reason = |stamped: Option<&NodeClassHash>, f: &InstanceFacts<'_>| {
            judge("default", stamped, &same, f, &resolved).map(|d| d.reason)
        };
        let old = NodeClassHash {
            hash: "0".into(),
            ..same.clone()
        };
        assert_eq!(reason(Some(&old), &ok).as_deref(), Some("NodeClassDrift"));
        // Another version's hash is not compared.
        let upstream = NodeClassHash {
            hash: "0".into(),
            version: "v4".into(),
        };
        assert_eq!(reason(Some(&upstream), &ok), None);
        // The arm64 image is not the amd64 type's.
        let ami = facts("ami-arm-2", "subnet-a", &groups, &amd);
        assert_eq!(reason(None, &ami).as_deref(), Some("AMIDrift"));
        let subnet = facts("ami-amd-2", "subnet-b", &groups, &amd);
        assert_eq!(reason(None, &subnet).as_deref(), Some("SubnetDrift"));
        let other = vec!["sg-1".to_owned(), "sg-2".to_owned()];
        let sg = facts("ami-amd-2", "subnet-a", &other, &amd);
        assert_eq!(reason(None, &sg).as_deref(), Some("SecurityGroupDrift"));
        // A reserved instance whose reservation the class no longer selects.
        let mut reserved = ok.clone();
        reserved.reservation = Some("cr-0gone");
        assert_eq!(
            reason(None, &reserved).as_deref(),
            Some("CapacityReservationDrift")
        );
        let mut selected = resolved.clone();
        selected.capacity_reservations = vec![crate::reservations::CapacityReservationInfo {
            id: "cr-0gone".into(),
            owner_id: "123456789012".into(),
            instance_type: "m5.large".into(),
            zone: "us-west-2a".into(),
            match_criteria: karpenter_core::api::ec2nodeclass::InstanceMatchCriteria::Targeted,
            kind: karpenter_core::model::ReservationKind::Default,
            available: 0,
            end_ms: None,
            interruptible: false,
        }];
        assert_eq!(judge("default", None, &same, &reserved, &selected), None);
    }
}
