//! Launch templates: one per unique resolved option set (image, user data, security groups,
//! instance profile, block devices, metadata options, …), named by a hash of that set so the
//! same options always reuse the same template and a change makes a new one.

use std::collections::BTreeMap;

use aws_sdk_ec2::types::{
    CapacityReservationPreference, CapacityReservationTarget,
    LaunchTemplateBlockDeviceMappingRequest, LaunchTemplateCapacityReservationSpecificationRequest,
    LaunchTemplateEbsBlockDeviceRequest, LaunchTemplateHttpTokensState,
    LaunchTemplateIamInstanceProfileSpecificationRequest,
    LaunchTemplateInstanceMarketOptionsRequest, LaunchTemplateInstanceMetadataEndpointState,
    LaunchTemplateInstanceMetadataOptionsRequest, LaunchTemplateInstanceMetadataProtocolIpv6,
    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest, LaunchTemplatesMonitoringRequest,
    MarketType, RequestLaunchTemplateData, ResourceType, VolumeType,
};
use base64::Engine as _;
use karpenter_core::api::ec2nodeclass::{
    AmiFamily, BlockDevice, BlockDeviceMapping, EC2NodeClassSpec, MetadataOptions,
};
use karpenter_core::model::quantity::Quantity;
use karpenter_core::model::{KubeletSettings, Reservation, ReservationKind, ResourceName};
use serde::Serialize;

use crate::ec2::tag_specifications;

/// Prefix of every launch template name this controller creates.
pub const NAME_PREFIX: &str = "karpenter.k8s.aws/";

/// Everything that goes into one launch template; serialised, it is hashed into the name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LaunchTemplateSpec {
    /// Image.
    pub image_id: String,
    /// User data, plain text (base64-encoded when sent).
    pub user_data: String,
    /// Security group ids.
    pub security_group_ids: Vec<String>,
    /// Instance profile name.
    pub instance_profile: Option<String>,
    /// Block devices.
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// IMDS options.
    pub metadata_options: MetadataOptions,
    /// Detailed monitoring.
    pub detailed_monitoring: bool,
    /// Public IP on the primary interface (`None`: the subnet's default).
    pub associate_public_ip_address: Option<bool>,
    /// Tags on instances and volumes launched from it.
    pub tags: BTreeMap<String, String>,
    /// The capacity reservation its instances launch into (a Capacity Block's also with
    /// the `capacity-block` market type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity_reservation: Option<Reservation>,
    /// Its instances launch outside every reservation (`CapacityReservationPreference:
    /// none`): on-demand and spot launches of a class that selects reservations, so an
    /// `open` reservation the rounds count on is not used up behind their backs.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub outside_reservations: bool,
}

impl LaunchTemplateSpec {
    /// `karpenter.k8s.aws/<hash>`.
    pub fn name(&self) -> String {
        let text = serde_json::to_string(self).unwrap_or_default();
        let hash = karpenter_core::model::Fnv1a::default()
            .write(text.as_bytes())
            .finish();
        format!("{NAME_PREFIX}{hash:016x}")
    }

    /// The key CreateFleet overrides pick it by
    /// ([`FleetOverride::template_key`](crate::selection::FleetOverride::template_key)).
    pub fn template_key(&self) -> String {
        crate::selection::template_key(&self.image_id, self.capacity_reservation.as_ref())
    }

    /// The EC2 request data.
    pub fn to_request(&self) -> RequestLaunchTemplateData {
        let metadata = &self.metadata_options;
        let mut data = RequestLaunchTemplateData::builder()
            .image_id(&self.image_id)
            .user_data(base64::engine::general_purpose::STANDARD.encode(&self.user_data))
            .metadata_options(
                LaunchTemplateInstanceMetadataOptionsRequest::builder()
                    .http_endpoint(LaunchTemplateInstanceMetadataEndpointState::from(
                        metadata.http_endpoint.as_str(),
                    ))
                    .http_protocol_ipv6(LaunchTemplateInstanceMetadataProtocolIpv6::from(
                        metadata.http_protocol_ipv6.as_str(),
                    ))
                    .http_put_response_hop_limit(metadata.http_put_response_hop_limit as i32)
                    .http_tokens(LaunchTemplateHttpTokensState::from(
                        metadata.http_tokens.as_str(),
                    ))
                    .build(),
            )
            .monitoring(
                LaunchTemplatesMonitoringRequest::builder()
                    .enabled(self.detailed_monitoring)
                    .build(),
            )
            .set_tag_specifications(Some(
                tag_specifications(&[ResourceType::Instance, ResourceType::Volume], &self.tags)
                    .into_iter()
                    .map(|t| {
                        aws_sdk_ec2::types::LaunchTemplateTagSpecificationRequest::builder()
                            .set_resource_type(t.resource_type().cloned())
                            .set_tags(Some(t.tags().to_vec()))
                            .build()
                    })
                    .collect(),
            ));
        if let Some(profile) = &self.instance_profile {
            data = data.iam_instance_profile(
                LaunchTemplateIamInstanceProfileSpecificationRequest::builder()
                    .name(profile)
                    .build(),
            );
        }
        // A public-IP choice needs an explicit primary interface, which then carries the
        // security groups.
        match self.associate_public_ip_address {
            Some(public) => {
                data = data.network_interfaces(
                    LaunchTemplateInstanceNetworkInterfaceSpecificationRequest::builder()
                        .device_index(0)
                        .associate_public_ip_address(public)
                        .set_groups(Some(self.security_group_ids.clone()))
                        .build(),
                );
            }
            None => {
                data = data.set_security_group_ids(Some(self.security_group_ids.clone()));
            }
        }
        if let Some(reservation) = &self.capacity_reservation {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_target(
                        CapacityReservationTarget::builder()
                            .capacity_reservation_id(&reservation.id)
                            .build(),
                    )
                    .build(),
            );
            if reservation.kind == ReservationKind::CapacityBlock {
                data = data.instance_market_options(
                    LaunchTemplateInstanceMarketOptionsRequest::builder()
                        .market_type(MarketType::CapacityBlock)
                        .build(),
                );
            }
        } else if self.outside_reservations {
            data = data.capacity_reservation_specification(
                LaunchTemplateCapacityReservationSpecificationRequest::builder()
                    .capacity_reservation_preference(CapacityReservationPreference::None)
                    .build(),
            );
        }
        for mapping in &self.block_device_mappings {
            let mut request = LaunchTemplateBlockDeviceMappingRequest::builder()
                .set_device_name(mapping.device_name.clone());
            if let Some(ebs) = &mapping.ebs {
                request = request.ebs(ebs_request(ebs));
            }
            data = data.block_device_mappings(request.build());
        }
        data.build()
    }
}

