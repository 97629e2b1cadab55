//! The embedded EC2 catalog: instance-type facts, zone offerings and on-demand prices from
//! `core/data/aws`, turned into [`InstanceType`]s with upstream's capacity and overhead rules.
//!
//! Spot prices are not in any static table. The embedded assumption, used by the simulator
//! and by tests, is [`assumed_spot_price`]: on-demand × (1 − d) with a discount d between 55%
//! and 75%, fixed per (type, zone) by a hash. Real spot discounts average 60–70%; varying them
//! by zone makes the choice of zone matter as it does on EC2.

use std::collections::{BTreeMap, HashMap};

use super::instance_type::{
    CapacityType, DEFAULT_ROOT_VOLUME_BYTES, InstanceType, KubeletSettings, Offering,
    default_max_pods, overhead,
};
use super::resources::{ResourceName, Resources};
use crate::vocab::labels;

const INSTANCE_TYPES_CSV: &str = include_str!("../../data/aws/instance-types.csv");
const OFFERINGS_CSV: &str = include_str!("../../data/aws/offerings.csv");
const PRICES_CSV: &str = include_str!("../../data/aws/on-demand-prices.csv");
const VPC_LIMITS_CSV: &str = include_str!("../../data/aws/vpc-limits.csv");

/// The region whose prices stand in for a region the embedded table does not hold, as
/// upstream's static fallback does.
pub const FALLBACK_PRICE_REGION: &str = "us-east-1";

/// A malformed row in an embedded table.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{table} line {line}: {message}")]
pub struct CatalogError {
    table: &'static str,
    line: usize,
    message: String,
}

/// Facts about one instance type, as EC2 describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceTypeInfo {
    /// Name, e.g. `m5.large`.
    pub name: String,
    /// vCPUs.
    pub vcpus: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// `amd64` or `arm64` (Kubernetes names).
    pub arch: &'static str,
    /// CPU maker, lower case (`intel`, `amd`, `aws`).
    pub cpu_manufacturer: String,
    /// Sustained clock speed in MHz.
    pub clock_mhz: Option<i64>,
    /// GPUs.
    pub gpu_count: i64,
    /// GPU model, lower case (`t4`).
    pub gpu_name: String,
    /// GPU maker, lower case (`nvidia`).
    pub gpu_manufacturer: String,
    /// Total GPU memory in MiB.
    pub gpu_memory_mib: i64,
    /// Inferentia/Trainium devices.
    pub accelerator_count: i64,
    /// Accelerator model, lower case.
    pub accelerator_name: String,
    /// Accelerator maker, lower case.
    pub accelerator_manufacturer: String,
    /// Local NVMe in GB.
    pub local_nvme_gb: i64,
    /// Max network interfaces.
    pub max_enis: i64,
    /// IPv4 addresses per interface.
    pub ipv4_per_eni: i64,
    /// Baseline network bandwidth in Mbps.
    pub network_mbps: Option<i64>,
    /// EFA supported.
    pub efa: bool,
    /// `nitro`, `xen` or empty.
    pub hypervisor: String,
    /// Bare metal.
    pub bare_metal: bool,
    /// Current generation.
    pub current_generation: bool,
    /// Can be bought as spot.
    pub spot: bool,
    /// Can be bought on demand.
    pub on_demand: bool,
    /// EBS baseline bandwidth in Mbps.
    pub ebs_mbps: Option<i64>,
    /// Branch ENIs for pods (pod-ENI), when trunking is supported.
    pub branch_enis: i64,
}

/// The embedded catalog.
#[derive(Debug, Clone)]
pub struct Catalog {
    types: Vec<InstanceTypeInfo>,
    /// region → type → zones.
    zones: HashMap<String, BTreeMap<String, Vec<String>>>,
    /// region → type → on-demand USD/hour.
    on_demand_prices: HashMap<String, HashMap<String, f64>>,
}

fn rows(
    table: &'static str,
    text: &'static str,
) -> impl Iterator<Item = (usize, HashMap<&'static str, &'static str>)> {
    let mut lines = text.lines();
    let header: Vec<&'static str> = lines.next().unwrap_or_default().split(',').collect();
    lines
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(move |(i, line)| {
            let _ = table;
            (i + 2, header.iter().copied().zip(line.split(',')).collect())
        })
}

fn field<'a>(
    row: &HashMap<&'static str, &'a str>,
    table: &'static str,
    line: usize,
    name: &str,
) -> Result<&'a str, CatalogError> {
    row.get(name).copied().ok_or_else(|| CatalogError {
        table,
        line,
        message: format!("missing column {name}"),
    })
}

