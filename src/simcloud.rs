//! An in-memory EC2, the cloud of `simulate` and of `controller --cloud sim`: launches
//! instances from the embedded catalog, idempotently by client token, with injectable
//! insufficient-capacity errors and the 3-minute unavailable-offerings cache upstream keeps.
//! Time is tokio's, so it follows the simulator's virtual clock.
//!
//! An EC2NodeClass is modelled only by its static hash and the image its nodes boot
//! (`amiRelease` steps release a new one), and whether it is there: a class the cloud was
//! not told of, or one being deleted, is not Ready (`NodeClassNotReady` for its instance
//! types and launches, as EC2 answers), so its NodePools are left out of rounds under every
//! cloud alike. There are no subnets or security groups, so
//! `SubnetDrift` and `SecurityGroupDrift` are judged only by the AWS provider (unit-tested
//! in `aws/src/drift.rs` and against moto). Scenarios with `amiRelease` run on this cloud
//! only.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::{CapacityType, InstanceType, Offering, Reservation, ReservedCapacity};
use karpenter_core::ports::{
    BoxFuture, CloudError, CloudProvider, Drift, DriftCheck, Instance, InstanceState,
    LaunchRequest, NodeClassHash, OfferingKey,
};
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

/// How long an offering stays unavailable after a capacity error (upstream: 3 minutes).
pub const UNAVAILABLE_OFFERING_TTL: Duration = Duration::from_secs(180);

/// An injected capacity shortage: launches of matching offerings fail between `from` and
/// `until` (simulated time since the start).
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityShortage {
    /// Instance type, or `None` for every type.
    pub instance_type: Option<String>,
    /// Zone, or `None` for every zone.
    pub zone: Option<String>,
    /// Capacity type, or `None` for both.
    pub capacity_type: Option<karpenter_core::model::CapacityType>,
    /// Start, since the simulation began.
    pub from: Duration,
    /// End, since the simulation began.
    pub until: Duration,
}

impl CapacityShortage {
    fn matches(&self, key: &OfferingKey, elapsed: Duration) -> bool {
        elapsed >= self.from
            && elapsed < self.until
            && self
                .instance_type
                .as_deref()
                .is_none_or(|t| t == key.instance_type)
            && self.zone.as_deref().is_none_or(|z| z == key.zone)
            && self.capacity_type.is_none_or(|c| c == key.capacity_type)
    }
}

/// A capacity reservation the simulated cloud holds for the cluster: `count` instances of
/// one type in one zone.
#[derive(Debug, Clone, PartialEq)]
pub struct SimReservation {
    /// Its id and kind.
    pub reservation: Reservation,
    /// Instance type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Instances it holds.
    pub count: u32,
    /// When a Capacity Block ends, since the cloud was made.
    pub ends_after: Option<Duration>,
}

/// [`karpenter_core::model::reservation::CAPACITY_BLOCK_EXPIRING_SECS`] as a duration.
pub const CAPACITY_BLOCK_EXPIRING: Duration =
    Duration::from_secs(karpenter_core::model::reservation::CAPACITY_BLOCK_EXPIRING_SECS);

impl SimReservation {
    /// When it starts expiring (since the cloud was made), if it ends.
    pub fn expiring_after(&self) -> Option<Duration> {
        self.ends_after
            .map(|end| end.saturating_sub(CAPACITY_BLOCK_EXPIRING))
    }

    /// Whether instances may launch into it `elapsed` after the cloud was made.
    fn open(&self, elapsed: Duration) -> bool {
        self.expiring_after().is_none_or(|at| elapsed < at)
    }
}

/// Tells the simulated cluster, after `delay`, that `instance` booted and joins as a node.
pub fn announce_boot(
    booted: &mpsc::UnboundedSender<InstanceBooted>,
    delay: Duration,
    instance: &Instance,
    instance_type: Arc<InstanceType>,
) {
    let booted = booted.clone();
    let announce = InstanceBooted {
        instance: instance.clone(),
        instance_type,
    };
    tokio::spawn(async move {
        tokio::time::sleep(delay).await;
        // The cluster may have shut down already at the end of a run.
        let _ = booted.send(announce);
    });
}

/// Tells the simulated cluster that an instance booted and should join as a node.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceBooted {
    /// The instance.
    pub instance: Instance,
    /// Its instance type (capacity, labels).
    pub instance_type: Arc<InstanceType>,
}

