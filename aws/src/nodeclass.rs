//! EC2NodeClass resolution: subnets, security groups, AMIs and the instance profile, each
//! with its status condition, as upstream's node class controllers report them. Resolution
//! never fails as a whole: what cannot be resolved becomes a `False` condition naming why,
//! and the class is not `Ready` (launches then fail with `NodeClassNotReady`).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use karpenter_core::api::ec2nodeclass::{
    AmiFamily, EC2NodeClass, EC2NodeClassStatus, ResolvedAmi, ResolvedSecurityGroup, ResolvedSubnet,
};
use karpenter_core::model::{Requirement, Requirements};

use crate::ec2::{Ec2, ImageInfo};
use crate::error::AwsError;
use crate::reservations::CapacityReservationInfo;
use crate::selection::{Ami, Subnet, newest_per_requirements, subnet_per_zone};

const GPU_COUNT: &str = "karpenter.k8s.aws/instance-gpu-count";
const ACCELERATOR_COUNT: &str = "karpenter.k8s.aws/instance-accelerator-count";
const ARCH: &str = "kubernetes.io/arch";

/// One status condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionState {
    /// `SubnetsReady`, `SecurityGroupsReady`, …
    pub kind: &'static str,
    /// True when satisfied.
    pub ok: bool,
    /// CamelCase reason.
    pub reason: String,
    /// Detail.
    pub message: String,
}

/// A node class as the provider launches with it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNodeClass {
    /// Name.
    pub name: String,
    /// AMI family (from the alias or `amiFamily`).
    pub family: AmiFamily,
    /// Every matching subnet.
    pub subnets: Vec<Subnet>,
    /// The subnet launches use, per zone.
    pub subnet_per_zone: BTreeMap<String, Subnet>,
    /// `(id, name)` of every matching security group.
    pub security_groups: Vec<(String, String)>,
    /// Newest image per requirement set, newest first.
    pub amis: Vec<Ami>,
    /// Instance profile name.
    pub instance_profile: Option<String>,
    /// The active capacity reservations the class selects (none without the
    /// `ReservedCapacity` gate).
    pub capacity_reservations: Vec<CapacityReservationInfo>,
    /// Conditions, `Ready` last.
    pub conditions: Vec<ConditionState>,
}

/// The first condition of a node class that does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{condition}: {message}")]
pub struct NotReady {
    /// `SubnetsReady`, `SecurityGroupsReady`, …
    pub condition: &'static str,
    /// Its CamelCase reason.
    pub reason: String,
    /// Its detail.
    pub message: String,
}

impl ResolvedNodeClass {
    /// `Ok` when every condition holds, else the first that does not.
    pub fn ready(&self) -> Result<(), NotReady> {
        match self.conditions.iter().find(|c| !c.ok && c.kind != "Ready") {
            Some(c) => Err(NotReady {
                condition: c.kind,
                reason: c.reason.clone(),
                message: c.message.clone(),
            }),
            None => Ok(()),
        }
    }

    /// The first condition that failed because a selector matched nothing (subnets,
    /// security groups, AMIs): a settled answer, unlike a failed call, which may pass when
    /// tried again.
    pub fn not_found(&self) -> Option<&ConditionState> {
        self.conditions
            .iter()
            .find(|c| !c.ok && c.reason.ends_with("NotFound"))
    }

    /// The `status` upstream writes on the EC2NodeClass.
    pub fn status(&self, generation: Option<i64>, now_ms: i64) -> EC2NodeClassStatus {
        let time = Time(
            k8s_openapi::jiff::Timestamp::from_millisecond(now_ms)
                .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        );
        EC2NodeClassStatus {
            subnets: self
                .subnets
                .iter()
                .map(|s| ResolvedSubnet {
                    id: s.id.clone(),
                    zone: s.zone.clone(),
                    zone_id: s.zone_id.clone(),
                })
                .collect(),
            security_groups: self
                .security_groups
                .iter()
                .map(|(id, name)| ResolvedSecurityGroup {
                    id: id.clone(),
                    name: (!name.is_empty()).then(|| name.clone()),
                })
                .collect(),
            amis: self
                .amis
                .iter()
                .map(|a| ResolvedAmi {
                    id: a.id.clone(),
                    name: (!a.name.is_empty()).then(|| a.name.clone()),
                    deprecated: a.deprecated,
                    requirements: a.requirements.to_api(),
                })
                .collect(),
            instance_profile: self.instance_profile.clone(),
            capacity_reservations: self
                .capacity_reservations
                .iter()
                .map(|r| r.status(now_ms))
                .collect(),
            conditions: self
                .conditions
                .iter()
                .map(|c| Condition {
                    type_: c.kind.to_owned(),
                    status: if c.ok { "True" } else { "False" }.to_owned(),
                    reason: c.reason.clone(),
                    message: c.message.clone(),
                    last_transition_time: time.clone(),
                    observed_generation: generation,
                })
                .collect(),
        }
    }
}

