//! Resource amounts as a fixed array of well-known resources, so binpacking never allocates.
//!
//! Twelve resources have fixed places. Any other extended resource a pod asks for, a node
//! reports or a NodeOverlay adds to instance types (`smarter-devices/fuse`,
//! `hugepages-2Mi`, …) takes one of [`EXTENDED_SLOTS`] further places the first time it is
//! seen with a non-zero amount, for the life of the process: the registry below maps names
//! to places and back, so amounts stay a `Copy` array and events, journals and statuses
//! carry names, never places. A resource seen after every place is taken is reported as one
//! no instance type provides, as every extended resource was before places existed.

use std::fmt;
use std::sync::{Mutex, OnceLock};

use super::quantity::{Quantity, QuantityError, format_bytes, format_cpu};

/// The resources Karpenter reasons about: twelve known ones and [`EXTENDED_SLOTS`] places
/// for extended resources, named by the registry. Anything else a pod requests (no place
/// left) cannot be provided by any instance type and makes it unschedulable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
    /// The first extended resource registered in this process.
    Extended0,
    /// The second.
    Extended1,
    /// The third.
    Extended2,
    /// The fourth.
    Extended3,
    /// The fifth.
    Extended4,
    /// The sixth.
    Extended5,
    /// The seventh.
    Extended6,
    /// The eighth.
    Extended7,
}

/// Places for extended resources beyond the twelve known ones.
pub const EXTENDED_SLOTS: usize = 8;

/// Number of [`ResourceName`]s.
pub const RESOURCE_COUNT: usize = 12 + EXTENDED_SLOTS;