fn number<T: std::str::FromStr>(
    row: &HashMap<&'static str, &str>,
    table: &'static str,
    line: usize,
    name: &str,
) -> Result<Option<T>, CatalogError> {
    let text = field(row, table, line, name)?;
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| CatalogError {
        table,
        line,
        message: format!("{name}: {text:?} is not a number"),
    })
}

impl Catalog {
    /// Parses the embedded tables.
    pub fn embedded() -> Result<Self, CatalogError> {
        let mut branch_enis = HashMap::new();
        for (line, row) in rows("vpc-limits.csv", VPC_LIMITS_CSV) {
            let name = field(&row, "vpc-limits.csv", line, "instance_type")?;
            if field(&row, "vpc-limits.csv", line, "trunking_compatible")? == "true" {
                let n: i64 = number(&row, "vpc-limits.csv", line, "branch_enis")?.unwrap_or(0);
                branch_enis.insert(name.to_owned(), n);
            }
        }
        let t = "instance-types.csv";
        let mut types = Vec::new();
        for (line, row) in rows(t, INSTANCE_TYPES_CSV) {
            let name = field(&row, t, line, "instance_type")?.to_owned();
            let archs = field(&row, t, line, "architectures")?;
            // Mac instances need dedicated hosts; Karpenter does not launch them.
            let arch = if archs.split('|').any(|a| a == "x86_64") {
                "amd64"
            } else if archs.split('|').any(|a| a == "arm64") {
                "arm64"
            } else {
                continue;
            };
            let lower = |col: &str| field(&row, t, line, col).map(str::to_ascii_lowercase);
            let usage = field(&row, t, line, "usage_classes")?;
            types.push(InstanceTypeInfo {
                vcpus: number(&row, t, line, "vcpus")?.unwrap_or(0),
                memory_mib: number(&row, t, line, "memory_mib")?.unwrap_or(0),
                arch,
                cpu_manufacturer: lower("cpu_manufacturer")?,
                clock_mhz: number::<f64>(&row, t, line, "sustained_clock_ghz")?
                    .map(|g| (g * 1000.0).round() as i64),
                gpu_count: number(&row, t, line, "gpu_count")?.unwrap_or(0),
                gpu_name: lower("gpu_name")?,
                gpu_manufacturer: lower("gpu_manufacturer")?,
                gpu_memory_mib: number(&row, t, line, "gpu_memory_mib")?.unwrap_or(0),
                accelerator_count: number(&row, t, line, "accelerator_count")?.unwrap_or(0),
                accelerator_name: lower("accelerator_name")?,
                accelerator_manufacturer: lower("accelerator_manufacturer")?,
                local_nvme_gb: number(&row, t, line, "local_nvme_gb")?.unwrap_or(0),
                max_enis: number(&row, t, line, "max_enis")?.unwrap_or(1),
                ipv4_per_eni: number(&row, t, line, "ipv4_per_eni")?.unwrap_or(2),
                network_mbps: number::<f64>(&row, t, line, "network_baseline_gbps")?
                    .map(|g| (g * 1000.0).round() as i64),
                efa: field(&row, t, line, "efa_supported")? == "true",
                hypervisor: field(&row, t, line, "hypervisor")?.to_owned(),
                bare_metal: field(&row, t, line, "bare_metal")? == "true",
                current_generation: field(&row, t, line, "current_generation")? == "true",
                spot: usage.split('|').any(|u| u == "spot"),
                on_demand: usage.split('|').any(|u| u == "on-demand"),
                ebs_mbps: number(&row, t, line, "ebs_baseline_mbps")?,
                branch_enis: branch_enis.get(&name).copied().unwrap_or(0),
                name,
            });
        }
        let t = "offerings.csv";
        let mut zones: HashMap<String, BTreeMap<String, Vec<String>>> = HashMap::new();
        for (line, row) in rows(t, OFFERINGS_CSV) {
            let region = field(&row, t, line, "region")?;
            let name = field(&row, t, line, "instance_type")?;
            let suffixes = field(&row, t, line, "zones")?;
            zones.entry(region.to_owned()).or_default().insert(
                name.to_owned(),
                suffixes
                    .split('|')
                    .map(|s| format!("{region}{s}"))
                    .collect(),
            );
        }
        let t = "on-demand-prices.csv";
        let mut on_demand_prices: HashMap<String, HashMap<String, f64>> = HashMap::new();
        for (line, row) in rows(t, PRICES_CSV) {
            let region = field(&row, t, line, "region")?;
            let name = field(&row, t, line, "instance_type")?;
            if let Some(price) = number::<f64>(&row, t, line, "usd_per_hour")? {
                on_demand_prices
                    .entry(region.to_owned())
                    .or_default()
                    .insert(name.to_owned(), price);
            }
        }
        Ok(Catalog {
            types,
            zones,
            on_demand_prices,
        })
    }