fn gib(size: &str) -> Option<i32> {
    let bytes = Quantity::parse(size).ok()?.units_ceil();
    i32::try_from((bytes + (1 << 30) - 1) >> 30).ok()
}

fn ebs_request(ebs: &BlockDevice) -> LaunchTemplateEbsBlockDeviceRequest {
    let volume_type = ebs.volume_type.map(|t| {
        VolumeType::from(
            serde_json::to_value(t)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "gp3".into())
                .as_str(),
        )
    });
    LaunchTemplateEbsBlockDeviceRequest::builder()
        .set_delete_on_termination(ebs.delete_on_termination)
        .set_encrypted(ebs.encrypted)
        .set_iops(ebs.iops.and_then(|i| i32::try_from(i).ok()))
        .set_kms_key_id(ebs.kms_key_id.clone())
        .set_snapshot_id(ebs.snapshot_id.clone())
        .set_throughput(ebs.throughput.and_then(|t| i32::try_from(t).ok()))
        .set_volume_size(ebs.volume_size.as_deref().and_then(gib))
        .set_volume_type(volume_type)
        .set_volume_initialization_rate(ebs.volume_initialization_rate)
        .build()
}

fn volume(device: &str, size: &str, root: bool) -> BlockDeviceMapping {
    BlockDeviceMapping {
        device_name: Some(device.into()),
        root_volume: root,
        ebs: Some(BlockDevice {
            delete_on_termination: Some(true),
            encrypted: Some(true),
            volume_size: Some(size.into()),
            volume_type: Some(karpenter_core::api::ec2nodeclass::VolumeType::Gp3),
            ..Default::default()
        }),
    }
}

/// The node class's block devices, or the family's defaults (upstream's: a 20 GiB gp3
/// encrypted root for AL2/AL2023; a 4 GiB OS volume plus a 20 GiB data volume for
/// Bottlerocket).
pub fn block_device_mappings(
    spec: &EC2NodeClassSpec,
    family: AmiFamily,
) -> Vec<BlockDeviceMapping> {
    if !spec.block_device_mappings.is_empty() {
        return spec.block_device_mappings.clone();
    }
    match family {
        AmiFamily::Bottlerocket => vec![
            volume("/dev/xvda", "4Gi", false),
            volume("/dev/xvdb", "20Gi", true),
        ],
        AmiFamily::Custom => Vec::new(),
        _ => vec![volume("/dev/xvda", "20Gi", true)],
    }
}