/// The extended resources registered so far, by place.
static EXTENDED: [OnceLock<&'static str>; EXTENDED_SLOTS] =
    [const { OnceLock::new() }; EXTENDED_SLOTS];
/// Held while a name is registered, so two threads never take two places for one name.
static REGISTERING: Mutex<()> = Mutex::new(());
/// Set once a resource found every place taken (it is logged once).
static FULL: OnceLock<String> = OnceLock::new();

/// Names that are Kubernetes' own and never extended resources.
const NATIVE: &[&str] = &["cpu", "memory", "pods", "ephemeral-storage", "storage"];

/// Whether `name` is an extended resource as Kubernetes defines one (a domain-prefixed name
/// outside `kubernetes.io`, not a `requests.` quota name), or a huge page size
/// (`hugepages-2Mi`), which overlays add as upstream's design shows.
pub fn is_extended_resource(name: &str) -> bool {
    if NATIVE.contains(&name) {
        return false;
    }
    if name.starts_with("hugepages-") {
        return true;
    }
    match name.split_once('/') {
        Some((domain, rest)) => {
            !rest.is_empty()
                && !domain.is_empty()
                && domain != "kubernetes.io"
                && !domain.ends_with(".kubernetes.io")
                && !name.starts_with("requests.")
        }
        None => false,
    }
}

impl ResourceName {
    /// Every resource, in index order: the known ones, then the extended places.
    pub const ALL: [ResourceName; RESOURCE_COUNT] = {
        let mut out = [ResourceName::Cpu; RESOURCE_COUNT];
        let mut i = 0;
        while i < RESOURCE_COUNT {
            out[i] = if i < ResourceName::KNOWN.len() {
                ResourceName::KNOWN[i]
            } else {
                ResourceName::EXTENDED[i - ResourceName::KNOWN.len()]
            };
            i += 1;
        }
        out
    };

    /// The twelve resources with fixed places, in index order.
    pub const KNOWN: [ResourceName; 12] = [
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

    /// The places for extended resources, in order.
    const EXTENDED: [ResourceName; EXTENDED_SLOTS] = [
        ResourceName::Extended0,
        ResourceName::Extended1,
        ResourceName::Extended2,
        ResourceName::Extended3,
        ResourceName::Extended4,
        ResourceName::Extended5,
        ResourceName::Extended6,
        ResourceName::Extended7,
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
            ResourceName::Extended0
            | ResourceName::Extended1
            | ResourceName::Extended2
            | ResourceName::Extended3
            | ResourceName::Extended4
            | ResourceName::Extended5
            | ResourceName::Extended6
            | ResourceName::Extended7 => self.extended_name().unwrap_or("unregistered"),
        }
    }

    /// The name registered at an extended place.
    fn extended_name(self) -> Option<&'static str> {
        let slot = (self as usize).checked_sub(ResourceName::Extended0 as usize)?;
        EXTENDED.get(slot)?.get().copied()
    }

    /// Looks a Kubernetes resource name up among the known and registered ones.
    pub fn parse(name: &str) -> Option<ResourceName> {
        ResourceName::ALL.into_iter().find(|r| {
            if r.is_extended() {
                r.extended_name() == Some(name)
            } else {
                r.as_str() == name
            }
        })
    }

    /// Looks `name` up, registering it at a free extended place if it is an extended
    /// resource not seen before; `None` when it is neither known nor extended, or every
    /// place is taken.
    pub fn register(name: &str) -> Option<ResourceName> {
        if let Some(known) = ResourceName::parse(name) {
            return Some(known);
        }
        if !is_extended_resource(name) {
            return None;
        }
        let _held = REGISTERING.lock().unwrap_or_else(|p| p.into_inner());
        for place in ResourceName::EXTENDED {
            match place.extended_name() {
                Some(taken) if taken == name => return Some(place),
                Some(_) => continue,
                None => {
                    let leaked: &'static str = Box::leak(name.to_owned().into_boxed_str());
                    let _ = EXTENDED[place as usize - ResourceName::Extended0 as usize].set(leaked);
                    return Some(place);
                }
            }
        }
        if FULL.set(name.to_owned()).is_ok() {
            tracing::warn!(
                resource = name,
                places = EXTENDED_SLOTS,
                "Every place for extended resources is taken: pods asking for this one are reported as asking for a resource no instance type provides."
            );
        }
        None
    }

    /// Whether this is one of the places for extended resources.
    pub fn is_extended(self) -> bool {
        self as usize >= ResourceName::Extended0 as usize
    }

    /// Whether a quantity of this resource is counted in thousandths (only CPU).
    pub fn is_milli(self) -> bool {
        self == ResourceName::Cpu
    }

    /// Whether amounts are bytes: memory, ephemeral storage and huge pages.
    pub fn is_bytes(self) -> bool {
        matches!(self, ResourceName::Memory | ResourceName::EphemeralStorage)
            || self
                .extended_name()
                .is_some_and(|n| n.starts_with("hugepages-"))
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

/// A known resource serializes as its variant name (`Cpu`), as it always has; an extended
/// one as its Kubernetes name, since its place differs between processes.
impl serde::Serialize for ResourceName {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if self.is_extended() {
            serializer.serialize_str(self.as_str())
        } else {
            serializer.serialize_str(&format!("{self:?}"))
        }
    }
}

impl<'de> serde::Deserialize<'de> for ResourceName {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        ResourceName::KNOWN
            .into_iter()
            .find(|r| format!("{r:?}") == name)
            .or_else(|| ResourceName::register(&name))
            .ok_or_else(|| serde::de::Error::custom(format!("unknown resource {name:?}")))
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
        // Without short-circuiting: twenty compares in a row beat a branch each.
        self.0
            .iter()
            .zip(&capacity.0)
            .fold(true, |fits, (need, have)| fits & (need <= have))
    }

    /// The first resource of `self` that exceeds `capacity`.
    pub fn first_excess(&self, capacity: &Resources) -> Option<ResourceName> {
        ResourceName::ALL
            .into_iter()
            .find(|r| self.get(*r) > capacity.get(*r))
    }

    /// Parses a Kubernetes resource list, registering extended resources with non-zero
    /// amounts. Names with no place (not a resource this scheduler knows, or every extended
    /// place taken) are returned separately; zero amounts of them are dropped.
    pub fn from_quantities<'a>(
        list: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<(Resources, Vec<String>), QuantityError> {
        let mut out = Resources::ZERO;
        let mut unknown = Vec::new();
        for (name, value) in list {
            let quantity = Quantity::parse(value)?;
            let place = match ResourceName::parse(name) {
                Some(r) => Some(r),
                None if quantity.units_ceil() == 0 && quantity.milli_ceil() == 0 => continue,
                None => ResourceName::register(name),
            };
            match place {
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
                    _ if r.is_bytes() => format_bytes(v),
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
            ("unknown-native", "1"),
            ("example.com/not-seen", "0"),
        ])
        .unwrap();
        assert_eq!(r, Resources::cpu_memory(250, 1 << 30));
        assert_eq!(unknown, vec!["unknown-native".to_owned()]);
        assert_eq!(ResourceName::parse("example.com/not-seen"), None);
    }

    #[test]
    fn extended_resources_take_a_place_and_keep_their_names() {
        let (r, unknown) =
            Resources::from_quantities([("smarter-devices/fuse", "1"), ("hugepages-2Mi", "100Mi")])
                .unwrap();
        assert!(unknown.is_empty(), "{unknown:?}");
        let fuse = ResourceName::parse("smarter-devices/fuse").unwrap();
        let huge = ResourceName::parse("hugepages-2Mi").unwrap();
        assert!(fuse.is_extended() && huge.is_extended() && fuse != huge);
        assert_eq!(r.get(fuse), 1);
        assert_eq!(r.get(huge), 100 << 20);
        assert!(huge.is_bytes() && !fuse.is_bytes());
        let text = r.to_string();
        assert!(text.contains("smarter-devices/fuse: 1"), "{text}");
        assert!(text.contains("hugepages-2Mi: 100Mi"), "{text}");
        assert_eq!(ResourceName::register("smarter-devices/fuse"), Some(fuse));
        let json = serde_json::to_string(&r).unwrap();
        assert_eq!(serde_json::from_str::<Resources>(&json).unwrap(), r);
        assert!(!is_extended_resource("kubernetes.io/foo"));
        assert!(!is_extended_resource("storage"));
        assert!(is_extended_resource("example.com/dongle"));
    }
}
