//! [`AwsCloud`]: the actors' `CloudProvider` on EC2.
//!
//! - Node classes are resolved (subnets, security groups, AMIs, instance profile) when first
//!   used and again once the resolution is older than the refresh interval.
//! - The instance-type catalog comes from DescribeInstanceTypes and
//!   DescribeInstanceTypeOfferings, spot prices from DescribeSpotPriceHistory (on-demand until
//!   known); both refresh every 12 hours. On-demand prices start as the embedded table's for
//!   the region (the simulator's too) and are replaced by the Pricing API's answer
//!   ([`crate::pricing`]) by a task of their own ([`AwsCloud::start_pricing`]: at start, then
//!   every 12 hours, 5 minutes after a failure), so no launch or listing ever waits for that
//!   API; an answer is laid over the prices in use and a failed refresh keeps them, as
//!   upstream's does. GovCloud and
//!   `--isolated-vpc` keep the table's.
//! - A launch is an instant CreateFleet with price-ordered overrides. Launches of
//!   NodeClaims whose requests are identical (same overrides, templates and pool tags)
//!   within a 35 ms window (1 s at most) share one call of their count, as upstream batches
//!   them; each instance then gets its NodeClaim's tag (an instance that cannot be tagged is
//!   terminated rather than left unfindable). A lone launch uses its NodeClaim's client
//!   token, a shared one a token derived from all of theirs. Before launching, instances
//!   already tagged with the NodeClaim are looked up, so a launch replayed after a crash
//!   adopts the instance instead of creating a second one.
//! - DescribeInstances (get) and TerminateInstances (delete) calls from many NodeClaims are
//!   batched too (100 ms idle, 1 s at most).
//! - With the `ReservedCapacity` gate, the capacity reservations a node class selects are
//!   resolved with it and offered as reserved offerings (`priced`); a reserved launch
//!   targets its reservation from a launch template of its own (`launching`), and what was
//!   launched into a reservation or refused by it counts until it is described again
//!   (`reserved`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::catalog::{Catalog, InstanceTypeInfo};
use karpenter_core::model::reservation::reserved_price;
use karpenter_core::model::{CapacityType, InstanceType};
use karpenter_core::ports::{
    BoxFuture, CloudError, CloudProvider, Drift, DriftCheck, Instance, LaunchRequest,
    NodeClassHash, OfferingKey,
};
use tokio::time::Instant;
use tracing::{info, warn};

mod fleet;
mod launching;
mod priced;
mod reserved;

use crate::batcher::{Batcher, Window};
use crate::bootstrap::ClusterInfo;
use crate::ec2::{Ec2, InstanceInfo};
use crate::error::AwsError;
use crate::launch::LaunchTemplateSpec;
use crate::nodeclass::{ResolvedNodeClass, Resolver};
use fleet::{FleetAnswer, FleetMember, create_fleets};

use crate::reservations::ReservationUse;
use crate::selection::UnavailableOfferings;

/// Tag keys upstream puts on everything it launches.
pub mod tags {
    /// NodePool.
    pub const NODEPOOL: &str = "karpenter.sh/nodepool";
    /// NodeClaim.
    pub const NODECLAIM: &str = "karpenter.sh/nodeclaim";
    /// EC2NodeClass.
    pub const NODECLASS: &str = "karpenter.k8s.aws/ec2nodeclass";
    /// EKS cluster name.
    pub const EKS_CLUSTER: &str = "eks:eks-cluster-name";
    /// Launch templates of this controller (value: cluster name).
    pub const CLUSTER: &str = "karpenter.k8s.aws/cluster";
}

/// Provider settings (flags `--cluster-name`, `--cluster-endpoint`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct AwsSettings {
    /// Cluster the nodes join.
    pub cluster: ClusterInfo,
    /// Region (for labels).
    pub region: String,
    /// `--vm-memory-overhead-percent` in tenths of a percent.
    pub vm_memory_overhead_permille: i64,
    /// How often node classes are re-resolved (`--ami-refresh-interval`, 1 min).
    pub nodeclass_refresh: Duration,
    /// How often the catalog and prices are refreshed (12 h).
    pub catalog_refresh: Duration,
    /// Where AMI aliases are looked up, and for the version the cluster had at the start
    /// ([`AwsCloud::set_kubernetes_version`] follows an upgrade).
    pub ami_lookup: crate::nodeclass::AmiLookup,
    /// The `ReservedCapacity` gate (on, as upstream's): node classes' capacity reservations
    /// are resolved, offered and launched into.
    pub reserved_capacity: bool,
}