    /// Facts about every launchable type.
    pub fn infos(&self) -> &[InstanceTypeInfo] {
        &self.types
    }

    /// Regions with offering data.
    pub fn regions(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.zones.keys().map(String::as_str).collect();
        out.sort_unstable();
        out
    }

    /// The zones of a region.
    pub fn zones(&self, region: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .zones
            .get(region)
            .into_iter()
            .flat_map(|types| types.values().flatten().cloned())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The region whose table prices `region`: itself when the table holds it, else
    /// [`FALLBACK_PRICE_REGION`].
    pub fn priced_region<'a>(&self, region: &'a str) -> &'a str {
        if self.on_demand_prices.contains_key(region) {
            region
        } else {
            FALLBACK_PRICE_REGION
        }
    }

    /// Regions the price table holds.
    pub fn priced_regions(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self.on_demand_prices.keys().map(String::as_str).collect();
        out.sort_unstable();
        out
    }

    /// The on-demand price of a type in `region` (see [`Catalog::priced_region`]), if known.
    pub fn on_demand_price(&self, region: &str, name: &str) -> Option<f64> {
        self.on_demand_prices
            .get(self.priced_region(region))?
            .get(name)
            .copied()
    }

    /// Every type offered in `region` with a known price, as the scheduler sees it, with spot
    /// prices from `spot_price(type, zone, on_demand_price)`.
    pub fn instance_types(
        &self,
        region: &str,
        kubelet: &KubeletSettings,
        spot_price: &dyn Fn(&str, &str, f64) -> Option<f64>,
    ) -> Vec<InstanceType> {
        let Some(zones_by_type) = self.zones.get(region) else {
            return Vec::new();
        };
        self.types
            .iter()
            .filter_map(|info| {
                let zones = zones_by_type.get(&info.name)?;
                let od = self.on_demand_price(region, &info.name)?;
                let mut offerings = Vec::new();
                for zone in zones {
                    if info.on_demand {
                        offerings.push(Offering::new(
                            zone.clone(),
                            CapacityType::OnDemand,
                            od,
                            true,
                        ));
                    }
                    if info.spot
                        && let Some(price) = spot_price(&info.name, zone, od)
                    {
                        offerings.push(Offering::new(
                            zone.clone(),
                            CapacityType::Spot,
                            price,
                            true,
                        ));
                    }
                }
                if offerings.is_empty() {
                    return None;
                }
                Some(info.to_instance_type(region, kubelet, offerings))
            })
            .collect()
    }
}

/// The simulator's spot price assumption (see the module docs).
pub fn assumed_spot_price(instance_type: &str, zone: &str, on_demand: f64) -> Option<f64> {
    let hash = super::Fnv1a::default()
        .write(instance_type.as_bytes())
        .write(b"/")
        .write(zone.as_bytes())
        .finish();
    let discount = 0.55 + (hash % 2001) as f64 / 2000.0 * 0.20;
    Some((on_demand * (1.0 - discount) * 10_000.0).round() / 10_000.0)
}