/// A node class as the simulated cloud knows it: its static hash and which image release
/// new instances boot.
#[derive(Debug, Clone)]
struct NodeClassState {
    hash: NodeClassHash,
    /// 1 for the image the run starts with; each release adds one.
    release: u32,
    /// Being deleted: nothing new is launched with it, as upstream treats a terminating
    /// class as gone.
    terminating: bool,
}

/// The image a node class's `release` boots.
fn image_of(release: u32) -> String {
    if release <= 1 {
        "ami-simulated".into()
    } else {
        format!("ami-simulated-{release}")
    }
}

struct CloudState {
    instances: BTreeMap<String, Instance>,
    node_classes: BTreeMap<String, NodeClassState>,
    by_token: HashMap<String, String>,
    unavailable: HashMap<OfferingKey, Instant>,
    next_id: u64,
    launches: u64,
    terminations: u64,
}

/// The simulated cloud.
pub struct SimCloud {
    types: Vec<Arc<InstanceType>>,
    by_name: HashMap<String, Arc<InstanceType>>,
    shortages: Vec<CapacityShortage>,
    started: Instant,
    boot_delay: Duration,
    booted: mpsc::UnboundedSender<InstanceBooted>,
    state: Mutex<CloudState>,
    /// Wall-clock time (ms since the Unix epoch) at `started`, when launch times are told.
    epoch_ms: Option<i64>,
    /// Where its on-demand prices come from, as launched instances tell it.
    price_table: String,
    /// Capacity reservations, offered as `reserved` offerings of their types.
    reservations: Vec<SimReservation>,
    /// Per type, the last copy [`SimCloud::offered`] made of it: handed out again while its
    /// offerings stay as they are, so rounds see the same types (and reuse what they
    /// worked out for them) until availability changes.
    offered: Mutex<HashMap<String, Arc<InstanceType>>>,
}

impl SimCloud {
    /// A cloud offering `types`; booted instances are announced on `booted` after `boot_delay`.
    pub fn new(
        types: Vec<Arc<InstanceType>>,
        shortages: Vec<CapacityShortage>,
        boot_delay: Duration,
        booted: mpsc::UnboundedSender<InstanceBooted>,
    ) -> Self {
        let by_name = types.iter().map(|t| (t.name.clone(), t.clone())).collect();
        SimCloud {
            types,
            by_name,
            shortages,
            started: Instant::now(),
            boot_delay,
            booted,
            state: Mutex::new(CloudState {
                instances: BTreeMap::new(),
                node_classes: BTreeMap::new(),
                by_token: HashMap::new(),
                unavailable: HashMap::new(),
                next_id: 1,
                launches: 0,
                terminations: 0,
            }),
            epoch_ms: None,
            price_table: "the simulator's catalog".to_owned(),
            reservations: Vec::new(),
            offered: Mutex::default(),
        }
    }

    /// The cloud holds `reservations` for the cluster (none when the `ReservedCapacity`
    /// gate is off).
    pub fn with_reservations(mut self, reservations: Vec<SimReservation>) -> Self {
        self.reservations = reservations;
        self
    }

    /// Instances of reservation `id` still running.
    fn in_reservation(state: &CloudState, id: &str) -> u32 {
        let running = state.instances.values().filter(|i| {
            i.state == InstanceState::Running && i.reservation.as_ref().is_some_and(|r| r.id == id)
        });
        u32::try_from(running.count()).unwrap_or(u32::MAX)
    }