/// Where AMI aliases are looked up, and for which Kubernetes version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AmiLookup {
    /// SSM public parameter prefix, normally `/aws/service` (configurable because emulators
    /// refuse to create parameters under it).
    pub ssm_prefix: String,
    /// Kubernetes minor version of the cluster, e.g. `1.33`.
    pub kubernetes_version: String,
}

/// An SSM parameter to look up for an alias, with the instance types its image boots.
#[derive(Debug, Clone, PartialEq)]
pub struct AliasParameter {
    /// Parameter name.
    pub name: String,
    /// Requirements of the image it names.
    pub requirements: Requirements,
}

fn requirements(arch: &str, gpu: Option<bool>, accelerator: Option<bool>) -> Requirements {
    let mut r = Requirements::new();
    r.add(ARCH, Requirement::is_in([arch]));
    let presence = |present: bool| {
        if present {
            Requirement::exists()
        } else {
            Requirement::does_not_exist()
        }
    };
    if let Some(g) = gpu {
        r.add(GPU_COUNT, presence(g));
    }
    if let Some(a) = accelerator {
        r.add(ACCELERATOR_COUNT, presence(a));
    }
    r
}

fn minor(version: &str) -> Option<u32> {
    version.split('.').nth(1)?.parse().ok()
}

/// The SSM parameters an alias (`al2023@latest`, `bottlerocket@v1.20.0`, `al2@v20240807`)
/// resolves through, as upstream's AMI providers name them.
pub fn alias_parameters(
    alias: &str,
    lookup: &AmiLookup,
) -> Result<(AmiFamily, Vec<AliasParameter>), String> {
    let (family_name, version) = alias
        .split_once('@')
        .ok_or_else(|| format!("alias {alias:?} must be family@version, e.g. al2023@latest"))?;
    let family = AmiFamily::from_alias(family_name)
        .ok_or_else(|| format!("alias family {family_name:?} is not one of al2023, bottlerocket, al2, windows2019, windows2022, windows2025"))?;
    let prefix = lookup.ssm_prefix.trim_end_matches('/');
    let k8s = &lookup.kubernetes_version;
    let mut out = Vec::new();
    match family {
        AmiFamily::AL2023 => {
            for (arch, ssm_arch, variants) in [
                ("amd64", "x86_64", &["standard", "nvidia", "neuron"][..]),
                ("arm64", "arm64", &["standard", "nvidia"][..]),
            ] {
                for variant in variants {
                    let leaf = if version == "latest" {
                        "recommended/image_id".to_owned()
                    } else {
                        format!(
                            "amazon-eks-node-al2023-{ssm_arch}-{variant}-{k8s}-{version}/image_id"
                        )
                    };
                    let (gpu, accel) = match *variant {
                        "nvidia" => (Some(true), None),
                        "neuron" => (None, Some(true)),
                        _ => (Some(false), Some(false)),
                    };
                    out.push(AliasParameter {
                        name: format!("{prefix}/eks/optimized-ami/{k8s}/amazon-linux-2023/{ssm_arch}/{variant}/{leaf}"),
                        requirements: requirements(arch, gpu, accel),
                    });
                }
            }
        }
        AmiFamily::Bottlerocket => {
            let version = if version == "latest" {
                "latest".to_owned()
            } else {
                version.trim_start_matches('v').to_owned()
            };
            for (arch, ssm_arch) in [("amd64", "x86_64"), ("arm64", "arm64")] {
                for (suffix, gpu) in [("", false), ("-nvidia", true)] {
                    out.push(AliasParameter {
                        name: format!("{prefix}/bottlerocket/aws-k8s-{k8s}{suffix}/{ssm_arch}/{version}/image_id"),
                        requirements: requirements(arch, Some(gpu), if gpu { None } else { Some(false) }),
                    });
                }
            }
        }
        AmiFamily::AL2 => {
            if minor(k8s).is_some_and(|m| m >= 33) {
                return Err(format!(
                    "alias al2 is not available on Kubernetes {k8s} (EKS stopped publishing AL2 AMIs at 1.33); use al2023 or bottlerocket"
                ));
            }
            for (path, arch, gpu) in [
                ("amazon-linux-2", "amd64", false),
                ("amazon-linux-2-gpu", "amd64", true),
                ("amazon-linux-2-arm64", "arm64", false),
            ] {
                let leaf = if version == "latest" {
                    "recommended/image_id".to_owned()
                } else {
                    let base = match path {
                        "amazon-linux-2-gpu" => "amazon-eks-gpu-node",
                        "amazon-linux-2-arm64" => "amazon-eks-arm64-node",
                        _ => "amazon-eks-node",
                    };
                    format!("{base}-{k8s}-{version}/image_id")
                };
                out.push(AliasParameter {
                    name: format!("{prefix}/eks/optimized-ami/{k8s}/{path}/{leaf}"),
                    requirements: requirements(
                        arch,
                        Some(gpu),
                        if gpu { None } else { Some(false) },
                    ),
                });
            }
        }
        other => {
            return Err(format!(
                "{other:?} nodes are not supported yet; use al2023, bottlerocket or al2"
            ));
        }
    }
    Ok((family, out))
}