/// Capacity-relevant kubelet settings of a node class.
pub fn kubelet_settings(
    spec: &EC2NodeClassSpec,
    family: AmiFamily,
    vm_memory_overhead_permille: i64,
) -> KubeletSettings {
    let mut settings = KubeletSettings {
        vm_memory_overhead_permille: Some(vm_memory_overhead_permille),
        ..Default::default()
    };
    if let Some(kubelet) = &spec.kubelet {
        settings.max_pods = kubelet.max_pods.map(i64::from);
        settings.pods_per_core = kubelet.pods_per_core.map(i64::from);
        for (name, value) in &kubelet.kube_reserved {
            if let (Some(resource), Ok(q)) = (ResourceName::parse(name), Quantity::parse(value)) {
                let amount = if resource == ResourceName::Cpu {
                    q.milli_ceil()
                } else {
                    q.units_ceil()
                };
                settings.kube_reserved.insert(resource, amount);
            }
        }
        for (name, value) in &kubelet.system_reserved {
            if let (Some(resource), Ok(q)) = (ResourceName::parse(name), Quantity::parse(value)) {
                let amount = if resource == ResourceName::Cpu {
                    q.milli_ceil()
                } else {
                    q.units_ceil()
                };
                settings.system_reserved.set(resource, amount);
            }
        }
        if let Some(memory) = kubelet.eviction_hard.get("memory.available")
            && let Ok(q) = Quantity::parse(memory)
        {
            settings.eviction_hard_memory = Some(q.units_ceil());
        }
    }
    settings.root_volume_bytes = block_device_mappings(spec, family)
        .iter()
        .find(|m| m.root_volume)
        .and_then(|m| m.ebs.as_ref()?.volume_size.as_deref())
        .and_then(|s| Quantity::parse(s).ok())
        .map(|q| q.units_ceil());
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> LaunchTemplateSpec {
        LaunchTemplateSpec {
            image_id: "ami-1".into(),
            user_data: "#!/bin/bash".into(),
            security_group_ids: vec!["sg-1".into()],
            instance_profile: Some("KarpenterNodeInstanceProfile".into()),
            block_device_mappings: vec![volume("/dev/xvda", "20Gi", true)],
            metadata_options: serde_json::from_str("{}").unwrap(),
            detailed_monitoring: false,
            associate_public_ip_address: None,
            tags: [("team".to_owned(), "web".to_owned())].into(),
            capacity_reservation: None,
            outside_reservations: false,
        }
    }

    #[test]
    fn names_are_stable_hashes_of_the_content() {
        let a = spec();
        assert!(a.name().starts_with("karpenter.k8s.aws/"));
        assert_eq!(a.name(), spec().name());
        let mut b = spec();
        b.image_id = "ami-2".into();
        assert_ne!(a.name(), b.name());
    }

    #[test]
    fn reserved_templates_target_their_reservation_and_others_stay_out() {
        // Templates without reservations keep the names they had before reservations existed.
        let plain = spec();
        let name = plain.name();
        assert!(
            !serde_json::to_string(&plain)
                .unwrap()
                .contains("reservation")
        );
        let mut block = spec();
        block.capacity_reservation = Some(Reservation {
            id: "cr-0abc".into(),
            kind: ReservationKind::CapacityBlock,
        });
        assert_ne!(block.name(), name);
        let data = block.to_request();
        let target = data.capacity_reservation_specification().unwrap();
        assert_eq!(
            target
                .capacity_reservation_target()
                .unwrap()
                .capacity_reservation_id(),
            Some("cr-0abc")
        );
        assert_eq!(
            data.instance_market_options().unwrap().market_type(),
            Some(&MarketType::CapacityBlock)
        );
        let mut outside = spec();
        outside.outside_reservations = true;
        let data = outside.to_request();
        assert_eq!(
            data.capacity_reservation_specification()
                .unwrap()
                .capacity_reservation_preference(),
            Some(&CapacityReservationPreference::None)
        );
        assert!(data.instance_market_options().is_none());
        assert!(
            spec()
                .to_request()
                .capacity_reservation_specification()
                .is_none()
        );
    }

    #[test]
    fn request_defaults_to_imdsv2_and_carries_every_option() {
        let data = spec().to_request();
        let metadata = data.metadata_options().unwrap();
        assert_eq!(
            metadata.http_tokens(),
            Some(&LaunchTemplateHttpTokensState::Required)
        );
        assert_eq!(metadata.http_put_response_hop_limit(), Some(1));
        assert_eq!(data.security_group_ids(), ["sg-1".to_owned()]);
        assert_eq!(data.image_id(), Some("ami-1"));
        let ebs = data.block_device_mappings()[0].ebs().unwrap();
        assert_eq!(ebs.volume_size(), Some(20));
        assert_eq!(ebs.volume_type(), Some(&VolumeType::Gp3));
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(data.user_data().unwrap())
                .unwrap(),
            b"#!/bin/bash"
        );
        let mut public = spec();
        public.associate_public_ip_address = Some(true);
        let data = public.to_request();
        assert!(data.security_group_ids().is_empty());
        assert_eq!(data.network_interfaces()[0].groups(), ["sg-1".to_owned()]);
    }

    #[test]
    fn kubelet_settings_follow_the_node_class() {
        let spec: EC2NodeClassSpec = serde_json::from_value(serde_json::json!({
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
            "role": "r",
            "kubelet": {"maxPods": 30, "kubeReserved": {"cpu": "200m"}, "evictionHard": {"memory.available": "5%"}}
        }))
        .unwrap();
        let settings = kubelet_settings(&spec, AmiFamily::Bottlerocket, 50);
        assert_eq!(settings.max_pods, Some(30));
        assert_eq!(settings.kube_reserved.get(&ResourceName::Cpu), Some(&200));
        assert_eq!(
            settings.root_volume_bytes,
            Some(20 << 30),
            "bottlerocket's data volume"
        );
        assert_eq!(settings.vm_memory_overhead_permille, Some(50));
        assert_eq!(
            settings.eviction_hard_memory, None,
            "percentages are not absolute"
        );
    }
}