    /// Type `it` as it is offered now: its offerings marked unavailable where a launch just
    /// failed, and a `reserved` offering per zone it holds reservations in (the one with
    /// the most left, as upstream's provider lists one per type and zone).
    fn offered(
        &self,
        state: &CloudState,
        it: &Arc<InstanceType>,
        now: Instant,
    ) -> Arc<InstanceType> {
        let unavailable = |zone: &str, capacity_type: CapacityType| {
            state.unavailable.iter().any(|(k, expires)| {
                *expires > now
                    && k.instance_type == it.name
                    && k.zone == zone
                    && k.capacity_type == capacity_type
            })
        };
        let mut reserved: BTreeMap<&str, ReservedCapacity> = BTreeMap::new();
        // An expiring Capacity Block takes no more launches.
        let open = (self.reservations.iter()).filter(|r| r.open(now - self.started));
        for r in open.filter(|r| r.instance_type == it.name) {
            let remaining = r
                .count
                .saturating_sub(Self::in_reservation(state, &r.reservation.id));
            let best = reserved.entry(&r.zone).or_insert(ReservedCapacity {
                reservation: r.reservation.clone(),
                remaining,
            });
            if remaining > best.remaining {
                *best = ReservedCapacity {
                    reservation: r.reservation.clone(),
                    remaining,
                };
            }
        }
        let marked = (state.unavailable.iter())
            .any(|(k, expires)| *expires > now && k.instance_type == it.name);
        if reserved.is_empty() && !marked {
            return it.clone();
        }
        let mut offerings = it.offerings.clone();
        for offering in &mut offerings {
            offering.available &= !unavailable(&offering.zone, offering.capacity_type);
        }
        for (zone, capacity) in reserved {
            let on_demand = it
                .offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::OnDemand)
                .min_by_key(|o| o.zone != zone)
                .map_or(0.0, |o| o.price);
            let mut offering = Offering::reserved(zone, on_demand, capacity);
            offering.available &= !unavailable(zone, CapacityType::Reserved);
            offerings.push(offering);
        }
        let mut kept = self.offered.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(copy) = kept.get(&it.name)
            && copy.offerings == offerings
        {
            return copy.clone();
        }
        let copy = Arc::new(InstanceType::new(
            it.name.clone(),
            it.labels.clone(),
            it.capacity,
            it.overhead,
            offerings,
        ));
        kept.insert(it.name.clone(), copy.clone());
        copy
    }

    /// Launched instances say their on-demand prices come from `price_table`.
    pub fn with_price_table(mut self, price_table: String) -> Self {
        self.price_table = price_table;
        self
    }

    /// Instances report their launch time, counted from `epoch_ms` (ms since the Unix epoch)
    /// at the moment the cloud was made.
    pub fn with_epoch(mut self, epoch_ms: i64) -> Self {
        self.epoch_ms = Some(epoch_ms);
        self
    }

    fn lock(&self) -> MutexGuard<'_, CloudState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Instances launched and terminated so far.
    pub fn counts(&self) -> (u64, u64) {
        let state = self.lock();
        (state.launches, state.terminations)
    }

    /// Running instances.
    pub fn running(&self) -> Vec<Instance> {
        self.lock()
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Running)
            .cloned()
            .collect()
    }

    /// Puts back instances that were running when a previous run stopped (a resumed
    /// simulation's cloud kept them).
    pub fn restore(&self, instances: &[Instance]) {
        let mut state = self.lock();
        for instance in instances {
            let number = u64::from_str_radix(instance.id.trim_start_matches("i-"), 16).unwrap_or(0);
            state.next_id = state.next_id.max(number + 1);
            state
                .instances
                .insert(instance.id.clone(), instance.clone());
        }
    }

    /// A node class was created or changed: new NodeClaims are stamped with its hash, and
    /// those stamped with an older one drift (`NodeClassDrift`).
    pub fn set_node_class(&self, node_class: &EC2NodeClass) {
        let name = node_class.metadata.name.clone().unwrap_or_default();
        let hash = NodeClassHash::of(&node_class.spec);
        let terminating = node_class.metadata.deletion_timestamp.is_some();
        let mut state = self.lock();
        let entry = state.node_classes.entry(name).or_insert(NodeClassState {
            hash: hash.clone(),
            release: 1,
            terminating,
        });
        entry.hash = hash;
        entry.terminating = terminating;
    }

    /// A node class was deleted: its pools get no instance types and nothing launches with it.
    pub fn remove_node_class(&self, name: &str) {
        self.lock().node_classes.remove(name);
    }

    /// The node classes the cloud was told of.
    pub fn node_class_names(&self) -> Vec<String> {
        self.lock().node_classes.keys().cloned().collect()
    }

    /// `NodeClassNotReady` unless `name` is a node class the cloud knows and not being
    /// deleted, as EC2 answers for a class it cannot resolve.
    fn class_ready(state: &CloudState, name: &str) -> Result<(), CloudError> {
        let reason = match state.node_classes.get(name) {
            None => format!("EC2NodeClass {name:?} does not exist"),
            Some(class) if class.terminating => format!("EC2NodeClass {name:?} is being deleted"),
            Some(_) => return Ok(()),
        };
        Err(CloudError::NodeClassNotReady {
            name: name.to_owned(),
            reason,
        })
    }

    /// A new image is released for `node_class` (every node class when `None`): new
    /// instances boot it, and nodes on an older one drift (`AMIDrift`). Returns each node
    /// class with its new image.
    pub fn release_image(&self, node_class: Option<&str>) -> Vec<(String, String)> {
        let mut state = self.lock();
        state
            .node_classes
            .iter_mut()
            .filter(|(name, _)| node_class.is_none_or(|n| n == name.as_str()))
            .map(|(name, class)| {
                class.release += 1;
                (name.clone(), image_of(class.release))
            })
            .collect()
    }

    /// The NodeClaim a running instance was launched for.
    pub fn owner_of(&self, instance_id: &str) -> Option<String> {
        self.lock()
            .instances
            .get(instance_id)
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| i.nodeclaim.clone())
    }

    /// The instance type named `name`.
    pub fn instance_type(&self, name: &str) -> Option<Arc<InstanceType>> {
        self.by_name.get(name).cloned()
    }

    /// Simulates EC2 terminating an instance on its own (e.g. after a spot interruption
    /// notice expires).
    pub fn reclaim(&self, instance_id: &str) -> Option<Instance> {
        let mut state = self.lock();
        let instance = state.instances.get_mut(instance_id)?;
        if instance.state != InstanceState::Running {
            return None;
        }
        instance.state = InstanceState::Terminated;
        let copy = instance.clone();
        state.terminations += 1;
        Some(copy)
    }

    fn launch(&self, request: &LaunchRequest) -> Result<(Instance, Arc<InstanceType>), CloudError> {
        let now = Instant::now();
        let elapsed = now - self.started;
        let mut state = self.lock();
        if let Some(id) = state.by_token.get(&request.client_token)
            && let Some(existing) = state.instances.get(id)
        {
            let it = self
                .by_name
                .get(&existing.instance_type)
                .cloned()
                .ok_or_else(|| {
                    CloudError::Other(format!("instance type {} vanished", existing.instance_type))
                })?;
            return Ok((existing.clone(), it));
        }
        Self::class_ready(&state, &request.node_class)?;
        state.unavailable.retain(|_, expires| *expires > now);
        let mut failed = Vec::new();
        for option in &request.instance_types {
            let Some(it) = self.by_name.get(&*option.name) else {
                continue;
            };
            let it = &self.offered(&state, it, now);
            let mut offerings: Vec<_> = it.offerings_for(&request.requirements).collect();
            // Cheapest first, as CreateFleet's lowest-price / price-capacity-optimized would.
            offerings.sort_by(|a, b| {
                a.price
                    .total_cmp(&b.price)
                    .then_with(|| a.zone.cmp(&b.zone))
            });
            for offering in offerings {
                let key = OfferingKey {
                    instance_type: it.name.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type,
                };
                if state.unavailable.contains_key(&key) {
                    continue;
                }
                let reservation_full = offering.reservation().is_some_and(|r| {
                    let count = self.reservations.iter().find(|s| s.reservation.id == r.id);
                    count.is_none_or(|s| {
                        !s.open(elapsed) || Self::in_reservation(&state, &r.id) >= s.count
                    })
                });
                if reservation_full || self.shortages.iter().any(|s| s.matches(&key, elapsed)) {
                    state
                        .unavailable
                        .insert(key.clone(), now + UNAVAILABLE_OFFERING_TTL);
                    failed.push(key);
                    continue;
                }
                let id = format!("i-{:017x}", state.next_id);
                state.next_id += 1;
                state.launches += 1;
                let instance = Instance {
                    provider_id: format!("aws:///{}/{id}", offering.zone),
                    id: id.clone(),
                    instance_type: it.name.clone(),
                    zone: offering.zone.clone(),
                    capacity_type: offering.capacity_type,
                    price: offering.price,
                    image_id: image_of(
                        state
                            .node_classes
                            .get(&request.node_class)
                            .map_or(1, |c| c.release),
                    ),
                    nodeclaim: request.nodeclaim.clone(),
                    nodepool: request.nodepool.clone(),
                    state: InstanceState::Running,
                    launched_at_ms: self.epoch_ms.map(|epoch| {
                        epoch + i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
                    }),
                    price_source: Some(match (offering.capacity_type, offering.reservation()) {
                        (CapacityType::Spot, _) => format!(
                            "assumed spot price: the on-demand price from {} less a fixed 55-75 % discount",
                            self.price_table
                        ),
                        (_, Some(r)) => {
                            karpenter_core::model::reservation::price_source(r, &self.price_table)
                        }
                        _ => format!("on-demand price from {}", self.price_table),
                    }),
                    reservation: offering.reservation().cloned(),
                };
                state
                    .by_token
                    .insert(request.client_token.clone(), id.clone());
                state.instances.insert(id, instance.clone());
                return Ok((instance, it.clone()));
            }
        }
        if failed.is_empty() {
            // Every offering was already known to be unavailable.
            for option in &request.instance_types {
                failed.push(OfferingKey {
                    instance_type: option.name.to_string(),
                    zone: option.zone.to_string(),
                    capacity_type: option.capacity_type,
                });
            }
        }
        Err(CloudError::InsufficientCapacity { offerings: failed })
    }
}

