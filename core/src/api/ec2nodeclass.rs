//! `karpenter.k8s.aws/v1` EC2NodeClass: how AWS instances for a NodePool are configured.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::requirements::NodeSelectorRequirementWithMinValues;

/// The desired configuration of EC2 instances.
#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "karpenter.k8s.aws",
    version = "v1",
    kind = "EC2NodeClass",
    plural = "ec2nodeclasses",
    singular = "ec2nodeclass",
    shortname = "ec2nc",
    shortname = "ec2ncs",
    category = "karpenter",
    status = "EC2NodeClassStatus",
    derive = "PartialEq",
    doc = "EC2NodeClass is the Schema for the EC2NodeClass API",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name":"Role","type":"string","jsonPath":".spec.role","priority":1}"#
)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassSpec {
    /// Which subnets instances may launch in (terms are ORed).
    #[schemars(length(max = 30))]
    pub subnet_selector_terms: Vec<SubnetSelectorTerm>,
    /// Which security groups instances get (terms are ORed).
    #[schemars(length(max = 30))]
    pub security_group_selector_terms: Vec<SecurityGroupSelectorTerm>,
    /// Which capacity reservations instances may launch into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 30))]
    pub capacity_reservation_selector_terms: Vec<CapacityReservationSelectorTerm>,
    /// Whether instances get a public IPv4 address (default: the subnet's setting).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "associatePublicIPAddress"
    )]
    pub associate_public_ip_address: Option<bool>,
    /// Which AMIs instances boot (terms are ORed; an alias term stands alone).
    #[schemars(length(min = 1, max = 30))]
    pub ami_selector_terms: Vec<AmiSelectorTerm>,
    /// The bootstrap family; inferred from an alias, required otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ami_family: Option<AmiFamily>,
    /// User data merged with Karpenter's bootstrap for the family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    /// IAM role for the instance profile Karpenter creates (exclusive with `instanceProfile`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// An existing instance profile to use (exclusive with `role`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Tags for instances, volumes and launch templates.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tags: BTreeMap<String, String>,
    /// Kubelet settings Karpenter uses for scheduling and passes to the bootstrap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubelet: Option<KubeletConfiguration>,
    /// Volumes attached to instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub block_device_mappings: Vec<BlockDeviceMapping>,
    /// How instance-store NVMe volumes are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_store_policy: Option<InstanceStorePolicy>,
    /// Whether detailed CloudWatch monitoring is enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detailed_monitoring: Option<bool>,
    /// Instance metadata service options.
    #[serde(default)]
    #[schemars(default = "MetadataOptions::default")]
    pub metadata_options: MetadataOptions,
    /// Reserved context for EC2 Fleet (e.g. a capacity pool context).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// A placement group to launch instances into.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement_group_selector: Option<PlacementGroupSelector>,
    /// Network interfaces to attach (must include the primary one); for EFA set-ups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 150))]
    pub network_interfaces: Vec<NetworkInterface>,
    /// Number of IPv4 prefixes to assign to the primary interface.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub ip_prefix_count: Option<i32>,
    /// Connection tracking timeouts of the primary interface, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection_tracking: Option<ConnectionTracking>,
    /// CPU options of the instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_options: Option<CpuOptions>,
}

/// Selects a placement group by name or id (exactly one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacementGroupSelector {
    /// Placement group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,
    /// Placement group id (`pg-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^pg-[0-9a-z]+$"))]
    pub id: Option<String>,
}

/// One network interface of an instance.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkInterface {
    /// Index of the network card.
    #[schemars(range(min = 0))]
    pub network_card_index: i32,
    /// Device index on that card.
    #[schemars(range(min = 0))]
    pub device_index: i32,
    /// `interface` (ENA, optionally EFA) or `efa-only`.
    pub interface_type: InterfaceType,
}

/// Network interface types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InterfaceType {
    /// A regular interface with an IP address.
    #[serde(rename = "interface")]
    Interface,
    /// An EFA-only interface without an IP address.
    #[serde(rename = "efa-only")]
    EfaOnly,
}

/// Connection tracking timeouts, in seconds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionTracking {
    /// Idle timeout of established TCP connections (60..432000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 432000))]
    pub tcp_established_timeout: Option<i32>,
    /// Idle timeout of UDP streams (60..180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60, max = 180))]
    pub udp_stream_timeout: Option<i32>,
    /// Idle timeout of other UDP flows (30..60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 30, max = 60))]
    pub udp_timeout: Option<i32>,
}

