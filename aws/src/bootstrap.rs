//! Instance user data: the node's bootstrap for each AMI family, merged with the
//! EC2NodeClass's own `userData` as upstream does. Pure text generation.
//!
//! | family | format | merge |
//! |---|---|---|
//! | AL2023 | MIME multipart with a nodeadm `NodeConfig` part | the user's parts (MIME, a NodeConfig, or a script) first, ours last |
//! | Bottlerocket | TOML settings | the user's TOML, with cluster, labels, taints and max-pods set by us |
//! | AL2 | MIME multipart with a `bootstrap.sh` script part | the user's parts first, ours last |
//! | Custom | the user's data, unchanged | — |

use std::collections::BTreeMap;
use std::fmt::Write as _;

use karpenter_core::api::ec2nodeclass::{AmiFamily, KubeletConfiguration};
use karpenter_core::model::Taint;

/// Where the node finds its cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct ClusterInfo {
    /// Cluster name.
    pub name: String,
    /// API server endpoint (`--cluster-endpoint`).
    pub endpoint: String,
    /// Base64 CA bundle (`--cluster-ca-bundle`), if known.
    pub ca_bundle: Option<String>,
    /// Service CIDR, if known (nodeadm wants it).
    pub service_cidr: Option<String>,
}

/// What the node registers with.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeBootstrap<'a> {
    /// Cluster.
    pub cluster: &'a ClusterInfo,
    /// Labels the kubelet registers the node with.
    pub labels: &'a BTreeMap<String, String>,
    /// Taints it registers with (including `karpenter.sh/unregistered`).
    pub taints: &'a [Taint],
    /// Kubelet settings from the node class.
    pub kubelet: Option<&'a KubeletConfiguration>,
    /// The node class's `userData`.
    pub user_data: Option<&'a str>,
}

/// Why user data could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserDataError {
    /// The node class's userData is not valid for its family.
    #[error("spec.userData: {0}")]
    Invalid(String),
    /// Windows families are not supported.
    #[error(
        "spec.amiFamily: {0:?} nodes are not supported yet; use AL2023, Bottlerocket, AL2 or Custom"
    )]
    Unsupported(AmiFamily),
}

const BOUNDARY: &str = "//";

fn taint_flag(taints: &[Taint]) -> String {
    taints
        .iter()
        .map(|t| format!("{}={}:{}", t.key, t.value, t.effect))
        .collect::<Vec<_>>()
        .join(",")
}

