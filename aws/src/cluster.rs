//! Where nodes find their cluster: what the flags give, completed from EKS as upstream does.
//!
//! A node's bootstrap needs the API server endpoint, the cluster's CA bundle, its service
//! CIDR (nodeadm refuses an AL2023 `NodeConfig` without it) and, for AMI aliases such as
//! `al2023@latest`, the cluster's Kubernetes minor version. Each comes from the first source
//! that has it:
//!
//! | field | flag | then | then |
//! |---|---|---|---|
//! | endpoint | `--cluster-endpoint` | `eks:DescribeCluster` | — |
//! | CA bundle | `--cluster-ca-bundle` | the ServiceAccount's CA (in a pod) | `eks:DescribeCluster` |
//! | service CIDR | `--cluster-cidr` | `eks:DescribeCluster` (IPv6 clusters: the IPv6 one) | — |
//! | version | `--kubernetes-version` | the API server's `/version` | `eks:DescribeCluster` |
//!
//! DescribeCluster is called only when something is still missing; when it is refused, the
//! error names the permission and the flags that would make it unnecessary. Unless the flag
//! pins it, the controller reads `/version` again every 5 minutes (upstream's poll) and hands
//! a new minor version to `AwsCloud::set_kubernetes_version`.

use crate::bootstrap::ClusterInfo;
use crate::error::AwsError;

/// The cluster settings known before asking EKS; `None` for what is still to be found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KnownCluster {
    /// `--cluster-name`.
    pub name: String,
    /// `--cluster-endpoint`.
    pub endpoint: Option<String>,
    /// `--cluster-ca-bundle`, or the ServiceAccount's CA.
    pub ca_bundle: Option<String>,
    /// `--cluster-cidr`.
    pub service_cidr: Option<String>,
    /// `--kubernetes-version`, or the API server's minor version (`1.31`).
    pub kubernetes_version: Option<String>,
}