/// CPU options.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CpuOptions {
    /// `enabled` or `disabled`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("enum" = ["enabled", "disabled"]))]
    pub nested_virtualization: Option<String>,
}

/// Selects subnets by tags or id.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SubnetSelectorTerm {
    /// Tags every selected subnet has; a value of `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    /// A subnet id (`subnet-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "subnet-[0-9a-z]+"))]
    pub id: Option<String>,
}

/// Selects security groups by tags, id or name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecurityGroupSelectorTerm {
    /// Tags every selected security group has; a value of `*` matches any value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    /// A security group id (`sg-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "sg-[0-9a-z]+"))]
    pub id: Option<String>,
    /// A security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Selects capacity reservations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CapacityReservationSelectorTerm {
    /// Tags every selected reservation has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    /// A capacity reservation id (`cr-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "^cr-[0-9a-z]+$"))]
    pub id: Option<String>,
    /// The owning account (12 digits).
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "ownerID")]
    #[schemars(regex(pattern = "^[0-9]{12}$"))]
    pub owner_id: Option<String>,
    /// `open` or `targeted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_match_criteria: Option<InstanceMatchCriteria>,
}

/// How instances match a capacity reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum InstanceMatchCriteria {
    /// Any instance with matching attributes uses it.
    Open,
    /// Only instances that target it use it.
    Targeted,
}

/// Selects AMIs by alias, tags, id, name, owner or SSM parameter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AmiSelectorTerm {
    /// `family@version`, e.g. `al2023@latest` or `bottlerocket@v1.20.0`; must be the only term.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 30))]
    pub alias: Option<String>,
    /// Tags every selected AMI has.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 20))]
    pub tags: Option<BTreeMap<String, String>>,
    /// An AMI id (`ami-…`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = "ami-[0-9a-z]+"))]
    pub id: Option<String>,
    /// An AMI name (wildcards allowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The AMI owner: an account id or `self`, `amazon`, … (default `self` and `amazon`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// An SSM parameter that holds the AMI id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssm_parameter: Option<String>,
}

/// Bootstrap families.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum AmiFamily {
    /// Amazon Linux 2 (bootstrap.sh).
    AL2,
    /// Amazon Linux 2023 (nodeadm).
    AL2023,
    /// Bottlerocket (TOML settings).
    Bottlerocket,
    /// No bootstrap added; user data is used as is.
    Custom,
    /// Windows Server 2019.
    Windows2019,
    /// Windows Server 2022.
    Windows2022,
    /// Windows Server 2025.
    Windows2025,
}

impl AmiFamily {
    /// The family an alias prefix (`al2023`) names.
    pub fn from_alias(family: &str) -> Option<AmiFamily> {
        Some(match family {
            "al2" => AmiFamily::AL2,
            "al2023" => AmiFamily::AL2023,
            "bottlerocket" => AmiFamily::Bottlerocket,
            "windows2019" => AmiFamily::Windows2019,
            "windows2022" => AmiFamily::Windows2022,
            "windows2025" => AmiFamily::Windows2025,
            _ => return None,
        })
    }

    /// Whether this is a Windows family.
    pub fn is_windows(self) -> bool {
        matches!(
            self,
            AmiFamily::Windows2019 | AmiFamily::Windows2022 | AmiFamily::Windows2025
        )
    }
}

/// Kubelet settings (the subset Karpenter models).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeletConfiguration {
    /// Cluster DNS server IPs.
    #[serde(default, skip_serializing_if = "Vec::is_empty", rename = "clusterDNS")]
    pub cluster_dns: Vec<String>,
    /// Maximum pods per node (overrides the ENI-based default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub max_pods: Option<i32>,
    /// Pods per vCPU cap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods_per_core: Option<i32>,
    /// Resources reserved for system daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::quantity_values)]
    pub system_reserved: BTreeMap<String, String>,
    /// Resources reserved for Kubernetes daemons (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::quantity_values)]
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::eviction_threshold_values)]
    pub eviction_hard: BTreeMap<String, String>,
    /// Soft eviction thresholds by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(transform = super::schema::eviction_threshold_values)]
    pub eviction_soft: BTreeMap<String, String>,
    /// Grace periods for the soft thresholds, by signal.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// Longest grace period for pods evicted by a soft threshold, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_max_pod_grace_period: Option<i32>,
    /// Disk usage percent that always triggers image garbage collection.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageGCHighThresholdPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_high_threshold_percent: Option<i32>,
    /// Disk usage percent image garbage collection frees down to.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "imageGCLowThresholdPercent"
    )]
    #[schemars(range(min = 0, max = 100))]
    pub image_gc_low_threshold_percent: Option<i32>,
    /// Whether CPU CFS quota is enforced for containers with CPU limits.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "cpuCFSQuota"
    )]
    pub cpu_cfs_quota: Option<bool>,
}