fn label_flag(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The user data for `family`.
pub fn user_data(family: AmiFamily, node: &NodeBootstrap<'_>) -> Result<String, UserDataError> {
    match family {
        AmiFamily::AL2023 => Ok(al2023(node)),
        AmiFamily::Bottlerocket => bottlerocket(node),
        AmiFamily::AL2 => Ok(al2(node)),
        AmiFamily::Custom => Ok(node.user_data.unwrap_or_default().to_owned()),
        other => Err(UserDataError::Unsupported(other)),
    }
}

/// A MIME part: content type and body.
type Part = (String, String);

/// Splits MIME multipart user data into its parts; anything else is one part whose content
/// type is guessed the way nodeadm and cloud-init would.
fn user_parts(user_data: Option<&str>) -> Vec<Part> {
    let Some(data) = user_data.map(str::trim).filter(|d| !d.is_empty()) else {
        return Vec::new();
    };
    if data.starts_with("MIME-Version:")
        && let Some(boundary) = data
            .lines()
            .find_map(|l| l.split("boundary=").nth(1))
            .map(|b| b.trim().trim_matches('"').to_owned())
    {
        let delimiter = format!("--{boundary}");
        return data
            .split(&delimiter)
            .skip(1)
            .filter(|chunk| !chunk.starts_with("--"))
            .filter_map(|chunk| {
                let chunk = chunk.trim_start_matches(['\r', '\n']);
                let (headers, body) = chunk
                    .split_once("\n\n")
                    .or_else(|| chunk.split_once("\r\n\r\n"))?;
                let content_type = headers
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Type:"))
                    .map(|t| t.trim().to_owned())
                    .unwrap_or_else(|| "text/x-shellscript".to_owned());
                Some((content_type, body.trim_end().to_owned()))
            })
            .collect();
    }
    let content_type = if data.starts_with("apiVersion:") || data.contains("kind: NodeConfig") {
        "application/node.eks.aws"
    } else {
        "text/x-shellscript; charset=\"us-ascii\""
    };
    vec![(content_type.to_owned(), data.to_owned())]
}

fn mime(parts: &[Part]) -> String {
    let mut out =
        format!("MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary=\"{BOUNDARY}\"\n\n");
    for (content_type, body) in parts {
        let _ = write!(
            out,
            "--{BOUNDARY}\nContent-Type: {content_type}\n\n{body}\n\n"
        );
    }
    let _ = writeln!(out, "--{BOUNDARY}--");
    out
}

fn yaml_string(value: &str) -> String {
    // JSON strings are valid YAML scalars and escape everything that needs it.
    serde_json::to_string(value).unwrap_or_default()
}

fn al2023(node: &NodeBootstrap<'_>) -> String {
    let cluster = node.cluster;
    let mut config = String::from("apiVersion: node.eks.aws/v1alpha1\nkind: NodeConfig\nspec:\n");
    let _ = writeln!(
        config,
        "  cluster:\n    name: {}\n    apiServerEndpoint: {}",
        yaml_string(&cluster.name),
        yaml_string(&cluster.endpoint)
    );
    if let Some(ca) = &cluster.ca_bundle {
        let _ = writeln!(config, "    certificateAuthority: {}", yaml_string(ca));
    }
    if let Some(cidr) = &cluster.service_cidr {
        let _ = writeln!(config, "    cidr: {}", yaml_string(cidr));
    }
    config.push_str("  kubelet:\n");
    let mut kubelet_config = serde_json::Map::new();
    if let Some(k) = node.kubelet
        && let Ok(serde_json::Value::Object(map)) = serde_json::to_value(k)
    {
        kubelet_config = map;
    }
    if !kubelet_config.is_empty() {
        let _ = writeln!(
            config,
            "    config: {}",
            serde_json::Value::Object(kubelet_config)
        );
    }
    config.push_str("    flags:\n");
    let _ = writeln!(
        config,
        "    - {}",
        yaml_string(&format!("--node-labels={}", label_flag(node.labels)))
    );
    if !node.taints.is_empty() {
        let _ = writeln!(
            config,
            "    - {}",
            yaml_string(&format!(
                "--register-with-taints={}",
                taint_flag(node.taints)
            ))
        );
    }
    let mut parts = user_parts(node.user_data);
    parts.push(("application/node.eks.aws".to_owned(), config));
    mime(&parts)
}

fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

fn al2(node: &NodeBootstrap<'_>) -> String {
    let cluster = node.cluster;
    let mut script = String::from(
        "#!/bin/bash -xe\nexec > >(tee /var/log/user-data.log|logger -t user-data -s 2>/dev/console) 2>&1\n",
    );
    let _ = write!(
        script,
        "/etc/eks/bootstrap.sh {} --apiserver-endpoint {}",
        shell_quote(&cluster.name),
        shell_quote(&cluster.endpoint)
    );
    if let Some(ca) = &cluster.ca_bundle {
        let _ = write!(script, " --b64-cluster-ca {}", shell_quote(ca));
    }
    // bootstrap.sh derives the cluster DNS address from the service CIDR; without it, it
    // guesses 10.100.0.10 or 172.20.0.10 from the VPC's range.
    match cluster.service_cidr.as_deref() {
        Some(cidr) if cidr.contains(':') => {
            let _ = write!(
                script,
                " --ip-family ipv6 --service-ipv6-cidr {}",
                shell_quote(cidr)
            );
        }
        Some(cidr) => {
            let _ = write!(script, " --service-ipv4-cidr {}", shell_quote(cidr));
        }
        None => {}
    }
    let mut kubelet_args = vec![format!("--node-labels={}", label_flag(node.labels))];
    if !node.taints.is_empty() {
        kubelet_args.push(format!(
            "--register-with-taints={}",
            taint_flag(node.taints)
        ));
    }
    if let Some(max_pods) = node.kubelet.and_then(|k| k.max_pods) {
        script.push_str(" --use-max-pods false");
        kubelet_args.push(format!("--max-pods={max_pods}"));
    }
    let _ = writeln!(
        script,
        " \\\n--kubelet-extra-args {}",
        shell_quote(&kubelet_args.join(" "))
    );
    let mut parts = user_parts(node.user_data);
    parts.push((
        "text/x-shellscript; charset=\"us-ascii\"".to_owned(),
        script,
    ));
    mime(&parts)
}

fn bottlerocket(node: &NodeBootstrap<'_>) -> Result<String, UserDataError> {
    let mut root: toml::Table = match node.user_data.map(str::trim).filter(|d| !d.is_empty()) {
        Some(text) => text
            .parse()
            .map_err(|e: toml::de::Error| UserDataError::Invalid(format!("not valid TOML: {e}")))?,
        None => toml::Table::new(),
    };
    let settings = table(&mut root, "settings")?;
    let kubernetes = table(settings, "kubernetes")?;
    let cluster = node.cluster;
    kubernetes.insert("cluster-name".into(), cluster.name.clone().into());
    kubernetes.insert("api-server".into(), cluster.endpoint.clone().into());
    if let Some(ca) = &cluster.ca_bundle {
        kubernetes.insert("cluster-certificate".into(), ca.clone().into());
    }
    if let Some(max_pods) = node.kubelet.and_then(|k| k.max_pods) {
        kubernetes.insert("max-pods".into(), i64::from(max_pods).into());
    }
    let labels = table(kubernetes, "node-labels")?;
    for (k, v) in node.labels {
        labels.insert(k.clone(), v.clone().into());
    }
    let taints = table(kubernetes, "node-taints")?;
    for t in node.taints {
        let entry = format!("{}:{}", t.value, t.effect);
        let values = taints
            .entry(t.key.clone())
            .or_insert_with(|| toml::Value::Array(Vec::new()));
        match values {
            toml::Value::Array(list) => list.push(entry.into()),
            _ => {
                return Err(UserDataError::Invalid(format!(
                    "settings.kubernetes.node-taints.{} must be a list",
                    t.key
                )));
            }
        }
    }
    Ok(toml::to_string(&root).unwrap_or_default())
}

fn table<'t>(parent: &'t mut toml::Table, key: &str) -> Result<&'t mut toml::Table, UserDataError> {
    match parent
        .entry(key.to_owned())
        .or_insert_with(|| toml::Value::Table(toml::Table::new()))
    {
        toml::Value::Table(t) => Ok(t),
        _ => Err(UserDataError::Invalid(format!(
            "{key} must be a TOML table"
        ))),
    }
}

#[cfg(test)]
mod tests;