fn family_parts(family: &str) -> Option<(String, String)> {
    let category: String = family
        .chars()
        .take_while(char::is_ascii_lowercase)
        .collect();
    let generation: String = family[category.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    (!category.is_empty() && !generation.is_empty()).then_some((category, generation))
}

impl InstanceTypeInfo {
    /// The well-known and `karpenter.k8s.aws/*` labels of this type.
    pub fn labels(&self, region: &str) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |k: &str, v: String| {
            out.insert(k.to_owned(), v);
        };
        let aws = |suffix: &str| format!("karpenter.k8s.aws/{suffix}");
        put(labels::INSTANCE_TYPE, self.name.clone());
        put(labels::ARCH, self.arch.to_owned());
        put(labels::OS, "linux".to_owned());
        put(labels::REGION, region.to_owned());
        let (family, size) = self.name.split_once('.').unwrap_or((&self.name, ""));
        put(&aws("instance-family"), family.to_owned());
        put(&aws("instance-size"), size.to_owned());
        if let Some((category, generation)) = family_parts(family) {
            put(&aws("instance-category"), category);
            put(&aws("instance-generation"), generation);
        }
        put(
            &aws("instance-capability-flex"),
            family.ends_with("-flex").to_string(),
        );
        put(&aws("instance-cpu"), self.vcpus.to_string());
        if !self.cpu_manufacturer.is_empty() {
            put(
                &aws("instance-cpu-manufacturer"),
                self.cpu_manufacturer.clone(),
            );
        }
        if let Some(mhz) = self.clock_mhz {
            put(
                &aws("instance-cpu-sustained-clock-speed-mhz"),
                mhz.to_string(),
            );
        }
        put(&aws("instance-memory"), self.memory_mib.to_string());
        if let Some(mbps) = self.ebs_mbps {
            put(&aws("instance-ebs-bandwidth"), mbps.to_string());
        }
        if let Some(mbps) = self.network_mbps {
            put(&aws("instance-network-bandwidth"), mbps.to_string());
        }
        if !self.hypervisor.is_empty() {
            put(&aws("instance-hypervisor"), self.hypervisor.clone());
        }
        if self.local_nvme_gb > 0 {
            put(&aws("instance-local-nvme"), self.local_nvme_gb.to_string());
        }
        if self.gpu_count > 0 {
            put(&aws("instance-gpu-name"), self.gpu_name.replace(' ', "-"));
            put(
                &aws("instance-gpu-manufacturer"),
                self.gpu_manufacturer.clone(),
            );
            put(&aws("instance-gpu-count"), self.gpu_count.to_string());
            put(&aws("instance-gpu-memory"), self.gpu_memory_mib.to_string());
        }
        if self.accelerator_count > 0 {
            put(
                &aws("instance-accelerator-name"),
                self.accelerator_name.replace(' ', "-"),
            );
            put(
                &aws("instance-accelerator-manufacturer"),
                self.accelerator_manufacturer.replace(' ', "-"),
            );
            put(
                &aws("instance-accelerator-count"),
                self.accelerator_count.to_string(),
            );
        }
        out
    }

    /// Capacity as upstream's AWS provider computes it.
    pub fn capacity(&self, kubelet: &KubeletSettings) -> Resources {
        // VM_MEMORY_OVERHEAD_PERCENT: the hypervisor keeps 7.5% of the advertised memory.
        let permille = kubelet.vm_memory_overhead_permille.unwrap_or(75);
        let memory_mib = self.memory_mib - (self.memory_mib * permille + 999) / 1000;
        let mut pods = kubelet
            .max_pods
            .unwrap_or_else(|| default_max_pods(self.max_enis, self.ipv4_per_eni));
        if let Some(per_core) = kubelet.pods_per_core.filter(|p| *p > 0) {
            pods = pods.min(per_core * self.vcpus);
        }
        let mut capacity = Resources::cpu_memory(self.vcpus * 1000, memory_mib << 20)
            .with(ResourceName::Pods, pods)
            .with(
                ResourceName::EphemeralStorage,
                kubelet
                    .root_volume_bytes
                    .unwrap_or(DEFAULT_ROOT_VOLUME_BYTES),
            );
        let device = match self.gpu_manufacturer.as_str() {
            "nvidia" => Some(ResourceName::NvidiaGpu),
            "amd" => Some(ResourceName::AmdGpu),
            "habana" => Some(ResourceName::Gaudi),
            _ => None,
        };
        if let Some(device) = device {
            capacity.set(device, self.gpu_count);
        }
        if self.accelerator_name.starts_with("inferentia")
            || self.accelerator_name.starts_with("trainium")
        {
            capacity.set(ResourceName::Neuron, self.accelerator_count);
        }
        if self.efa {
            capacity.set(ResourceName::Efa, 1);
        }
        if self.branch_enis > 0 {
            capacity.set(ResourceName::PodEni, self.branch_enis);
        }
        capacity
    }

    /// The scheduler's view of this type with the given offerings.
    pub fn to_instance_type(
        &self,
        region: &str,
        kubelet: &KubeletSettings,
        offerings: Vec<Offering>,
    ) -> InstanceType {
        let capacity = self.capacity(kubelet);
        let mut labels = self.labels(region);
        if self.bare_metal {
            labels.insert("karpenter.k8s.aws/instance-size".into(), "metal".into());
        }
        InstanceType::new(
            self.name.clone(),
            labels,
            capacity,
            overhead(&capacity, kubelet),
            offerings,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn catalog() -> Catalog {
        Catalog::embedded().expect("embedded catalog parses")
    }

    #[test]
    fn embedded_tables_have_the_expected_shape() {
        let c = catalog();
        assert!(c.infos().len() > 1200, "{} types", c.infos().len());
        assert_eq!(c.regions().len(), 30, "{:?}", c.regions());
        assert!(c.priced_regions().len() >= 30, "{:?}", c.priced_regions());
        assert!(c.zones("us-east-1").contains(&"us-east-1a".to_owned()));
        assert_eq!(
            c.zones("eu-west-1"),
            ["eu-west-1a", "eu-west-1b", "eu-west-1c"]
        );
        assert_eq!(c.on_demand_price("us-east-1", "m5.large"), Some(0.096));
        // A region the table does not hold is priced as us-east-1, as upstream's fallback is.
        assert_eq!(c.on_demand_price("us-gov-west-1", "m5.large"), Some(0.096));
        let types = c.instance_types(
            "us-east-1",
            &KubeletSettings::default(),
            &assumed_spot_price,
        );
        assert!(
            types.len() > 700,
            "{} priced types in us-east-1",
            types.len()
        );
    }

    #[test]
    fn regions_are_priced_at_their_own_list_prices_not_uniformly_per_family() {
        let c = catalog();
        // AWS's published Linux on-demand prices (USD/hour) in eu-west-1 and sa-east-1.
        for (region, name, price) in [
            ("eu-west-1", "m5.large", 0.107),
            ("eu-west-1", "c5.large", 0.096),
            ("eu-west-1", "r5.large", 0.141),
            ("sa-east-1", "m5.large", 0.153),
            ("us-west-2", "m5.large", 0.096),
        ] {
            assert_eq!(
                c.on_demand_price(region, name),
                Some(price),
                "{region} {name}"
            );
        }
        let ratio = |name: &str| {
            c.on_demand_price("eu-west-1", name).unwrap()
                / c.on_demand_price("us-east-1", name).unwrap()
        };
        assert!((ratio("m5.large") - ratio("c6i.large")).abs() > 0.02);
        let types = c.instance_types("eu-west-1", &KubeletSettings::default(), &|_, _, _| None);
        let m5 = types
            .iter()
            .find(|t| t.name == "m5.large")
            .expect("m5.large");
        assert!(m5.offerings.iter().all(|o| o.price == 0.107));
        assert!(m5.offerings.iter().all(|o| o.zone.starts_with("eu-west-1")));
    }

    #[test]
    fn m5_large_matches_upstreams_numbers() {
        let c = catalog();
        let info = c
            .infos()
            .iter()
            .find(|i| i.name == "m5.large")
            .expect("m5.large");
        let it = info.to_instance_type("us-east-1", &KubeletSettings::default(), Vec::new());
        assert_eq!(it.capacity.get(ResourceName::Cpu), 2000);
        assert_eq!(it.capacity.get(ResourceName::Pods), 29);
        assert_eq!(it.capacity.get(ResourceName::Memory), (8192 - 615) << 20);
        // kube-reserved: 70m CPU, 11Mi × 29 + 255Mi memory; eviction 100Mi.
        assert_eq!(it.overhead.get(ResourceName::Cpu), 70);
        assert_eq!(
            it.overhead.get(ResourceName::Memory),
            (11 * 29 + 255 + 100) << 20
        );
        assert_eq!(it.labels["karpenter.k8s.aws/instance-category"], "m");
        assert_eq!(it.labels["karpenter.k8s.aws/instance-generation"], "5");
        assert_eq!(it.labels[labels::ARCH], "amd64");
        assert!(!it.is_exotic());
    }

    #[test]
    fn gpu_types_carry_devices_and_are_exotic() {
        let c = catalog();
        let info = c
            .infos()
            .iter()
            .find(|i| i.name == "g4dn.xlarge")
            .expect("g4dn.xlarge");
        let it = info.to_instance_type("us-east-1", &KubeletSettings::default(), Vec::new());
        assert_eq!(it.capacity.get(ResourceName::NvidiaGpu), 1);
        assert_eq!(
            it.labels["karpenter.k8s.aws/instance-gpu-manufacturer"],
            "nvidia"
        );
        assert!(it.is_exotic());
    }

    #[test]
    fn spot_assumption_is_stable_and_within_bounds() {
        let a = assumed_spot_price("m5.large", "us-east-1a", 0.096).unwrap();
        assert_eq!(Some(a), assumed_spot_price("m5.large", "us-east-1a", 0.096));
        assert!((0.096 * 0.25..=0.096 * 0.45).contains(&a), "{a}");
        assert_ne!(Some(a), assumed_spot_price("m5.large", "us-east-1b", 0.096));
    }
}