/// One volume of an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDeviceMapping {
    /// The device name, e.g. `/dev/xvda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_name: Option<String>,
    /// The EBS volume settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ebs: Option<BlockDevice>,
    /// Whether this is the root volume (its size becomes ephemeral-storage); at most one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub root_volume: bool,
}

/// An EBS volume.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockDevice {
    /// Delete the volume when the instance terminates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delete_on_termination: Option<bool>,
    /// Encrypt the volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted: Option<bool>,
    /// Provisioned IOPS (io1, io2, gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops: Option<i64>,
    /// KMS key for encryption.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "kmsKeyID")]
    pub kms_key_id: Option<String>,
    /// Snapshot to create the volume from.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        rename = "snapshotID"
    )]
    pub snapshot_id: Option<String>,
    /// Throughput in MiB/s (gp3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput: Option<i64>,
    /// Size, e.g. `20Gi` (at most 64T).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(
        pattern = "^((?:[1-9][0-9]{0,3}|[1-4][0-9]{4}|[5][0-8][0-9]{3}|59000)Gi|(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|[6][0-3][0-9]{3}|64000)G|([1-9]||[1-5][0-7]|58)Ti|([1-9]||[1-5][0-9]|6[0-3]|64)T)$"
    ))]
    pub volume_size: Option<String>,
    /// Volume type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_type: Option<VolumeType>,
    /// Rate in MiB/s at which a volume created from a snapshot is initialised (100..300).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 100, max = 300))]
    pub volume_initialization_rate: Option<i32>,
}

/// EBS volume types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VolumeType {
    /// Magnetic.
    Standard,
    /// Provisioned IOPS SSD.
    Io1,
    /// Provisioned IOPS SSD, newer.
    Io2,
    /// General purpose SSD.
    Gp2,
    /// Cold HDD.
    Sc1,
    /// Throughput optimised HDD.
    St1,
    /// General purpose SSD, newer.
    Gp3,
}

/// How instance-store volumes are used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum InstanceStorePolicy {
    /// Stripe NVMe instance stores into one RAID0 volume for kubelet and containerd.
    RAID0,
}

/// Instance metadata service options.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MetadataOptions {
    /// `enabled` or `disabled`.
    #[serde(default = "enabled")]
    #[schemars(default = "enabled", extend("enum" = ["enabled", "disabled"]))]
    pub http_endpoint: String,
    /// `enabled` or `disabled`.
    #[serde(default = "disabled", rename = "httpProtocolIPv6")]
    #[schemars(default = "disabled", extend("enum" = ["enabled", "disabled"]))]
    pub http_protocol_ipv6: String,
    /// Hop limit for metadata responses (1..64).
    #[serde(default = "one")]
    #[schemars(default = "one", range(min = 1, max = 64))]
    pub http_put_response_hop_limit: i64,
    /// `required` (IMDSv2 only) or `optional`.
    #[serde(default = "required")]
    #[schemars(default = "required", extend("enum" = ["required", "optional"]))]
    pub http_tokens: String,
}

fn enabled() -> String {
    "enabled".into()
}
fn disabled() -> String {
    "disabled".into()
}
fn one() -> i64 {
    1
}
fn required() -> String {
    "required".into()
}

impl Default for MetadataOptions {
    fn default() -> Self {
        MetadataOptions {
            http_endpoint: enabled(),
            http_protocol_ipv6: disabled(),
            http_put_response_hop_limit: one(),
            http_tokens: required(),
        }
    }
}

/// The observed state of an EC2NodeClass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EC2NodeClassStatus {
    /// Resolved subnets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subnets: Vec<ResolvedSubnet>,
    /// Resolved security groups.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_groups: Vec<ResolvedSecurityGroup>,
    /// Resolved AMIs with the requirements each applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub amis: Vec<ResolvedAmi>,
    /// The instance profile in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_profile: Option<String>,
    /// Resolved capacity reservations (upstream's field; karpenter-rs does not launch into
    /// reservations yet, so it leaves this empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub capacity_reservations: Vec<ResolvedCapacityReservation>,
    /// `SubnetsReady`, `SecurityGroupsReady`, `AMIsReady`, `InstanceProfileReady`,
    /// `ValidationSucceeded`, `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(transform = super::schema::unkeyed_conditions)]
    pub conditions: Vec<Condition>,
}