fn arch_of(image: &ImageInfo) -> &'static str {
    if image.architecture == "arm64" {
        "arm64"
    } else {
        "amd64"
    }
}

fn is_deprecated(image: &ImageInfo, now_ms: i64) -> bool {
    image
        .deprecation_time
        .as_deref()
        .and_then(crate::messages::parse_rfc3339_ms)
        .is_some_and(|t| (t as i64) <= now_ms)
}

/// Resolves node classes against EC2 and SSM.
#[derive(Debug, Clone)]
pub struct Resolver {
    /// EC2.
    pub ec2: Ec2,
    /// SSM.
    pub ssm: aws_sdk_ssm::Client,
    /// Alias lookup, shared with the provider, which follows the cluster's version.
    pub lookup: std::sync::Arc<std::sync::RwLock<AmiLookup>>,
    /// Instance profiles for `spec.role`.
    pub profiles: std::sync::Arc<crate::iam::InstanceProfiles>,
    /// The `ReservedCapacity` gate: capacity reservations are resolved (and the
    /// `CapacityReservationsReady` condition reported).
    pub reserved_capacity: bool,
}

fn condition(kind: &'static str, result: Result<String, (String, String)>) -> ConditionState {
    match result {
        Ok(message) => ConditionState {
            kind,
            ok: true,
            reason: kind.to_owned(),
            message,
        },
        Err((reason, message)) => ConditionState {
            kind,
            ok: false,
            reason,
            message,
        },
    }
}

fn failure(error: &AwsError, what: &str) -> (String, String) {
    let reason = if error.is_auth() {
        "Unauthorized".to_owned()
    } else {
        format!("{what}ResolutionFailed")
    };
    (reason, error.to_string())
}

