//! Resource amounts as a fixed array of well-known resources, so binpacking never allocates.

use std::fmt;

use super::quantity::{Quantity, QuantityError, format_bytes, format_cpu};

/// The resources Karpenter reasons about. Anything else a pod requests cannot be provided
/// by any instance type and makes it unschedulable.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum ResourceName {
    /// `cpu`, in millicores.
    Cpu,
    /// `memory`, in bytes.
    Memory,
    /// `pods`, a count.
    Pods,
    /// `ephemeral-storage`, in bytes.
    EphemeralStorage,
    /// `nvidia.com/gpu`.
    NvidiaGpu,
    /// `amd.com/gpu`.
    AmdGpu,
    /// `aws.amazon.com/neuron`.
    Neuron,
    /// `aws.amazon.com/neuroncore`.
    NeuronCore,
    /// `habana.ai/gaudi`.
    Gaudi,
    /// `vpc.amazonaws.com/efa`.
    Efa,
    /// `vpc.amazonaws.com/pod-eni`.
    PodEni,
    /// `vpc.amazonaws.com/PrivateIPv4Address`.
    PrivateIpv4,
}

/// Number of [`ResourceName`]s.
pub const RESOURCE_COUNT: usize = 12;

impl ResourceName {
    /// Every resource, in index order.
    pub const ALL: [ResourceName; RESOURCE_COUNT] = [
        ResourceName::Cpu,
        ResourceName::Memory,
        ResourceName::Pods,
        ResourceName::EphemeralStorage,
        ResourceName::NvidiaGpu,
        ResourceName::AmdGpu,
        ResourceName::Neuron,
        ResourceName::NeuronCore,
        ResourceName::Gaudi,
        ResourceName::Efa,
        ResourceName::PodEni,
        ResourceName::PrivateIpv4,
    ];

    /// The Kubernetes name.
    pub fn as_str(self) -> &'static str {
        match self {
            ResourceName::Cpu => "cpu",
            ResourceName::Memory => "memory",
            ResourceName::Pods => "pods",
            ResourceName::EphemeralStorage => "ephemeral-storage",
            ResourceName::NvidiaGpu => "nvidia.com/gpu",
            ResourceName::AmdGpu => "amd.com/gpu",
            ResourceName::Neuron => "aws.amazon.com/neuron",
            ResourceName::NeuronCore => "aws.amazon.com/neuroncore",
            ResourceName::Gaudi => "habana.ai/gaudi",
            ResourceName::Efa => "vpc.amazonaws.com/efa",
            ResourceName::PodEni => "vpc.amazonaws.com/pod-eni",
            ResourceName::PrivateIpv4 => "vpc.amazonaws.com/PrivateIPv4Address",
        }
    }

    /// Looks a Kubernetes resource name up.
    pub fn parse(name: &str) -> Option<ResourceName> {
        ResourceName::ALL.into_iter().find(|r| r.as_str() == name)
    }

    /// Whether a quantity of this resource is counted in thousandths (only CPU).
    fn is_milli(self) -> bool {
        self == ResourceName::Cpu
    }

    /// Accelerators and other scarce devices: instance types that have them are only used
    /// for pods that ask for them.
    pub fn is_exotic(self) -> bool {
        matches!(
            self,
            ResourceName::NvidiaGpu
                | ResourceName::AmdGpu
                | ResourceName::Neuron
                | ResourceName::NeuronCore
                | ResourceName::Gaudi
        )
    }
}

/// Amounts of each [`ResourceName`]: CPU in millicores, memory and storage in bytes, the rest
/// as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Resources(pub [i64; RESOURCE_COUNT]);

impl Resources {
    /// Nothing.
    pub const ZERO: Resources = Resources([0; RESOURCE_COUNT]);

    /// The amount of one resource.
    pub fn get(&self, name: ResourceName) -> i64 {
        self.0[name as usize]
    }

    /// Sets the amount of one resource.
    pub fn set(&mut self, name: ResourceName, value: i64) {
        self.0[name as usize] = value;
    }

    /// Builder form of [`Resources::set`].
    pub fn with(mut self, name: ResourceName, value: i64) -> Self {
        self.set(name, value);
        self
    }

    /// CPU millicores and memory bytes.
    pub fn cpu_memory(cpu_millis: i64, memory_bytes: i64) -> Self {
        Resources::ZERO
            .with(ResourceName::Cpu, cpu_millis)
            .with(ResourceName::Memory, memory_bytes)
    }