impl CloudProvider for SimCloud {
    fn now_ms(&self) -> i64 {
        let elapsed = Instant::now() - self.started;
        self.epoch_ms.unwrap_or(0) + i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
    }

    fn create<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            let (instance, instance_type) = self.launch(request)?;
            announce_boot(&self.booted, self.boot_delay, &instance, instance_type);
            Ok(instance)
        })
    }

    fn delete<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            let mut state = self.lock();
            if let Some(instance) = state.instances.get_mut(instance_id)
                && instance.state == InstanceState::Running
            {
                instance.state = InstanceState::Terminated;
                state.terminations += 1;
            }
            Ok(())
        })
    }

    fn get<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            self.lock()
                .instances
                .get(instance_id)
                .cloned()
                .ok_or_else(|| CloudError::NotFound {
                    id: instance_id.to_owned(),
                })
        })
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>> {
        Box::pin(async move { Ok(self.lock().instances.values().cloned().collect()) })
    }

    fn instance_types<'a>(
        &'a self,
        node_class: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>> {
        Box::pin(async move {
            let now = Instant::now();
            let state = self.lock();
            Self::class_ready(&state, node_class)?;
            let current = state.unavailable.values().any(|expires| *expires > now);
            if !current && self.reservations.is_empty() {
                return Ok(self.types.clone());
            }
            Ok(self
                .types
                .iter()
                .map(|t| self.offered(&state, t, now))
                .collect())
        })
    }

    fn node_class_hash(&self, node_class: &str) -> Option<NodeClassHash> {
        self.lock()
            .node_classes
            .get(node_class)
            .map(|c| c.hash.clone())
    }

    fn drift<'a>(
        &'a self,
        check: &'a DriftCheck,
    ) -> BoxFuture<'a, Result<Option<Drift>, CloudError>> {
        Box::pin(async move {
            let state = self.lock();
            let Some(class) = state.node_classes.get(&check.node_class) else {
                return Ok(None);
            };
            if let Some(drift) = class
                .hash
                .drift_from(check.node_class_hash.as_ref(), &check.node_class)
            {
                return Ok(Some(drift));
            }
            let current = image_of(class.release);
            Ok((check.instance.image_id != current).then(|| Drift {
                reason: "AMIDrift".into(),
                message: format!(
                    "image {} is no longer among the images EC2NodeClass {} resolves to ({current})",
                    check.instance.image_id, check.node_class
                ),
            }))
        })
    }

    fn provider_name(&self) -> &'static str {
        "simulated"
    }

    fn mark_unavailable(&self, offering: &OfferingKey) {
        self.lock()
            .unavailable
            .insert(offering.clone(), Instant::now() + UNAVAILABLE_OFFERING_TTL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use karpenter_core::model::catalog::{Catalog, assumed_spot_price};
    use karpenter_core::model::{KubeletSettings, Requirements};
    use karpenter_core::scheduling::InstanceTypeOption;

    fn types() -> Vec<Arc<InstanceType>> {
        let catalog = Catalog::embedded().expect("catalog");
        catalog
            .instance_types(
                "us-east-1",
                &KubeletSettings::default(),
                &assumed_spot_price,
            )
            .into_iter()
            .filter(|t| t.name.starts_with("m5.") || t.name.starts_with("c5."))
            .map(Arc::new)
            .collect()
    }

    fn class(name: &str, terminating: bool) -> EC2NodeClass {
        let mut value = serde_json::json!({"metadata": {"name": name}, "spec": {
            "role": "r", "amiSelectorTerms": [{"alias": "al2023@latest"}],
            "subnetSelectorTerms": [{"tags": {"k": "v"}}],
            "securityGroupSelectorTerms": [{"tags": {"k": "v"}}]}});
        if terminating {
            value["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z".into();
        }
        serde_json::from_value(value).expect("class")
    }

    /// A cloud told of the node class `default`.
    fn known(cloud: SimCloud) -> SimCloud {
        cloud.set_node_class(&class("default", false));
        cloud
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_class_it_was_not_told_of_or_that_is_being_deleted_is_not_ready() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let cloud = SimCloud::new(types(), Vec::new(), Duration::from_secs(1), tx);
        let not_ready = |r: Result<_, CloudError>| match r {
            Err(CloudError::NodeClassNotReady { reason, .. }) => reason,
            other => panic!("expected NodeClassNotReady, got {other:?}"),
        };
        let reason = not_ready(cloud.instance_types("default").await.map(|_| ()));
        assert!(reason.contains("does not exist"), "{reason}");
        not_ready(
            cloud
                .create(&request("t1", &["m5.large"]))
                .await
                .map(|_| ()),
        );
        cloud.set_node_class(&class("default", false));
        assert!(!cloud.instance_types("default").await.unwrap().is_empty());
        let launched = cloud.create(&request("t1", &["m5.large"])).await.unwrap();
        cloud.set_node_class(&class("default", true));
        let reason = not_ready(cloud.instance_types("default").await.map(|_| ()));
        assert!(reason.contains("being deleted"), "{reason}");
        not_ready(
            cloud
                .create(&request("t2", &["m5.large"]))
                .await
                .map(|_| ()),
        );
        // A retried launch still answers with the instance it made.
        assert_eq!(
            cloud.create(&request("t1", &["m5.large"])).await.unwrap(),
            launched
        );
        cloud.remove_node_class("default");
        assert!(cloud.node_class_names().is_empty());
        not_ready(cloud.instance_types("default").await.map(|_| ()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_reservation_is_offered_while_it_takes_more_and_a_block_not_once_it_expires() {
        use karpenter_core::model::{Requirement, ReservationKind};
        let (tx, _rx) = mpsc::unbounded_channel();
        let block = SimReservation {
            reservation: Reservation {
                id: "cr-1".into(),
                kind: ReservationKind::CapacityBlock,
            },
            instance_type: "m5.large".into(),
            zone: "us-east-1a".into(),
            count: 1,
            ends_after: Some(Duration::from_secs(3600)),
        };
        let cloud = known(
            SimCloud::new(types(), Vec::new(), Duration::from_secs(1), tx)
                .with_reservations(vec![block]),
        );
        let reserved = || async {
            let types = cloud.instance_types("default").await.unwrap();
            let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
            m5.offerings.iter().find(|o| o.reserved.is_some()).cloned()
        };
        let offered = reserved().await.expect("offered");
        assert_eq!(offered.reserved.as_ref().map(|r| r.remaining), Some(1));
        assert!(offered.available && offered.price < 1e-6, "{offered:?}");

        let pinned = |token: &str| {
            let mut request = request(token, &["m5.large"]);
            request.requirements.add(
                karpenter_core::vocab::labels::CAPACITY_TYPE,
                Requirement::is_in(["reserved"]),
            );
            request.instance_types[0].capacity_type = CapacityType::Reserved;
            request
        };
        let launched = cloud.create(&pinned("t1")).await.unwrap();
        assert_eq!(launched.reservation.map(|r| r.id).as_deref(), Some("cr-1"));
        assert!(!reserved().await.unwrap().available, "full");
        let full = cloud.create(&pinned("t2")).await;
        assert!(
            matches!(full, Err(CloudError::InsufficientCapacity { .. })),
            "{full:?}"
        );
        cloud.delete(&launched.id).await.unwrap();
        // Free again once the failed launch's unavailability has passed.
        tokio::time::advance(UNAVAILABLE_OFFERING_TTL + Duration::from_secs(1)).await;
        assert!(reserved().await.unwrap().available);
        // 40 minutes before its end the block is expiring: not offered, not launched into.
        tokio::time::advance(Duration::from_secs(20 * 60)).await;
        assert_eq!(reserved().await, None);
        let late = cloud.create(&pinned("t3")).await;
        assert!(
            matches!(late, Err(CloudError::InsufficientCapacity { .. })),
            "{late:?}"
        );
    }

    fn request(token: &str, names: &[&str]) -> LaunchRequest {
        LaunchRequest {
            nodeclaim: format!("nc-{token}"),
            nodepool: "default".into(),
            client_token: token.into(),
            node_class: "default".into(),
            requirements: Requirements::new(),
            labels: Default::default(),
            taints: Vec::new(),
            instance_types: names
                .iter()
                .map(|n| InstanceTypeOption {
                    name: (*n).into(),
                    price: 0.0,
                    zone: "us-east-1a".into(),
                    capacity_type: CapacityType::Spot,
                })
                .collect(),
            overlaid: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn launches_are_idempotent_per_token_and_announce_the_boot() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let cloud = known(SimCloud::new(
            types(),
            Vec::new(),
            Duration::from_secs(30),
            tx,
        ));
        let first = cloud.create(&request("t1", &["m5.large"])).await.unwrap();
        let again = cloud.create(&request("t1", &["m5.large"])).await.unwrap();
        assert_eq!(first, again, "a retried launch returns the same instance");
        assert_eq!(cloud.counts(), (1, 0));
        assert_eq!(
            first.capacity_type,
            CapacityType::Spot,
            "spot is cheaper and allowed"
        );
        let booted = rx.recv().await.unwrap();
        assert_eq!(booted.instance.id, first.id);
        cloud.delete(&first.id).await.unwrap();
        cloud.delete(&first.id).await.unwrap();
        cloud.delete("i-missing").await.unwrap();
        assert_eq!(cloud.counts(), (1, 1));
        assert!(matches!(
            cloud.get("i-missing").await,
            Err(CloudError::NotFound { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn shortages_fall_back_and_are_remembered_for_three_minutes() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let shortage = CapacityShortage {
            instance_type: Some("m5.large".into()),
            zone: None,
            capacity_type: Some(CapacityType::Spot),
            from: Duration::ZERO,
            until: Duration::from_secs(60),
        };
        let cloud = known(SimCloud::new(
            types(),
            vec![shortage],
            Duration::from_secs(1),
            tx,
        ));
        let instance = cloud.create(&request("t1", &["m5.large"])).await.unwrap();
        assert_eq!(
            instance.capacity_type,
            CapacityType::OnDemand,
            "fell back to on-demand"
        );
        let types = cloud.instance_types("default").await.unwrap();
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        assert!(
            m5.offerings
                .iter()
                .filter(|o| o.capacity_type == CapacityType::Spot)
                .all(|o| !o.available)
        );
        tokio::time::advance(UNAVAILABLE_OFFERING_TTL + Duration::from_secs(1)).await;
        let types = cloud.instance_types("default").await.unwrap();
        let m5 = types.iter().find(|t| t.name == "m5.large").unwrap();
        assert!(
            m5.offerings.iter().all(|o| o.available),
            "the cache entry expired"
        );
        let mut only_spot = request("t2", &["m5.large"]);
        only_spot.requirements.add(
            karpenter_core::vocab::labels::CAPACITY_TYPE,
            karpenter_core::model::Requirement::is_in(["spot"]),
        );
        let spot = cloud.create(&only_spot).await.unwrap();
        assert_eq!(
            spot.capacity_type,
            CapacityType::Spot,
            "the shortage window ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn when_every_offering_fails_the_error_names_them() {
        let (tx, _rx) = mpsc::unbounded_channel();
        let everything = CapacityShortage {
            instance_type: None,
            zone: None,
            capacity_type: None,
            from: Duration::ZERO,
            until: Duration::from_secs(3600),
        };
        let cloud = known(SimCloud::new(
            types(),
            vec![everything],
            Duration::from_secs(1),
            tx,
        ));
        let err = cloud
            .create(&request("t1", &["c5.large"]))
            .await
            .unwrap_err();
        let CloudError::InsufficientCapacity { offerings } = err else {
            panic!("{err}")
        };
        assert!(offerings.len() >= 2, "{offerings:?}");
        assert!(offerings.iter().all(|o| o.instance_type == "c5.large"));
    }
}