impl Resolver {
    /// Resolves everything; problems become `False` conditions.
    pub async fn resolve(&self, node_class: &EC2NodeClass, now_ms: i64) -> ResolvedNodeClass {
        let spec = &node_class.spec;
        let name = node_class.metadata.name.clone().unwrap_or_default();
        let mut conditions = Vec::new();

        let subnets = match self.ec2.subnets(&spec.subnet_selector_terms).await {
            Ok(s) if s.is_empty() => {
                conditions.push(condition(
                    "SubnetsReady",
                    Err((
                        "SubnetsNotFound".into(),
                        "SubnetSelector did not match any Subnets".into(),
                    )),
                ));
                s
            }
            Ok(s) => {
                conditions.push(condition("SubnetsReady", Ok(String::new())));
                s
            }
            Err(e) => {
                conditions.push(condition("SubnetsReady", Err(failure(&e, "Subnet"))));
                Vec::new()
            }
        };
        let security_groups = match self
            .ec2
            .security_groups(&spec.security_group_selector_terms)
            .await
        {
            Ok(g) if g.is_empty() => {
                conditions.push(condition(
                    "SecurityGroupsReady",
                    Err((
                        "SecurityGroupsNotFound".into(),
                        "SecurityGroupSelector did not match any SecurityGroups".into(),
                    )),
                ));
                g
            }
            Ok(g) => {
                conditions.push(condition("SecurityGroupsReady", Ok(String::new())));
                g
            }
            Err(e) => {
                conditions.push(condition(
                    "SecurityGroupsReady",
                    Err(failure(&e, "SecurityGroup")),
                ));
                Vec::new()
            }
        };
        let (family, amis) = match self.amis(node_class, now_ms).await {
            Ok((family, amis)) if amis.is_empty() => {
                conditions.push(condition(
                    "AMIsReady",
                    Err((
                        "AMINotFound".into(),
                        "AMISelector did not match any AMIs".into(),
                    )),
                ));
                (family, amis)
            }
            Ok((family, amis)) => {
                conditions.push(condition("AMIsReady", Ok(String::new())));
                (family, amis)
            }
            Err((reason, message)) => {
                conditions.push(condition("AMIsReady", Err((reason, message))));
                (spec.ami_family.unwrap_or(AmiFamily::Custom), Vec::new())
            }
        };
        let instance_profile = match (&spec.instance_profile, &spec.role) {
            (Some(profile), _) => {
                conditions.push(condition("InstanceProfileReady", Ok(String::new())));
                Some(profile.clone())
            }
            (None, Some(role)) => match self.profiles.ensure(role, &name).await {
                Ok(profile) => {
                    conditions.push(condition("InstanceProfileReady", Ok(String::new())));
                    Some(profile)
                }
                Err(e) => {
                    conditions.push(condition(
                        "InstanceProfileReady",
                        Err((
                            if e.is_auth() {
                                "Unauthorized".into()
                            } else {
                                "InstanceProfileCreationFailed".into()
                            },
                            format!("spec.role {role:?}: {e}"),
                        )),
                    ));
                    None
                }
            },
            (None, None) => {
                conditions.push(condition(
                    "InstanceProfileReady",
                    Err((
                        "InstanceProfileNotFound".into(),
                        "set spec.role or spec.instanceProfile".into(),
                    )),
                ));
                None
            }
        };
        let mut capacity_reservations = Vec::new();
        if self.reserved_capacity {
            let terms = &spec.capacity_reservation_selector_terms;
            let found = if terms.is_empty() {
                Ok(Vec::new())
            } else {
                self.ec2.capacity_reservations(terms).await
            };
            match found {
                Ok(found) => {
                    conditions.push(condition("CapacityReservationsReady", Ok(String::new())));
                    capacity_reservations = found;
                }
                Err(e) => conditions.push(condition(
                    "CapacityReservationsReady",
                    Err(failure(&e, "CapacityReservation")),
                )),
            }
        }
        let validation = match family {
            f if f.is_windows() => Err((
                "UnsupportedAMIFamily".to_owned(),
                format!("{f:?} nodes are not supported yet"),
            )),
            _ => Ok(String::new()),
        };
        conditions.push(condition("ValidationSucceeded", validation));
        let problems: Vec<String> = conditions
            .iter()
            .filter(|c| !c.ok)
            .map(|c| c.kind.to_owned())
            .collect();
        conditions.push(if problems.is_empty() {
            condition("Ready", Ok(String::new()))
        } else {
            condition(
                "Ready",
                Err((
                    "NotReady".into(),
                    format!("{} not ready", problems.join(", ")),
                )),
            )
        });
        ResolvedNodeClass {
            name,
            family,
            subnet_per_zone: subnet_per_zone(&subnets),
            subnets,
            security_groups,
            amis,
            instance_profile,
            capacity_reservations,
            conditions,
        }
    }

    async fn amis(
        &self,
        node_class: &EC2NodeClass,
        now_ms: i64,
    ) -> Result<(AmiFamily, Vec<Ami>), (String, String)> {
        let spec = &node_class.spec;
        let lookup = match self.lookup.read() {
            Ok(lookup) => lookup.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        };
        let mut candidates = Vec::new();
        let mut family = spec.ami_family;
        for term in &spec.ami_selector_terms {
            if let Some(alias) = &term.alias {
                let (alias_family, parameters) = alias_parameters(alias, &lookup).map_err(|m| {
                    (
                        "AMIAliasInvalid".to_owned(),
                        format!("spec.amiSelectorTerms[].alias: {m}"),
                    )
                })?;
                family = Some(
                    family
                        .filter(|f| *f == AmiFamily::Custom)
                        .unwrap_or(alias_family),
                );
                let mut by_id: BTreeMap<String, Requirements> = BTreeMap::new();
                for parameter in parameters {
                    match self.parameter(&parameter.name).await {
                        Ok(Some(id)) => {
                            by_id.insert(id, parameter.requirements);
                        }
                        Ok(None) => {}
                        Err(e) => return Err(failure(&e, "AMI")),
                    }
                }
                let ids: Vec<String> = by_id.keys().cloned().collect();
                let images = self
                    .ec2
                    .images_by_id(&ids)
                    .await
                    .map_err(|e| failure(&e, "AMI"))?;
                for image in images {
                    if let Some(requirements) = by_id.get(&image.id) {
                        candidates.push(Ami {
                            deprecated: is_deprecated(&image, now_ms),
                            requirements: requirements.clone(),
                            id: image.id,
                            name: image.name,
                            created: image.created,
                        });
                    }
                }
                continue;
            }
            let images = if let Some(parameter) = &term.ssm_parameter {
                match self
                    .parameter(parameter)
                    .await
                    .map_err(|e| failure(&e, "AMI"))?
                {
                    Some(id) => self.ec2.images_by_id(&[id]).await,
                    None => Ok(Vec::new()),
                }
            } else {
                self.ec2.images(term).await
            }
            .map_err(|e| failure(&e, "AMI"))?;
            for image in images {
                candidates.push(Ami {
                    deprecated: is_deprecated(&image, now_ms),
                    requirements: requirements(arch_of(&image), None, None),
                    id: image.id,
                    name: image.name,
                    created: image.created,
                });
            }
        }
        let family = family.ok_or_else(|| {
            (
                "AMIFamilyUnknown".to_owned(),
                "spec.amiFamily is required when spec.amiSelectorTerms has no alias".to_owned(),
            )
        })?;
        Ok((family, newest_per_requirements(&candidates)))
    }