    /// Element-wise sum.
    pub fn add(&self, other: &Resources) -> Resources {
        let mut out = *self;
        for (o, v) in out.0.iter_mut().zip(other.0) {
            *o += v;
        }
        out
    }

    /// Element-wise difference.
    pub fn sub(&self, other: &Resources) -> Resources {
        let mut out = *self;
        for (o, v) in out.0.iter_mut().zip(other.0) {
            *o -= v;
        }
        out
    }

    /// Element-wise maximum.
    pub fn max(&self, other: &Resources) -> Resources {
        let mut out = *self;
        for (o, v) in out.0.iter_mut().zip(other.0) {
            *o = (*o).max(v);
        }
        out
    }

    /// Whether every amount of `self` is within `capacity`.
    pub fn fits_in(&self, capacity: &Resources) -> bool {
        self.0
            .iter()
            .zip(capacity.0)
            .all(|(need, have)| *need <= have)
    }

    /// The first resource of `self` that exceeds `capacity`.
    pub fn first_excess(&self, capacity: &Resources) -> Option<ResourceName> {
        ResourceName::ALL
            .into_iter()
            .find(|r| self.get(*r) > capacity.get(*r))
    }

    /// Parses a Kubernetes resource list. Unknown names are returned separately.
    pub fn from_quantities<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(Resources, Vec<String>), QuantityError> {
        let mut out = Resources::ZERO;
        let mut unknown = Vec::new();
        for (name, value) in list {
            let quantity = Quantity::parse(value)?;
            match ResourceName::parse(name) {
                Some(r) if r.is_milli() => out.set(r, quantity.milli_ceil()),
                Some(r) => out.set(r, quantity.units_ceil()),
                None => unknown.push(name.to_owned()),
            }
        }
        Ok((out, unknown))
    }

    /// Non-zero amounts as Kubernetes quantities (`cpu: 1500m`, `memory: 4Gi`).
    pub fn to_quantities(&self) -> Vec<(&'static str, String)> {
        ResourceName::ALL
            .into_iter()
            .filter(|r| self.get(*r) != 0)
            .map(|r| {
                let v = self.get(r);
                let text = match r {
                    ResourceName::Cpu => format_cpu(v),
                    ResourceName::Memory | ResourceName::EphemeralStorage => format_bytes(v),
                    _ => v.to_string(),
                };
                (r.as_str(), text)
            })
            .collect()
    }

    /// [`Resources::to_quantities`] as the map events and statuses carry.
    pub fn to_quantity_map(&self) -> std::collections::BTreeMap<String, String> {
        self.to_quantities()
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect()
    }
}

impl serde::Serialize for Resources {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let quantities = self.to_quantities();
        let mut map = serializer.serialize_map(Some(quantities.len()))?;
        for (name, value) in quantities {
            map.serialize_entry(name, &value)?;
        }
        map.end()
    }
}

impl<'de> serde::Deserialize<'de> for Resources {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let map = std::collections::BTreeMap::<String, String>::deserialize(deserializer)?;
        let (resources, unknown) =
            Resources::from_quantities(map.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                .map_err(serde::de::Error::custom)?;
        if let Some(name) = unknown.first() {
            return Err(serde::de::Error::custom(format!(
                "unknown resource {name:?}"
            )));
        }
        Ok(resources)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .to_quantities()
            .into_iter()
            .map(|(name, value)| format!("{name}: {value}"))
            .collect();
        write!(f, "{{{}}}", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_and_fit() {
        let a = Resources::cpu_memory(1500, 4 << 30);
        let b = Resources::cpu_memory(500, 1 << 30).with(ResourceName::Pods, 1);
        assert_eq!(a.add(&b).get(ResourceName::Cpu), 2000);
        assert!(b.fits_in(&a.with(ResourceName::Pods, 1)));
        assert_eq!(b.first_excess(&a), Some(ResourceName::Pods));
        assert_eq!(a.to_string(), "{cpu: 1500m, memory: 4Gi}");
    }

    #[test]
    fn parses_resource_lists() {
        let (r, unknown) = Resources::from_quantities([
            ("cpu", "250m"),
            ("memory", "1Gi"),
            ("example.com/foo", "1"),
        ])
        .unwrap();
        assert_eq!(r, Resources::cpu_memory(250, 1 << 30));
        assert_eq!(unknown, vec!["example.com/foo".to_owned()]);
    }
}