/// A resolved capacity reservation, in upstream's status shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedCapacityReservation {
    /// The reservation's zone.
    pub availability_zone: String,
    /// When the reservation ends, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// Reservation id (`cr-…`).
    #[schemars(regex(pattern = "^cr-[0-9a-z]+$"))]
    pub id: String,
    /// How instances match it.
    pub instance_match_criteria: InstanceMatchCriteria,
    /// The instance type it reserves.
    pub instance_type: String,
    /// Whether it can be interrupted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interruptible: Option<bool>,
    /// The owning account.
    #[serde(rename = "ownerID")]
    #[schemars(regex(pattern = "^[0-9]{12}$"))]
    pub owner_id: String,
    /// `default` or `capacity-block`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "default_reservation_type", extend("enum" = ["default", "capacity-block"]))]
    pub reservation_type: Option<String>,
    /// `active` or `expiring`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(default = "active_state", extend("enum" = ["active", "expiring"]))]
    pub state: Option<String>,
}

fn default_reservation_type() -> Option<String> {
    Some("default".into())
}

fn active_state() -> Option<String> {
    Some("active".into())
}

/// A resolved subnet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSubnet {
    /// Subnet id.
    pub id: String,
    /// Availability zone name.
    pub zone: String,
    /// Availability zone id.
    #[serde(default, skip_serializing_if = "Option::is_none", rename = "zoneID")]
    pub zone_id: Option<String>,
}

/// A resolved security group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedSecurityGroup {
    /// Security group id.
    pub id: String,
    /// Security group name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// A resolved AMI.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedAmi {
    /// AMI id.
    pub id: String,
    /// AMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Whether the AMI is deprecated.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// The instance types (by requirement) this AMI is for.
    #[schemars(schema_with = "super::schema::plain_node_selector_requirements")]
    pub requirements: Vec<NodeSelectorRequirementWithMinValues>,
}

/// Version stamped beside [`ec2nodeclass_hash`]; NodeClaims stamped with another version
/// (upstream's) are not compared, so a take-over drifts nothing by itself.
pub const EC2NODECLASS_HASH_VERSION: &str = "rs-v1";

/// The EC2NodeClass's static drift hash: every field of its spec except the selector terms,
/// whose effect (the subnets, security groups, AMIs and reservations they resolve to) is
/// judged on the instance itself (`SubnetDrift`, `SecurityGroupDrift`, `AMIDrift`), as
/// upstream hashes it. Changing user data, tags, block devices, metadata options, the role
/// or the kubelet settings drifts every node of the class (`NodeClassDrift`).
pub fn ec2nodeclass_hash(spec: &EC2NodeClassSpec) -> String {
    let mut value = serde_json::to_value(spec).unwrap_or(serde_json::Value::Null);
    if let Some(fields) = value.as_object_mut() {
        for dynamic in [
            "subnetSelectorTerms",
            "securityGroupSelectorTerms",
            "amiSelectorTerms",
            "capacityReservationSelectorTerms",
            "placementGroupSelector",
        ] {
            fields.remove(dynamic);
        }
    }
    super::nodeclaim::static_hash(&value)
}

#[cfg(test)]
mod hash_tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spec(extra: serde_json::Value) -> EC2NodeClassSpec {
        let mut value = serde_json::json!({
            "role": "KarpenterNodeRole",
            "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
            "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "c"}}],
        });
        if let (Some(base), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
            base.extend(extra.clone());
        }
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn static_fields_change_the_hash_and_selectors_do_not() {
        let base = ec2nodeclass_hash(&spec(serde_json::json!({})));
        assert_eq!(base, ec2nodeclass_hash(&spec(serde_json::json!({}))));
        let selectors = spec(serde_json::json!({
            "amiSelectorTerms": [{"alias": "bottlerocket@latest"}],
            "subnetSelectorTerms": [{"id": "subnet-1"}],
            "securityGroupSelectorTerms": [{"id": "sg-1"}],
        }));
        assert_eq!(base, ec2nodeclass_hash(&selectors));
        for changed in [
            serde_json::json!({"userData": "echo hi"}),
            serde_json::json!({"tags": {"team": "web"}}),
            serde_json::json!({"role": "OtherRole"}),
            serde_json::json!({"detailedMonitoring": true}),
        ] {
            assert_ne!(base, ec2nodeclass_hash(&spec(changed.clone())), "{changed}");
        }
    }
}