    async fn parameter(&self, name: &str) -> Result<Option<String>, AwsError> {
        match self.ssm.get_parameter().name(name).send().await {
            Ok(out) => Ok(out.parameter().and_then(|p| p.value()).map(str::to_owned)),
            Err(e) => {
                let error = AwsError::from_sdk("GetParameter", e);
                if error.is_not_found() {
                    Ok(None)
                } else {
                    Err(error)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(version: &str) -> AmiLookup {
        AmiLookup {
            ssm_prefix: "/aws/service".into(),
            kubernetes_version: version.into(),
        }
    }

    #[test]
    fn al2023_latest_names_every_arch_and_variant() {
        let (family, params) = alias_parameters("al2023@latest", &lookup("1.33")).unwrap();
        assert_eq!(family, AmiFamily::AL2023);
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            vec![
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/nvidia/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/x86_64/neuron/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/standard/recommended/image_id",
                "/aws/service/eks/optimized-ami/1.33/amazon-linux-2023/arm64/nvidia/recommended/image_id",
            ]
        );
        let gpu: std::collections::BTreeMap<String, String> = [
            ("kubernetes.io/arch".to_owned(), "amd64".to_owned()),
            (GPU_COUNT.to_owned(), "1".to_owned()),
        ]
        .into();
        assert!(
            params[0].requirements.matches_labels(&gpu).is_err(),
            "standard AMIs are not for GPUs"
        );
        assert!(params[1].requirements.matches_labels(&gpu).is_ok());
    }

    #[test]
    fn pinned_versions_and_other_families() {
        let (_, params) = alias_parameters("al2023@v20240807", &lookup("1.31")).unwrap();
        assert_eq!(
            params[0].name,
            "/aws/service/eks/optimized-ami/1.31/amazon-linux-2023/x86_64/standard/amazon-eks-node-al2023-x86_64-standard-1.31-v20240807/image_id"
        );
        let (family, params) = alias_parameters("bottlerocket@v1.20.3", &lookup("1.31")).unwrap();
        assert_eq!(family, AmiFamily::Bottlerocket);
        assert_eq!(
            params[0].name,
            "/aws/service/bottlerocket/aws-k8s-1.31/x86_64/1.20.3/image_id"
        );
        assert_eq!(
            params[1].name,
            "/aws/service/bottlerocket/aws-k8s-1.31-nvidia/x86_64/1.20.3/image_id"
        );
        let (_, params) = alias_parameters("al2@latest", &lookup("1.30")).unwrap();
        assert_eq!(
            params[2].name,
            "/aws/service/eks/optimized-ami/1.30/amazon-linux-2-arm64/recommended/image_id"
        );
        assert!(
            alias_parameters("al2@latest", &lookup("1.33"))
                .unwrap_err()
                .contains("al2023")
        );
        assert!(
            alias_parameters("ubuntu@latest", &lookup("1.33"))
                .unwrap_err()
                .contains("not one of")
        );
        assert!(
            alias_parameters("al2023", &lookup("1.33"))
                .unwrap_err()
                .contains("family@version")
        );
        let custom_prefix = AmiLookup {
            ssm_prefix: "/test/service/".into(),
            kubernetes_version: "1.33".into(),
        };
        let (_, params) = alias_parameters("al2023@latest", &custom_prefix).unwrap();
        assert!(params[0].name.starts_with("/test/service/eks/"));
    }
}
