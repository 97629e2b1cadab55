//! Host ports a pod binds, and when two pods' ports keep them off one node (kube-scheduler's
//! NodePorts check).

/// A host port a container binds (`hostPort`, with its protocol and host IP).
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct HostPort {
    /// Host IP; `0.0.0.0` (every address) when unset.
    pub ip: String,
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Port number.
    pub port: i32,
}

impl HostPort {
    const EVERY_ADDRESS: &str = "0.0.0.0";

    /// Whether two pods binding these could not share a node: same port and protocol, and
    /// the same address or either on every address (kube-scheduler's NodePorts check).
    pub fn conflicts_with(&self, other: &HostPort) -> bool {
        self.port == other.port
            && self.protocol == other.protocol
            && (self.ip == other.ip
                || self.ip == Self::EVERY_ADDRESS
                || other.ip == Self::EVERY_ADDRESS)
    }
}

/// Whether any port of `a` conflicts with any of `b`.
pub fn ports_conflict(a: &[HostPort], b: &[HostPort]) -> bool {
    a.iter().any(|p| b.iter().any(|q| p.conflicts_with(q)))
}

/// The host ports a pod's containers and init containers bind.
pub(super) fn host_ports(spec: Option<&k8s_openapi::api::core::v1::PodSpec>) -> Vec<HostPort> {
    let Some(spec) = spec else {
        return Vec::new();
    };
    let mut out: Vec<HostPort> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|port| *port > 0)?;
            Some(HostPort {
                ip: p
                    .host_ip
                    .clone()
                    .filter(|ip| !ip.is_empty())
                    .unwrap_or_else(|| HostPort::EVERY_ADDRESS.to_owned()),
                protocol: p.protocol.clone().unwrap_or_else(|| "TCP".to_owned()),
                port,
            })
        })
        .collect();
    out.sort();
    out.dedup();
    out
}