struct CatalogCache {
    infos: Vec<InstanceTypeInfo>,
    zones: BTreeMap<String, std::collections::BTreeSet<String>>,
    spot: HashMap<(String, String), f64>,
    fetched: Instant,
}

/// Where the on-demand prices in use came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PriceSource {
    /// The Pricing API's answer for the region.
    PricingApi,
    /// The embedded table's prices for this region.
    Table,
    /// The embedded table's us-east-1 prices: it holds none for this region.
    TableOfUsEast1,
}

impl std::fmt::Display for PriceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PriceSource::PricingApi => "the Pricing API",
            PriceSource::Table => "the embedded price table",
            PriceSource::TableOfUsEast1 => "the embedded price table's us-east-1 prices",
        })
    }
}

/// The embedded table's prices for `region`.
fn table_prices(table: &Catalog, region: &str) -> OnDemandPrices {
    let source = if table.priced_region(region) == region {
        PriceSource::Table
    } else {
        PriceSource::TableOfUsEast1
    };
    let prices = table
        .infos()
        .iter()
        .filter_map(|i| Some((i.name.clone(), table.on_demand_price(region, &i.name)?)))
        .collect();
    OnDemandPrices { prices, source }
}

/// On-demand USD/hour by instance type, and where they came from.
#[derive(Debug, Clone, PartialEq)]
pub struct OnDemandPrices {
    /// Instance type → price.
    pub prices: HashMap<String, f64>,
    /// Their source.
    pub source: PriceSource,
}

impl OnDemandPrices {
    /// The price of `instance_type`; 0 when it has none.
    fn price(&self, instance_type: &str) -> f64 {
        self.prices.get(instance_type).copied().unwrap_or(0.0)
    }
}

struct PricedEntry {
    catalog: Arc<CatalogCache>,
    on_demand: Arc<OnDemandPrices>,
    resolved: Arc<ResolvedNodeClass>,
    unavailable_generation: u64,
    reservation_generation: u64,
    types: Arc<Vec<Arc<InstanceType>>>,
}

struct ResolvedEntry {
    resolved: Arc<ResolvedNodeClass>,
    at: Instant,
}

/// EC2 as a `CloudProvider`.
pub struct AwsCloud {
    ec2: Ec2,
    resolver: Resolver,
    settings: AwsSettings,
    static_prices: Catalog,
    pricing: Option<crate::pricing::PricingApi>,
    on_demand: RwLock<Arc<OnDemandPrices>>,
    node_classes: RwLock<BTreeMap<String, EC2NodeClass>>,
    resolved: Mutex<HashMap<String, ResolvedEntry>>,
    catalog: tokio::sync::Mutex<Option<Arc<CatalogCache>>>,
    unavailable: Mutex<UnavailableOfferings>,
    reservation_use: Mutex<ReservationUse>,
    priced: Mutex<HashMap<String, PricedEntry>>,
    templates: tokio::sync::Mutex<BTreeMap<String, Instant>>,
    describe: Batcher<String, Result<Option<InstanceInfo>, AwsError>>,
    terminate: Batcher<String, Result<(), AwsError>>,
    fleets: Batcher<FleetMember, Result<FleetAnswer, AwsError>>,
    adopt: Batcher<String, Result<Option<InstanceInfo>, AwsError>>,
}

