//! What a pod asks for, as kube-scheduler sums it (containers, init containers, overhead),
//! and why a pod cannot be read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod as KubePod};

use crate::model::quantity::QuantityError;
use crate::model::resources::{ResourceName, Resources};

/// Why a Kubernetes pod could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodError {
    /// A resource quantity is malformed.
    #[error("pod {pod}: {source}")]
    Quantity {
        /// `namespace/name`.
        pod: String,
        /// The parse error.
        source: QuantityError,
    },
}

fn container_requests(c: &Container) -> Result<(Resources, Vec<String>), QuantityError> {
    let Some(resources) = &c.resources else {
        return Ok((Resources::ZERO, Vec::new()));
    };
    // Kubernetes defaults a missing request to the limit.
    let mut list: BTreeMap<&str, &str> = BTreeMap::new();
    for source in [&resources.limits, &resources.requests]
        .into_iter()
        .flatten()
    {
        for (name, q) in source {
            list.insert(name.as_str(), q.0.as_str());
        }
    }
    Resources::from_quantities(list)
}

/// Effective requests as kube-scheduler computes them: the larger of the running containers
/// (plus restartable init "sidecar" containers) and each init container's peak (with the
/// sidecars started before it), plus pod overhead and one `pods`.
pub fn pod_requests(pod: &KubePod) -> Result<(Resources, Vec<String>), QuantityError> {
    let Some(spec) = &pod.spec else {
        return Ok((Resources::ZERO.with(ResourceName::Pods, 1), Vec::new()));
    };
    let mut unknown = Vec::new();
    let mut running = Resources::ZERO;
    for c in &spec.containers {
        let (r, u) = container_requests(c)?;
        running = running.add(&r);
        unknown.extend(u);
    }
    let mut sidecars = Resources::ZERO;
    let mut init_peak = Resources::ZERO;
    for c in spec.init_containers.iter().flatten() {
        let (r, u) = container_requests(c)?;
        unknown.extend(u);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.add(&r);
            init_peak = init_peak.max(&sidecars);
        } else {
            init_peak = init_peak.max(&sidecars.add(&r));
        }
    }
    let mut total = running.add(&sidecars).max(&init_peak);
    if let Some(overhead) = &spec.overhead {
        let (o, u) =
            Resources::from_quantities(overhead.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))?;
        total = total.add(&o);
        unknown.extend(u);
    }
    total.set(ResourceName::Pods, 1);
    unknown.sort();
    unknown.dedup();
    Ok((total, unknown))
}