/// What EKS says of a cluster (`DescribeCluster`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedCluster {
    /// `cluster.endpoint`.
    pub endpoint: Option<String>,
    /// `cluster.certificateAuthority.data`.
    pub ca_bundle: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv4Cidr`.
    pub service_ipv4_cidr: Option<String>,
    /// `kubernetesNetworkConfig.serviceIpv6Cidr`.
    pub service_ipv6_cidr: Option<String>,
    /// `kubernetesNetworkConfig.ipFamily` (`ipv4`, `ipv6`).
    pub ip_family: Option<String>,
    /// `cluster.version` (`1.31`).
    pub version: Option<String>,
}

/// A cluster's settings could not be completed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// DescribeCluster was refused.
    #[error(
        "eks:DescribeCluster on cluster {name:?} was denied ({source}): grant eks:DescribeCluster to the controller's role (deploy/aws/cloudformation.yaml does), or give {missing}"
    )]
    Denied {
        /// Cluster name.
        name: String,
        /// The flags that would make the call unnecessary.
        missing: String,
        /// The refusal.
        source: AwsError,
    },
    /// No EKS cluster has that name.
    #[error(
        "eks:DescribeCluster: no EKS cluster named {name:?} in this region: check --cluster-name (CLUSTER_NAME) and --aws-region, or, for a cluster EKS does not run, give {missing}"
    )]
    NotFound {
        /// Cluster name.
        name: String,
        /// The flags that would make the call unnecessary.
        missing: String,
    },
    /// The call failed otherwise.
    #[error("eks:DescribeCluster on cluster {name:?}: {source}")]
    Failed {
        /// Cluster name.
        name: String,
        /// What failed.
        source: AwsError,
    },
    /// EKS answered without a field the nodes need.
    #[error("eks:DescribeCluster on cluster {name:?} gave no {field}: give {flag}")]
    Incomplete {
        /// Cluster name.
        name: String,
        /// The field the answer lacked.
        field: &'static str,
        /// The flag that gives it.
        flag: &'static str,
    },
    /// A setting is malformed.
    #[error("{flag} {value:?}: {reason}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What it was given.
        value: String,
        /// Why it is refused, with the fix.
        reason: String,
    },
}

/// A complete cluster: where nodes join, and the version AMI aliases resolve for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedCluster {
    /// What nodes bootstrap with.
    pub info: ClusterInfo,
    /// Kubernetes minor version (`1.31`).
    pub kubernetes_version: String,
}

impl KnownCluster {
    /// The flags still to be given for DescribeCluster to be unnecessary.
    fn missing_flags(&self) -> String {
        let mut missing = Vec::new();
        if self.endpoint.is_none() {
            missing.push("--cluster-endpoint");
        }
        if self.ca_bundle.is_none() {
            missing.push("--cluster-ca-bundle");
        }
        if self.service_cidr.is_none() {
            missing.push("--cluster-cidr");
        }
        if self.kubernetes_version.is_none() {
            missing.push("--kubernetes-version");
        }
        missing.join(", ")
    }

    /// Checks what is given (before anything is contacted).
    pub fn check(&self) -> Result<(), ClusterError> {
        if let Some(endpoint) = &self.endpoint {
            check_endpoint(endpoint)?;
        }
        if let Some(cidr) = &self.service_cidr {
            check_cidr(cidr)?;
        }
        if let Some(version) = &self.kubernetes_version {
            minor_version(version)?;
        }
        Ok(())
    }

    /// Every field is known: EKS need not be asked.
    pub fn is_complete(&self) -> bool {
        self.endpoint.is_some()
            && self.ca_bundle.is_some()
            && self.service_cidr.is_some()
            && self.kubernetes_version.is_some()
    }

    /// The settings completed by `described` (what DescribeCluster said, when it was asked).
    pub fn resolve(
        self,
        described: Option<DescribedCluster>,
    ) -> Result<ResolvedCluster, ClusterError> {
        let described = described.unwrap_or_default();
        let name = self.name.clone();
        let incomplete = |field, flag| ClusterError::Incomplete {
            name: name.clone(),
            field,
            flag,
        };
        let ipv6 = described.ip_family.as_deref() == Some("ipv6");
        let described_cidr = if ipv6 {
            described.service_ipv6_cidr
        } else {
            described.service_ipv4_cidr
        };
        let endpoint = self
            .endpoint
            .or(described.endpoint)
            .ok_or_else(|| incomplete("endpoint", "--cluster-endpoint"))?;
        let ca_bundle = self
            .ca_bundle
            .or(described.ca_bundle)
            .ok_or_else(|| incomplete("certificateAuthority", "--cluster-ca-bundle"))?;
        let service_cidr = self
            .service_cidr
            .or(described_cidr)
            .ok_or_else(|| incomplete("kubernetesNetworkConfig service CIDR", "--cluster-cidr"))?;
        let version = self
            .kubernetes_version
            .or(described.version)
            .ok_or_else(|| incomplete("version", "--kubernetes-version"))?;
        Ok(ResolvedCluster {
            info: ClusterInfo {
                name: self.name,
                endpoint: check_endpoint(endpoint.trim_end_matches('/'))?,
                ca_bundle: Some(ca_bundle),
                service_cidr: Some(check_cidr(&service_cidr)?),
            },
            kubernetes_version: minor_version(&version)?,
        })
    }
}

fn check_endpoint(endpoint: &str) -> Result<String, ClusterError> {
    if !endpoint.starts_with("https://") || endpoint.len() == "https://".len() {
        return Err(ClusterError::Invalid {
            flag: "--cluster-endpoint",
            value: endpoint.to_owned(),
            reason: "give the API server's https:// address, e.g. https://ABC.gr7.us-west-2.eks.amazonaws.com".into(),
        });
    }
    Ok(endpoint.to_owned())
}

/// An IPv4 or IPv6 CIDR (`172.20.0.0/16`, `fd00:10:96::/112`).
fn check_cidr(cidr: &str) -> Result<String, ClusterError> {
    let invalid = || ClusterError::Invalid {
        flag: "--cluster-cidr",
        value: cidr.to_owned(),
        reason: "give the cluster's service CIDR, e.g. 172.20.0.0/16 or fd00:10:96::/112".into(),
    };
    let (address, bits) = cidr.split_once('/').ok_or_else(invalid)?;
    let bits: u8 = bits.parse().map_err(|_| invalid())?;
    let max = match address.parse::<std::net::IpAddr>().map_err(|_| invalid())? {
        std::net::IpAddr::V4(_) => 32,
        std::net::IpAddr::V6(_) => 128,
    };
    if bits > max {
        return Err(invalid());
    }
    Ok(cidr.to_owned())
}

/// `1.31`, from `1.31`, `v1.31.4`, `1.31.4-eks-0a21954` or `1.31+`.
pub fn minor_version(version: &str) -> Result<String, ClusterError> {
    let invalid = || ClusterError::Invalid {
        flag: "--kubernetes-version",
        value: version.to_owned(),
        reason: "give the cluster's Kubernetes minor version, e.g. 1.31".into(),
    };
    let text = version.trim().trim_start_matches('v');
    let mut parts = text.splitn(3, '.');
    let major = parts.next().ok_or_else(invalid)?;
    let minor: String = parts
        .next()
        .ok_or_else(invalid)?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    if major != "1" || minor.is_empty() {
        return Err(invalid());
    }
    Ok(format!("1.{minor}"))
}

/// The API server's minor version from its `/version` answer (`major`, `minor`: `"1"`,
/// `"31+"` on EKS).
pub fn server_minor_version(major: &str, minor: &str) -> Result<String, ClusterError> {
    minor_version(&format!("{major}.{minor}"))
}

/// Asks EKS for what `known` lacks, and completes it.
pub async fn resolve(
    eks: &aws_sdk_eks::Client,
    known: KnownCluster,
) -> Result<ResolvedCluster, ClusterError> {
    if known.is_complete() {
        return known.resolve(None);
    }
    let described = describe(eks, &known).await?;
    known.resolve(Some(described))
}

async fn describe(
    eks: &aws_sdk_eks::Client,
    known: &KnownCluster,
) -> Result<DescribedCluster, ClusterError> {
    let answer = eks
        .describe_cluster()
        .name(&known.name)
        .send()
        .await
        .map_err(|e| {
            let source = AwsError::from_sdk("DescribeCluster", e);
            let name = known.name.clone();
            if source.is_auth() {
                ClusterError::Denied {
                    name,
                    missing: known.missing_flags(),
                    source,
                }
            } else if source.is_not_found() {
                ClusterError::NotFound {
                    name,
                    missing: known.missing_flags(),
                }
            } else {
                ClusterError::Failed { name, source }
            }
        })?;
    let Some(cluster) = answer.cluster else {
        return Err(ClusterError::NotFound {
            name: known.name.clone(),
            missing: known.missing_flags(),
        });
    };
    let network = cluster.kubernetes_network_config;
    Ok(DescribedCluster {
        endpoint: cluster.endpoint,
        ca_bundle: cluster.certificate_authority.and_then(|ca| ca.data),
        service_ipv4_cidr: network.as_ref().and_then(|n| n.service_ipv4_cidr.clone()),
        service_ipv6_cidr: network.as_ref().and_then(|n| n.service_ipv6_cidr.clone()),
        ip_family: network
            .as_ref()
            .and_then(|n| n.ip_family.as_ref().map(|f| f.as_str().to_owned())),
        version: cluster.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn known() -> KnownCluster {
        KnownCluster {
            name: "prod".into(),
            ..KnownCluster::default()
        }
    }

    fn described() -> DescribedCluster {
        DescribedCluster {
            endpoint: Some("https://ABC.gr7.us-west-2.eks.amazonaws.com/".into()),
            ca_bundle: Some("Q0E=".into()),
            service_ipv4_cidr: Some("172.20.0.0/16".into()),
            service_ipv6_cidr: Some("fd00:10:96::/112".into()),
            ip_family: Some("ipv4".into()),
            version: Some("1.31".into()),
        }
    }

    #[test]
    fn flags_win_and_eks_fills_the_rest() {
        let resolved = KnownCluster {
            service_cidr: Some("10.100.0.0/16".into()),
            kubernetes_version: Some("v1.30.2".into()),
            ..known()
        }
        .resolve(Some(described()))
        .unwrap();
        assert_eq!(
            resolved.info.endpoint,
            "https://ABC.gr7.us-west-2.eks.amazonaws.com"
        );
        assert_eq!(resolved.info.ca_bundle.as_deref(), Some("Q0E="));
        assert_eq!(resolved.info.service_cidr.as_deref(), Some("10.100.0.0/16"));
        assert_eq!(resolved.kubernetes_version, "1.30");
    }

    #[test]
    fn an_ipv6_cluster_gives_its_ipv6_service_cidr() {
        let mut eks = described();
        eks.ip_family = Some("ipv6".into());
        let resolved = known().resolve(Some(eks)).unwrap();
        assert_eq!(
            resolved.info.service_cidr.as_deref(),
            Some("fd00:10:96::/112")
        );
    }

    #[test]
    fn what_nobody_gives_is_named_with_its_flag() {
        let mut eks = described();
        eks.service_ipv4_cidr = None;
        let err = known().resolve(Some(eks)).unwrap_err().to_string();
        assert!(err.contains("--cluster-cidr"), "{err}");
        let err = KnownCluster {
            endpoint: Some("ABC.eks.amazonaws.com".into()),
            ..known()
        }
        .resolve(Some(described()))
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("--cluster-endpoint") && err.contains("https://"),
            "{err}"
        );
        let err = KnownCluster {
            service_cidr: Some("172.20.0.0/33".into()),
            ..known()
        }
        .resolve(Some(described()))
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("--cluster-cidr \"172.20.0.0/33\""), "{err}");
    }

    #[test]
    fn versions_read_as_minor_versions() {
        assert_eq!(minor_version("1.31").unwrap(), "1.31");
        assert_eq!(minor_version("v1.31.4-eks-0a21954").unwrap(), "1.31");
        assert_eq!(server_minor_version("1", "31+").unwrap(), "1.31");
        assert!(minor_version("latest").is_err());
        assert!(minor_version("2.0").is_err());
    }

    #[test]
    fn a_denied_call_names_the_permission_and_the_flags() {
        let err = ClusterError::Denied {
            name: "prod".into(),
            missing: KnownCluster {
                kubernetes_version: Some("1.31".into()),
                ..known()
            }
            .missing_flags(),
            source: AwsError::new("DescribeCluster", "AccessDeniedException", "not authorized"),
        }
        .to_string();
        assert!(err.contains("eks:DescribeCluster"), "{err}");
        assert!(
            err.contains("--cluster-endpoint, --cluster-ca-bundle, --cluster-cidr"),
            "{err}"
        );
        assert!(!err.contains("--kubernetes-version"), "{err}");
    }
}