impl std::fmt::Debug for AwsCloud {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsCloud")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Upstream's window for DescribeInstances and TerminateInstances batches.
const INSTANCE_CALLS: Window = Window {
    idle: Duration::from_millis(100),
    max: Duration::from_secs(1),
    max_items: 500,
};

/// The distinct ids of a batch (several NodeClaims may ask about the same instance).
fn unique(ids: &[String]) -> Vec<String> {
    let mut out = ids.to_vec();
    out.sort();
    out.dedup();
    out
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl AwsCloud {
    /// A provider over the given clients. Must be called inside a tokio runtime (the
    /// batchers start tasks).
    pub fn new(
        ec2: aws_sdk_ec2::Client,
        ssm: aws_sdk_ssm::Client,
        iam: aws_sdk_iam::Client,
        settings: AwsSettings,
    ) -> Result<Self, CloudError> {
        let ec2 = Ec2::new(ec2);
        let static_prices = Catalog::embedded()
            .map_err(|e| CloudError::Other(format!("embedded price table: {e}")))?;
        let on_demand = RwLock::new(Arc::new(table_prices(&static_prices, &settings.region)));
        let describe_ec2 = ec2.clone();
        let describe = Batcher::new(INSTANCE_CALLS, move |ids: Vec<String>| {
            let ec2 = describe_ec2.clone();
            async move {
                match ec2.instances_by_id(&unique(&ids)).await {
                    Ok(found) => ids
                        .iter()
                        .map(|id| Ok(found.iter().find(|i| &i.id == id).cloned()))
                        .collect(),
                    Err(e) => ids.iter().map(|_| Err(e.clone())).collect(),
                }
            }
        });
        let terminate_ec2 = ec2.clone();
        let terminate = Batcher::new(INSTANCE_CALLS, move |ids: Vec<String>| {
            let ec2 = terminate_ec2.clone();
            async move {
                let result = ec2.terminate(&unique(&ids)).await;
                ids.iter().map(|_| result.clone()).collect()
            }
        });
        let adopt_ec2 = ec2.clone();
        let cluster_tag = format!("kubernetes.io/cluster/{}", settings.cluster.name);
        let adopt = Batcher::new(
            Window {
                idle: Duration::from_millis(35),
                max: Duration::from_secs(1),
                max_items: 200,
            },
            move |nodeclaims: Vec<String>| {
                let ec2 = adopt_ec2.clone();
                let cluster_tag = cluster_tag.clone();
                async move {
                    match ec2.running_instances_of(&cluster_tag, &nodeclaims).await {
                        Ok(found) => nodeclaims
                            .iter()
                            .map(|n| {
                                Ok(found
                                    .iter()
                                    .find(|i| i.tags.get(tags::NODECLAIM) == Some(n))
                                    .cloned())
                            })
                            .collect(),
                        Err(e) => nodeclaims.iter().map(|_| Err(e.clone())).collect(),
                    }
                }
            },
        );
        let fleet_ec2 = ec2.clone();
        // Upstream's CreateFleet window: 35 ms idle, 1 s at most, 1,000 requests.
        let fleets = Batcher::new(
            Window {
                idle: Duration::from_millis(35),
                max: Duration::from_secs(1),
                max_items: 1000,
            },
            move |members: Vec<FleetMember>| create_fleets(fleet_ec2.clone(), members),
        );
        Ok(AwsCloud {
            adopt,
            fleets,
            resolver: Resolver {
                ec2: ec2.clone(),
                ssm,
                lookup: Arc::new(RwLock::new(settings.ami_lookup.clone())),
                profiles: Arc::new(crate::iam::InstanceProfiles::new(
                    iam,
                    &settings.cluster.name,
                    &settings.region,
                )),
                reserved_capacity: settings.reserved_capacity,
            },
            ec2,
            settings,
            static_prices,
            pricing: None,
            on_demand,
            node_classes: RwLock::new(BTreeMap::new()),
            resolved: Mutex::new(HashMap::new()),
            catalog: tokio::sync::Mutex::new(None),
            unavailable: Mutex::new(UnavailableOfferings::default()),
            reservation_use: Mutex::new(ReservationUse::default()),
            priced: Mutex::new(HashMap::new()),
            templates: tokio::sync::Mutex::new(BTreeMap::new()),
            describe,
            terminate,
        })
    }

    /// Prices on-demand offerings from the Pricing API (without it, from the embedded table
    /// only, as with `--isolated-vpc`).
    pub fn with_pricing(mut self, pricing: crate::pricing::PricingApi) -> Self {
        self.pricing = Some(pricing);
        self
    }

    /// The on-demand prices in use.
    fn on_demand(&self) -> Arc<OnDemandPrices> {
        match self.on_demand.read() {
            Ok(prices) => prices.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Where the on-demand prices in use come from.
    pub fn price_source(&self) -> PriceSource {
        self.on_demand().source
    }

    /// Asks the Pricing API for the region's on-demand prices and uses them; on failure the
    /// prices in use stay (the error is returned). Without the API (GovCloud,
    /// `--isolated-vpc`) there is nothing to do.
    pub async fn refresh_on_demand_prices(&self) -> Result<PriceSource, CloudError> {
        let Some(api) = &self.pricing else {
            return Ok(self.price_source());
        };
        let answer = api.on_demand_prices().await?;
        info!(types = answer.len(), region = %self.settings.region, "On-demand prices loaded from the Pricing API.");
        // As upstream, the answer is laid over the prices in use: a type it leaves out keeps
        // the price it had.
        let mut prices = self.on_demand().prices.clone();
        prices.extend(answer);
        let fresh = Arc::new(OnDemandPrices {
            prices,
            source: PriceSource::PricingApi,
        });
        match self.on_demand.write() {
            Ok(mut current) => *current = fresh,
            Err(poisoned) => *poisoned.into_inner() = fresh,
        }
        Ok(PriceSource::PricingApi)
    }

    /// Starts the on-demand price refresh: at once, then every catalog refresh interval
    /// (12 hours), 5 minutes after a failure. Stops when the provider is dropped.
    pub fn start_pricing(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let every = self.settings.catalog_refresh.max(Duration::from_secs(60));
        tokio::spawn(async move {
            loop {
                let Some(cloud) = weak.upgrade() else { return };
                let wait = match cloud.refresh_on_demand_prices().await {
                    Ok(_) => every,
                    Err(error) => {
                        warn!(%error, source = %cloud.price_source(), "On-demand prices unavailable from the Pricing API; keeping those in use.");
                        every.min(Duration::from_secs(300))
                    }
                };
                drop(cloud);
                tokio::time::sleep(wait).await;
            }
        })
    }

    /// Adds or replaces a node class (its resolution is redone on next use).
    pub fn set_node_class(&self, node_class: EC2NodeClass) {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        if let Ok(mut resolved) = self.resolved.lock() {
            resolved.remove(&name);
        }
        if let Ok(mut classes) = self.node_classes.write() {
            classes.insert(name, node_class);
        }
    }

    /// Forgets a deleted node class: NodeClaims can no longer launch with it.
    pub fn remove_node_class(&self, name: &str) {
        if let Ok(mut resolved) = self.resolved.lock() {
            resolved.remove(name);
        }
        if let Ok(mut classes) = self.node_classes.write() {
            classes.remove(name);
        }
    }

    /// The node classes known, by name.
    pub fn node_class_names(&self) -> Vec<String> {
        self.node_classes
            .read()
            .map(|c| c.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The Kubernetes minor version AMI aliases resolve for now.
    pub fn kubernetes_version(&self) -> String {
        match self.resolver.lookup.read() {
            Ok(lookup) => lookup.kubernetes_version.clone(),
            Err(poisoned) => poisoned.into_inner().kubernetes_version.clone(),
        }
    }

    /// Follows the control plane to `version` (a minor version, `1.32`): when it changed, every
    /// node class is resolved again at its next use, so `al2023@latest` names that version's
    /// images and nodes on the old ones drift (`AMIDrift`), as upstream's do after an upgrade.
    /// True when the version changed.
    pub fn set_kubernetes_version(&self, version: &str) -> bool {
        let before = {
            let mut lookup = match self.resolver.lookup.write() {
                Ok(lookup) => lookup,
                Err(poisoned) => poisoned.into_inner(),
            };
            if lookup.kubernetes_version == version {
                return false;
            }
            std::mem::replace(&mut lookup.kubernetes_version, version.to_owned())
        };
        if let Ok(mut resolved) = self.resolved.lock() {
            resolved.clear();
        }
        info!(from = %before, to = %version, "Kubernetes version changed; resolving EC2NodeClasses for it.");
        true
    }

    /// The current resolution of a node class (resolving it if stale).
    pub async fn resolve(&self, name: &str) -> Result<Arc<ResolvedNodeClass>, CloudError> {
        if let Ok(resolved) = self.resolved.lock()
            && let Some(entry) = resolved.get(name)
            && entry.at.elapsed() < self.settings.nodeclass_refresh
        {
            return Ok(entry.resolved.clone());
        }
        let node_class = self.node_class(name)?;
        let resolved = Arc::new(self.resolver.resolve(&node_class, now_ms()).await);
        match resolved.ready() {
            Ok(()) => {
                info!(nodeclass = %name, subnets = resolved.subnets.len(), amis = resolved.amis.len(), "EC2NodeClass resolved.")
            }
            Err(problem) => warn!(nodeclass = %name, %problem, "EC2NodeClass is not ready."),
        }
        if let Ok(mut usage) = self.reservation_use.lock() {
            usage.described(resolved.capacity_reservations.iter().map(|r| r.id.clone()));
        }
        if let Ok(mut cache) = self.resolved.lock() {
            cache.insert(
                name.to_owned(),
                ResolvedEntry {
                    resolved: resolved.clone(),
                    at: Instant::now(),
                },
            );
        }
        Ok(resolved)
    }

    async fn catalog(&self) -> Result<Arc<CatalogCache>, CloudError> {
        let mut guard = self.catalog.lock().await;
        if let Some(cache) = guard.as_ref()
            && cache.fetched.elapsed() < self.settings.catalog_refresh
        {
            return Ok(cache.clone());
        }
        let mut infos = self.ec2.instance_types().await?;
        // Pod-ENI (trunking) limits are not in DescribeInstanceTypes; take them from the
        // static table.
        for info in &mut infos {
            if let Some(known) = self
                .static_prices
                .infos()
                .iter()
                .find(|k| k.name == info.name)
            {
                info.branch_enis = known.branch_enis;
            }
        }
        let zones = self.ec2.offerings().await?;
        let spot = match self.ec2.spot_prices().await {
            Ok(prices) => prices,
            Err(error) => {
                warn!(%error, "Spot prices unavailable; spot offerings are priced as on-demand until they load.");
                HashMap::new()
            }
        };
        info!(
            types = infos.len(),
            spot_prices = spot.len(),
            "Instance-type catalog loaded."
        );
        let cache = Arc::new(CatalogCache {
            infos,
            zones,
            spot,
            fetched: Instant::now(),
        });
        *guard = Some(cache.clone());
        Ok(cache)
    }

    fn node_class(&self, name: &str) -> Result<EC2NodeClass, CloudError> {
        self.node_classes
            .read()
            .ok()
            .and_then(|c| c.get(name).cloned())
            .ok_or_else(|| CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("EC2NodeClass {name:?} does not exist"),
            })
    }

    /// The node class to launch with or list instance types for: one being deleted counts
    /// as gone, as upstream treats a terminating class for NodeClaim actions.
    fn usable_node_class(&self, name: &str) -> Result<EC2NodeClass, CloudError> {
        let class = self.node_class(name)?;
        if class.metadata.deletion_timestamp.is_some() {
            return Err(CloudError::NodeClassNotReady {
                name: name.to_owned(),
                reason: format!("EC2NodeClass {name:?} is being deleted"),
            });
        }
        Ok(class)
    }

    /// The tags every instance of a NodePool gets at launch (and its launch templates carry):
    /// per-NodeClaim tags are added to each instance right after, so NodeClaims of one pool
    /// share templates and CreateFleet calls.
    fn pool_tags(
        &self,
        request: &LaunchRequest,
        node_class: &EC2NodeClass,
    ) -> BTreeMap<String, String> {
        let cluster = &self.settings.cluster.name;
        let mut out = node_class.spec.tags.clone();
        out.insert(tags::NODEPOOL.into(), request.nodepool.clone());
        out.insert(tags::NODECLASS.into(), request.node_class.clone());
        out.insert(format!("kubernetes.io/cluster/{cluster}"), "owned".into());
        out.insert(tags::EKS_CLUSTER.into(), cluster.clone());
        out
    }

    /// An instance EC2 describes, in the reservation it runs in (if rounds count it as
    /// reserved) and priced as its capacity type is.
    async fn to_instance(&self, info: &InstanceInfo) -> Instance {
        let reservation = self.reservation_of(info);
        let capacity_type = if reservation.is_some() {
            CapacityType::Reserved
        } else {
            info.capacity_type
        };
        let price = match self.catalog().await {
            Ok(catalog) => self.price(&catalog, &info.instance_type, &info.zone, capacity_type),
            Err(_) if capacity_type == CapacityType::Reserved => {
                reserved_price(self.on_demand().price(&info.instance_type))
            }
            Err(_) => self.on_demand().price(&info.instance_type),
        };
        Instance {
            provider_id: format!("aws:///{}/{}", info.zone, info.id),
            id: info.id.clone(),
            instance_type: info.instance_type.clone(),
            zone: info.zone.clone(),
            capacity_type,
            price,
            image_id: info.image_id.clone(),
            nodeclaim: info.tags.get(tags::NODECLAIM).cloned().unwrap_or_default(),
            nodepool: info.tags.get(tags::NODEPOOL).cloned().unwrap_or_default(),
            state: info.state,
            launched_at_ms: info.launched_at_ms,
            price_source: None,
            reservation,
        }
    }

    /// Where the price of an instance of `instance_type` in `zone` comes from, as
    /// explanations name it.
    async fn price_source_of(
        &self,
        instance_type: &str,
        zone: &str,
        capacity_type: CapacityType,
    ) -> String {
        let on_demand = self.price_source();
        if capacity_type != CapacityType::Spot {
            return format!("on-demand price from {on_demand}");
        }
        let known = self.catalog().await.is_ok_and(|c| {
            c.spot
                .contains_key(&(instance_type.to_owned(), zone.to_owned()))
        });
        if known {
            "spot price from DescribeSpotPriceHistory".to_owned()
        } else {
            format!("no spot price known yet: the on-demand price from {on_demand}")
        }
    }

    async fn ensure_templates(
        &self,
        specs: Vec<LaunchTemplateSpec>,
    ) -> Result<BTreeMap<String, String>, AwsError> {
        let mut known = self.templates.lock().await;
        let mut by_key = BTreeMap::new();
        for spec in specs {
            let name = spec.name();
            if !known.contains_key(&name) {
                let mut lt_tags = BTreeMap::new();
                lt_tags.insert(tags::CLUSTER.to_owned(), self.settings.cluster.name.clone());
                lt_tags.insert(
                    tags::EKS_CLUSTER.to_owned(),
                    self.settings.cluster.name.clone(),
                );
                // The IAM policy in deploy/aws scopes deletion to resources tagged like this.
                lt_tags.insert(
                    format!("kubernetes.io/cluster/{}", self.settings.cluster.name),
                    "owned".to_owned(),
                );
                self.ec2
                    .create_launch_template(&name, spec.to_request(), &lt_tags)
                    .await?;
                info!(launch_template = %name, image = %spec.image_id, "Launch template created.");
            }
            known.insert(name.clone(), Instant::now());
            by_key.insert(spec.template_key(), name);
        }
        Ok(by_key)
    }

    /// Starts the periodic upkeep: every `every`, launch templates idle for longer than
    /// `idle` are deleted and expired insufficient-capacity entries dropped. Stops when the
    /// provider is dropped.
    pub fn start_upkeep(
        self: &Arc<Self>,
        every: Duration,
        idle: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(cloud) = weak.upgrade() else { return };
                if let Ok(mut unavailable) = cloud.unavailable.lock() {
                    unavailable.expire(Instant::now());
                }
                match cloud.collect_launch_templates(idle).await {
                    Ok(deleted) if !deleted.is_empty() => {
                        info!(launch_templates = ?deleted, "Deleted idle launch templates.");
                    }
                    Ok(_) => {}
                    Err(error) => {
                        warn!(%error, "Launch template garbage collection failed; retrying next time.")
                    }
                }
            }
        })
    }

    async fn create_fleet(&self, member: FleetMember) -> Result<FleetAnswer, AwsError> {
        self.fleets.call(member).await.unwrap_or_else(|| {
            Err(AwsError::new(
                "CreateFleet",
                "BatcherStopped",
                "the CreateFleet batcher stopped",
            ))
        })
    }

    /// Deletes the launch templates this process created or used; returns their names.
    pub async fn delete_own_launch_templates(&self) -> Result<Vec<String>, CloudError> {
        let mut known = self.templates.lock().await;
        let names: Vec<String> = known.keys().cloned().collect();
        for name in &names {
            self.ec2.delete_launch_template(name).await?;
        }
        known.clear();
        Ok(names)
    }

    /// Deletes this cluster's launch templates unused for `idle` (and not in use by a launch
    /// in flight); returns the names deleted.
    pub async fn collect_launch_templates(
        &self,
        idle: Duration,
    ) -> Result<Vec<String>, CloudError> {
        let existing = self
            .ec2
            .launch_templates(tags::CLUSTER, &self.settings.cluster.name)
            .await?;
        let mut known = self.templates.lock().await;
        let mut deleted = Vec::new();
        for name in existing {
            match known.get(&name) {
                Some(used) if used.elapsed() < idle => {}
                Some(_) => {
                    self.ec2.delete_launch_template(&name).await?;
                    known.remove(&name);
                    deleted.push(name);
                }
                // Made by an earlier process: start its idle clock now.
                None => {
                    known.insert(name, Instant::now());
                }
            }
        }
        Ok(deleted)
    }
}

impl CloudProvider for AwsCloud {
    fn now_ms(&self) -> i64 {
        now_ms()
    }

    fn create<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(self.launch(request))
    }

    fn delete<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            match self.terminate.call(instance_id.to_owned()).await {
                Some(result) => result.map_err(CloudError::from),
                None => Err(CloudError::Other("terminate batcher stopped".into())),
            }
        })
    }

    fn get<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            match self.describe.call(instance_id.to_owned()).await {
                Some(Ok(Some(info))) => Ok(self.to_instance(&info).await),
                Some(Ok(None)) => Err(CloudError::NotFound {
                    id: instance_id.to_owned(),
                }),
                Some(Err(e)) => Err(e.into()),
                None => Err(CloudError::Other("describe batcher stopped".into())),
            }
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>> {
        Box::pin(async move {
            let mut filter = BTreeMap::new();
            filter.insert(
                format!("kubernetes.io/cluster/{}", self.settings.cluster.name),
                "owned".to_owned(),
            );
            filter.insert(tags::NODEPOOL.to_owned(), "*".to_owned());
            let infos = self.ec2.instances_tagged(&filter).await?;
            let mut out = Vec::with_capacity(infos.len());
            for info in &infos {
                out.push(self.to_instance(info).await);
            }
            Ok(out)
        })
    }

    fn instance_types<'a>(
        &'a self,
        node_class: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>> {
        Box::pin(async move {
            let spec = self.usable_node_class(node_class)?;
            let resolved = self.resolve(node_class).await?;
            resolved
                .ready()
                .map_err(|not_ready| CloudError::NodeClassNotReady {
                    name: node_class.to_owned(),
                    reason: not_ready.to_string(),
                })?;
            Ok(self.priced_types(&resolved, &spec).await?.as_ref().clone())
        })
    }

    fn node_class_hash(&self, node_class: &str) -> Option<NodeClassHash> {
        self.node_class(node_class)
            .ok()
            .map(|class| NodeClassHash::of(&class.spec))
    }

    fn drift<'a>(
        &'a self,
        check: &'a DriftCheck,
    ) -> BoxFuture<'a, Result<Option<Drift>, CloudError>> {
        Box::pin(async move {
            // A class that is gone or cannot be resolved drifts nothing: no guesses.
            let Ok(class) = self.node_class(&check.node_class) else {
                return Ok(None);
            };
            let resolved = self.resolve(&check.node_class).await?;
            if resolved.ready().is_err() {
                return Ok(None);
            }
            let info = match self.describe.call(check.instance.id.clone()).await {
                Some(Ok(Some(info))) => info,
                Some(Ok(None)) => return Ok(None),
                Some(Err(e)) => return Err(e.into()),
                None => return Err(CloudError::Other("describe batcher stopped".into())),
            };
            let types = self.priced_types(&resolved, &class).await?;
            let type_labels = types
                .iter()
                .find(|t| t.name == info.instance_type)
                .map(|t| t.labels.clone())
                .unwrap_or_default();
            Ok(crate::drift::judge(
                &check.node_class,
                check.node_class_hash.as_ref(),
                &NodeClassHash::of(&class.spec),
                &crate::drift::InstanceFacts {
                    image_id: &info.image_id,
                    subnet_id: info.subnet_id.as_deref(),
                    security_groups: &info.security_groups,
                    type_labels: &type_labels,
                    reservation: check
                        .instance
                        .reservation
                        .as_ref()
                        .filter(|_| self.settings.reserved_capacity)
                        .map(|r| r.id.as_str()),
                },
                &resolved,
            ))
        })
    }

    fn provider_name(&self) -> &'static str {
        "aws"
    }

    fn expiring_block_instances(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, CloudError>> {
        Box::pin(async move {
            if !self.settings.reserved_capacity {
                return Ok(None);
            }
            self.instances_in_expiring_blocks().await.map(Some)
        })
    }

    fn mark_unavailable(&self, offering: &OfferingKey) {
        // A reserved offering that failed was marked by its reservation's id at the failure
        // (until the reservation is described again), not for the 3 minutes of an
        // insufficient-capacity entry: another reservation of the type may still have room.
        if offering.capacity_type == CapacityType::Reserved {
            return;
        }
        if let Ok(mut unavailable) = self.unavailable.lock() {
            unavailable.mark(offering.clone(), Instant::now());
        }
    }
}
