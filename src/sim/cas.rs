//! A scenario's workload under the Cluster Autoscaler model ([`karpenter_core::cas`])
//! instead of the actors: the same simulated cluster (kube-scheduler stand-in, DaemonSets,
//! PDBs, jobs), the same in-memory cloud (prices, boot delays, capacity shortages), the same
//! timeline on the same virtual clock, and a journal of the same events (pods pending and
//! bound, each Auto Scaling group instance as a NodeClaim planned, launched, registered,
//! drained and terminated), so `report::summary` measures both runs alike and `journal
//! report` draws this one too.
//!
//! Timeline steps Cluster Autoscaler has no part in: `apply` (node groups are fixed) and
//! `amiRelease` (it replaces no node for a new image) are left out and said; `interrupt`
//! takes the instance away two minutes later with no drain (no termination handler) and the
//! Auto Scaling group launches a replacement; `deleteNodeClaim` drains the group's oldest
//! node by hand and the group replaces it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_core::cas::{
    Candidate, CasSettings, Expander, NodeFacts, NodeGroup, ScaleDown, ScaleDownInput,
    ScaleUpInput, derive_groups, parse_groups, scale_up, upcoming_node,
};
use karpenter_core::events::{DomainEvent, NodeClaimPlan};
use karpenter_core::model::Pod;
use karpenter_core::ports::{
    CloudProvider as _, Cluster as _, ClusterEvent, Instance, LaunchRequest,
};
use karpenter_core::scheduling::{ExistingNode, InstanceTypeOption, PlannedNodeClaim};
use karpenter_journal::Journal;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::cluster::SimCluster;
use super::run::{SIM_EPOCH_MS, SimClock, seed_cluster};
use super::scenario::{Action, Scenario};
use crate::simcloud::{InstanceBooted, SimCloud};

/// Where the node groups come from.
#[derive(Debug, Clone)]
pub enum GroupsChoice {
    /// One per NodePool and capacity type ([`derive_groups`]).
    Derived,
    /// A node-groups file's text, and where it was read from.
    File(String, PathBuf),
}

/// How a Cluster Autoscaler run is set up.
#[derive(Debug, Clone)]
pub struct CasOptions {
    /// Where its journal goes (must not hold one).
    pub journal_dir: PathBuf,
    /// Its node groups.
    pub groups: GroupsChoice,
    /// Its expander.
    pub expander: Expander,
    /// Its timing and thresholds.
    pub settings: CasSettings,
}

/// What a Cluster Autoscaler run used and noticed.
#[derive(Debug, Clone)]
pub struct CasRun {
    /// The node groups, with how each was chosen when derived.
    pub groups: Vec<(NodeGroup, Option<String>)>,
    /// NodePools left without a group, and timeline steps left out.
    pub notes: Vec<String>,
    /// Scans, scale-ups and scale-downs (nodes removed).
    pub scans: u64,
    /// Scale-ups.
    pub scale_ups: u64,
    /// Nodes removed as unneeded.
    pub removed: u64,
    /// Launches the cloud refused (no capacity).
    pub failed_launches: u64,
}

/// Runs the scenario's workload under Cluster Autoscaler to its end.
pub fn run_cas(scenario: &Scenario, options: &CasOptions) -> anyhow::Result<CasRun> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .context("cannot start the simulation runtime")?;
    runtime.block_on(run_async(scenario, options))
}

/// The workload's pod templates: what the derived groups must take.
fn workload(scenario: &Scenario) -> anyhow::Result<(Vec<Pod>, Vec<Pod>)> {
    let file = &scenario.file;
    let mut pods = Vec::new();
    for d in &file.deployments {
        pods.push(d.pod()?);
    }
    for step in &file.timeline {
        if let Action::Job(job) = &step.action {
            pods.push(job.pod()?);
        }
    }
    let daemonsets = file
        .daemonsets
        .iter()
        .map(|d| d.pod())
        .collect::<anyhow::Result<_>>()?;
    Ok((pods, daemonsets))
}

async fn run_async(scenario: &Scenario, options: &CasOptions) -> anyhow::Result<CasRun> {
    let file = &scenario.file;
    let catalog = crate::system::catalog_instance_types(&file.region)?;
    let (pods, daemonsets) = workload(scenario)?;
    let mut notes = Vec::new();
    let groups: Vec<(NodeGroup, Option<String>)> = match &options.groups {
        GroupsChoice::Derived => {
            let (derived, skipped) =
                derive_groups(&scenario.nodepools, &catalog, &pods, &daemonsets);
            notes.extend(skipped);
            derived
                .into_iter()
                .map(|d| (d.group, Some(d.why)))
                .collect()
        }
        GroupsChoice::File(text, path) => parse_groups(text, &catalog)
            .with_context(|| format!("--node-groups {}", path.display()))?
            .into_iter()
            .map(|g| (g, None))
            .collect(),
    };
    anyhow::ensure!(
        !groups.is_empty(),
        "no node group to run Cluster Autoscaler with ({}); give --node-groups FILE",
        notes.join("; ")
    );
    for (at, step) in file.timeline.iter().map(|s| (s.at, &s.action)) {
        let why = match step {
            Action::Apply(_) => "apply: Cluster Autoscaler's node groups are fixed",
            Action::AmiRelease { .. } => {
                "amiRelease: Cluster Autoscaler replaces no node for a new image"
            }
            Action::ScaleNodePool { .. } => {
                "scaleNodePool: Cluster Autoscaler has no static NodePools"
            }
            Action::NodeCondition { .. } => "nodeCondition: Cluster Autoscaler repairs no node",
            _ => continue,
        };
        notes.push(format!(
            "timeline step at {} left out: {why}",
            crate::report::run::hms(at)
        ));
    }
    let start = Instant::now();
    let journal = Journal::<DomainEvent>::open_with_clock(
        &options.journal_dir,
        Arc::new(SimClock::new(Duration::ZERO)),
    )
    .with_context(|| {
        format!(
            "cannot open the journal in {}",
            options.journal_dir.display()
        )
    })?;
    let (booted_tx, booted_rx) = mpsc::unbounded_channel::<InstanceBooted>();
    let (events_tx, events_rx) = mpsc::unbounded_channel::<ClusterEvent>();
    let shortages = file
        .shortages
        .iter()
        .map(|s| s.to_cloud())
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cloud =
        SimCloud::new(catalog, shortages, file.boot_delay, booted_tx).with_epoch(SIM_EPOCH_MS);
    for class in &scenario.nodeclasses {
        cloud.set_node_class(class);
    }
    let cluster = SimCluster::new(events_tx, file.ready_delay).with_epoch(SIM_EPOCH_MS);
    seed_cluster(file, &cluster, Duration::ZERO)?;
    let node_class = scenario
        .nodeclasses
        .first()
        .and_then(|c| c.metadata.name.clone())
        .unwrap_or_default();
    let only_groups: Vec<NodeGroup> = groups.iter().map(|(g, _)| g.clone()).collect();
    for g in &only_groups {
        journal.append(&DomainEvent::NodePoolObserved {
            nodepool: g.name.clone(),
            weight: 0,
            hash: String::new(),
        })?;
    }
    let mut cas = Cas {
        settings: options.settings,
        expander: options.expander,
        sizes: vec![0; only_groups.len()],
        backoff: vec![None; only_groups.len()],
        groups: only_groups,
        node_class,
        daemonsets,
        journal: &journal,
        cloud: &cloud,
        cluster: &cluster,
        members: BTreeMap::new(),
        pending: BTreeMap::new(),
        launched: 0,
        last_scale_up: None,
        last_failure: None,
        scale_down: ScaleDown::default(),
        drains: BTreeMap::new(),
        reclaims: Vec::new(),
        stats: Stats::default(),
    };
    cas.drive(scenario, start, booted_rx, events_rx).await?;
    journal.flush()?;
    let stats = cas.stats;
    info!(
        scans = stats.scans,
        scale_ups = stats.scale_ups,
        removed = stats.removed,
        "Cluster Autoscaler run finished."
    );
    Ok(CasRun {
        groups,
        notes,
        scans: stats.scans,
        scale_ups: stats.scale_ups,
        removed: stats.removed,
        failed_launches: stats.failed_launches,
    })
}

/// An instance of a group.
#[derive(Debug, Clone)]
struct Member {
    group: usize,
    /// The NodeClaim name the journal gives it.
    claim: String,
    instance: Instance,
    /// Its node, once registered.
    node: Option<String>,
}

/// A node being drained.
#[derive(Debug, Clone)]
struct Drain {
    instance_id: String,
    started: Instant,
    reason: &'static str,
    /// The group launches another in its place (a node deleted by hand).
    replace: bool,
}

#[derive(Debug, Clone, Copy, Default)]
struct Stats {
    scans: u64,
    scale_ups: u64,
    removed: u64,
    failed_launches: u64,
}

/// Cluster Autoscaler and its Auto Scaling groups, running.
struct Cas<'a> {
    settings: CasSettings,
    expander: Expander,
    groups: Vec<NodeGroup>,
    /// Each group's target size.
    sizes: Vec<usize>,
    /// Each group's backoff: until when, and how long the last one was.
    backoff: Vec<Option<(Instant, Duration)>>,
    node_class: String,
    daemonsets: Vec<Pod>,
    journal: &'a Journal<DomainEvent>,
    cloud: &'a SimCloud,
    cluster: &'a SimCluster,
    /// Running instances by id.
    members: BTreeMap<String, Member>,
    /// Pods kube-scheduler left unschedulable, by UID.
    pending: BTreeMap<String, Pod>,
    /// Instances launched so far (names the next).
    launched: u64,
    last_scale_up: Option<Instant>,
    last_failure: Option<Instant>,
    scale_down: ScaleDown,
    /// Nodes being drained, by node name.
    drains: BTreeMap<String, Drain>,
    /// Interrupted instances the cloud takes back, and when.
    reclaims: Vec<(Instant, String)>,
    stats: Stats,
}

impl Cas<'_> {
    /// Plays the timeline to the scenario's end: the cluster ticks every second, Cluster
    /// Autoscaler scans every scan interval.
    async fn drive(
        &mut self,
        scenario: &Scenario,
        start: Instant,
        mut booted_rx: mpsc::UnboundedReceiver<InstanceBooted>,
        mut events_rx: mpsc::UnboundedReceiver<ClusterEvent>,
    ) -> anyhow::Result<()> {
        let file = &scenario.file;
        let mut timeline: Vec<_> = file.timeline.clone();
        timeline.sort_by_key(|s| s.at);
        let mut timeline = timeline.into_iter().peekable();
        let end = start + file.duration;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut next_scan = start + self.settings.scan_interval;
        loop {
            let now = Instant::now();
            if now >= end {
                return Ok(());
            }
            while let Some(step) = timeline.next_if(|s| start + s.at <= now) {
                self.step(&step.action, now).await?;
            }
            let due: Vec<String> = self
                .reclaims
                .extract_if(.., |(at, _)| *at <= now)
                .map(|(_, id)| id)
                .collect();
            for id in due {
                self.reclaimed(&id).await?;
            }
            if now >= next_scan {
                // What the cluster said so far counts: a pod bound a moment ago is not pending.
                while let Ok(booted) = booted_rx.try_recv() {
                    self.booted(&booted);
                }
                while let Ok(event) = events_rx.try_recv() {
                    self.observe(event).await?;
                }
                self.scan(now).await?;
                next_scan += self.settings.scan_interval;
            }
            tokio::select! {
                _ = tick.tick() => self.cluster.tick(),
                Some(booted) = booted_rx.recv() => self.booted(&booted),
                Some(event) = events_rx.recv() => self.observe(event).await?,
            }
        }
    }

    /// A timeline step.
    async fn step(&mut self, action: &Action, now: Instant) -> anyhow::Result<()> {
        match action {
            Action::Scale {
                deployment,
                replicas,
            } => self.cluster.scale(deployment, None, *replicas),
            Action::Job(job) => self.cluster.add_job(
                &job.name,
                &job.pod()?,
                job.replicas,
                job.run_for.unwrap_or_default(),
            ),
            Action::Apply(_)
            | Action::AmiRelease { .. }
            | Action::ScaleNodePool { .. }
            | Action::NodeCondition { .. } => {}
            Action::DeleteNodeClaim { nodepool, count } => {
                let mut oldest = self.members_of(nodepool, false);
                oldest.sort_by_key(|m| (m.instance.launched_at_ms, m.instance.id.clone()));
                for m in oldest.into_iter().take(*count) {
                    if let Some(node) = &m.node {
                        self.start_drain(node, &m, "deleted", true, now).await?;
                    }
                }
            }
            Action::Interrupt {
                nodepool,
                count,
                kind,
            } => {
                let spot_only = *kind == karpenter_core::ports::InterruptionKind::SpotInterrupted;
                let mut candidates = self.members_of(nodepool, spot_only);
                candidates.sort_by(|a, b| a.instance.id.cmp(&b.instance.id));
                for m in candidates.into_iter().take(*count) {
                    info!(instance.id = %m.instance.id, "Interrupting; no handler drains it.");
                    self.reclaims
                        .push((now + Duration::from_secs(120), m.instance.id.clone()));
                }
            }
        }
        Ok(())
    }

    /// Running instances of the groups standing in for `nodepool`.
    fn members_of(&self, nodepool: &str, spot_only: bool) -> Vec<Member> {
        self.members
            .values()
            .filter(|m| {
                let g = &self.groups[m.group];
                (g.nodepool() == Some(nodepool) || g.name == nodepool)
                    && (!spot_only
                        || m.instance.capacity_type == karpenter_core::model::CapacityType::Spot)
            })
            .cloned()
            .collect()
    }

    /// An instance booted: its node joins with its group's labels and taints.
    fn booted(&mut self, booted: &InstanceBooted) {
        if !self.members.contains_key(&booted.instance.id) {
            return;
        }
        self.cluster
            .register(&booted.instance, &booted.instance_type);
    }

    /// A cluster event: journaled as the actors would; node events complete the instance.
    async fn observe(&mut self, event: ClusterEvent) -> anyhow::Result<()> {
        let recorded = match event {
            ClusterEvent::PodUnschedulable(pod) => {
                let event = DomainEvent::PodPending {
                    uid: pod.uid.clone(),
                    pod: pod.key(),
                    requests: pod.requests.to_quantity_map(),
                };
                self.pending.insert(pod.uid.clone(), *pod);
                event
            }
            ClusterEvent::PodBound { uid, pod, node } => {
                self.pending.remove(&uid);
                DomainEvent::PodBound {
                    uid,
                    node,
                    pod: Some(pod),
                }
            }
            ClusterEvent::PodDeleted { uid } => {
                self.pending.remove(&uid);
                DomainEvent::PodDeleted { uid }
            }
            ClusterEvent::NodeRegistered(node) => {
                let id = node.provider_id.rsplit('/').next().unwrap_or_default();
                let Some(member) = self.members.get_mut(id) else {
                    warn!(node = %node.name, "A node joined that no group launched.");
                    return Ok(());
                };
                member.node = Some(node.name.clone());
                let group = &self.groups[member.group];
                self.cluster
                    .label_node(&node.name, group.labels.clone(), group.taints.clone());
                DomainEvent::NodeClaimRegistered {
                    nodeclaim: member.claim.clone(),
                    node: node.name.clone(),
                }
            }
            ClusterEvent::NodeReady { provider_id, .. } => {
                let id = provider_id.rsplit('/').next().unwrap_or_default();
                let Some(member) = self.members.get(id) else {
                    return Ok(());
                };
                DomainEvent::NodeClaimInitialized {
                    nodeclaim: member.claim.clone(),
                }
            }
            ClusterEvent::NodeDeleted { .. } => return Ok(()),
        };
        self.journal.append(&recorded)?;
        Ok(())
    }

    /// One scan: drains move on, then scale-up, then (in a scan without one) scale-down.
    async fn scan(&mut self, now: Instant) -> anyhow::Result<()> {
        self.stats.scans += 1;
        for b in &mut self.backoff {
            if b.is_some_and(|(until, _)| until <= now) {
                // Keeps its length for the next failure to double.
                *b = b.map(|(_, length)| (now, length));
            }
        }
        self.drain_step(now).await?;
        let nodes = self.cluster.nodes().await;
        let mut existing: Vec<ExistingNode> =
            karpenter_core::provisioning::existing_nodes(nodes.clone(), &[], [], &[], &[]);
        for m in self.members.values().filter(|m| m.node.is_none()) {
            existing.push(upcoming_node(
                &m.claim,
                &m.instance,
                &self.groups[m.group],
                &self.daemonsets,
            ));
        }
        existing.sort_by(|a, b| a.name.cmp(&b.name));
        let pending: Vec<Pod> = self.pending.values().cloned().collect();
        let backed_off: Vec<bool> = self
            .backoff
            .iter()
            .map(|b| b.is_some_and(|(until, _)| until > now))
            .collect();
        let decided = scale_up(&ScaleUpInput {
            pending: &pending,
            groups: &self.groups,
            sizes: &self.sizes,
            backed_off: &backed_off,
            existing: existing.into_iter().map(Arc::new).collect(),
            daemonsets: &self.daemonsets,
            expander: self.expander,
            seed: self.stats.scans,
        });
        tracing::debug!(
            pending = pending.len(),
            waiting = decided.waiting,
            options = decided.options,
            helpless = decided.helpless.len(),
            "Scale-up looked."
        );
        if let Some(option) = decided.chosen {
            self.stats.scale_ups += 1;
            self.last_scale_up = Some(now);
            info!(
                group = %self.groups[option.group].name,
                nodes = option.claims.len(),
                pods = option.pods,
                "Scaling up."
            );
            for claim in &option.claims {
                if !self.launch(option.group, Some(claim), now).await? {
                    break;
                }
            }
            return Ok(());
        }
        self.scale_down_step(now, nodes).await
    }

    /// Launches one instance of `group` (for `planned`'s pods, or as a replacement); `false`
    /// when the cloud had no capacity (the group is backed off).
    async fn launch(
        &mut self,
        group: usize,
        planned: Option<&PlannedNodeClaim>,
        now: Instant,
    ) -> anyhow::Result<bool> {
        let g = &self.groups[group];
        self.launched += 1;
        let claim = format!("{}-{:05}", g.name, self.launched);
        let template = g.template(self.sizes[group]);
        let (requirements, pods, requests, options) = match planned {
            Some(p) => (
                p.requirements.clone(),
                p.pods.clone(),
                p.requests,
                p.instance_types.clone(),
            ),
            None => {
                let offering = g
                    .instance_type
                    .cheapest_offering(&template.requirements)
                    .cloned();
                let options = offering
                    .map(|o| InstanceTypeOption {
                        name: g.instance_type.name.as_str().into(),
                        price: o.price,
                        zone: o.zone.as_str().into(),
                        capacity_type: o.capacity_type,
                    })
                    .into_iter()
                    .collect();
                (
                    template.requirements.clone(),
                    Vec::new(),
                    karpenter_core::model::Resources::ZERO,
                    options,
                )
            }
        };
        self.journal
            .append(&DomainEvent::NodeClaimPlanned(Box::new(NodeClaimPlan {
                nodeclaim: claim.clone(),
                nodepool: g.name.clone(),
                round: self.stats.scans,
                pods,
                requests: requests.to_quantity_map(),
                instance_types: options.clone(),
                min_values_relaxed: false,
            })))?;
        let request = LaunchRequest {
            nodeclaim: claim.clone(),
            nodepool: g.name.clone(),
            client_token: claim.clone(),
            node_class: self.node_class.clone(),
            requirements,
            labels: g.labels.clone(),
            taints: g.taints.clone(),
            instance_types: options,
            overlaid: false,
        };
        match self.cloud.create(&request).await {
            Ok(instance) => {
                self.journal.append(&DomainEvent::NodeClaimLaunched {
                    nodeclaim: claim.clone(),
                    instance: Box::new(instance.clone()),
                })?;
                if planned.is_some() {
                    self.sizes[group] += 1;
                }
                self.members.insert(
                    instance.id.clone(),
                    Member {
                        group,
                        claim,
                        instance,
                        node: None,
                    },
                );
                Ok(true)
            }
            Err(error) => {
                self.launch_failed(group, claim, &error, now)?;
                Ok(false)
            }
        }
    }

    /// The cloud refused a launch: the NodeClaim ends, and the group is backed off (doubling
    /// each time, up to the maximum).
    fn launch_failed(
        &mut self,
        group: usize,
        claim: String,
        error: &karpenter_core::ports::CloudError,
        now: Instant,
    ) -> anyhow::Result<()> {
        self.stats.failed_launches += 1;
        let unavailable = match error {
            karpenter_core::ports::CloudError::InsufficientCapacity { offerings } => {
                offerings.clone()
            }
            _ => Vec::new(),
        };
        self.journal.append(&DomainEvent::LaunchFailed {
            nodeclaim: claim.clone(),
            reason: error.to_string(),
            unavailable,
        })?;
        self.journal.append(&DomainEvent::NodeClaimTerminated {
            nodeclaim: claim,
            reason: "launch failed".into(),
        })?;
        let length = self.backoff[group].map_or(self.settings.initial_backoff, |(_, l)| {
            (l * 2).min(self.settings.max_backoff)
        });
        self.backoff[group] = Some((now + length, length));
        warn!(group = %self.groups[group].name, %error, ?length, "Scale-up failed; the group is backed off.");
        Ok(())
    }

    /// Scale-down: unneeded nodes found every scan without a scale-up; removed once unneeded
    /// long enough, outside the cool-downs after a scale-up and after a failed removal.
    async fn scale_down_step(
        &mut self,
        now: Instant,
        nodes: Vec<karpenter_core::ports::NodeInfo>,
    ) -> anyhow::Result<()> {
        let view = self.cluster.disruption_view().await;
        let now_ms = self.journal.now_ms();
        let mut pods: BTreeMap<&str, Vec<Candidate>> = BTreeMap::new();
        for bound in &view.pods {
            let protected = bound.do_not_disrupt.as_deref().is_some_and(|value| {
                karpenter_core::model::drain::do_not_disrupt(value, bound.created_ms, now_ms)
                    .unwrap_or(true)
            });
            pods.entry(bound.node.as_str())
                .or_default()
                .push(Candidate {
                    pod: bound.pod.clone(),
                    do_not_disrupt: protected,
                    pdbs: bound.pdbs.clone(),
                });
        }
        let by_provider: BTreeMap<&str, &Member> = self
            .members
            .values()
            .map(|m| (m.instance.provider_id.as_str(), m))
            .collect();
        let facts: Vec<NodeFacts> = nodes
            .iter()
            .map(|n| {
                let member = by_provider.get(n.provider_id.as_str());
                NodeFacts {
                    node: Arc::new(
                        karpenter_core::provisioning::existing_nodes(
                            vec![n.clone()],
                            &[],
                            [],
                            &[],
                            &[],
                        )
                        .remove(0),
                    ),
                    group: member.map(|m| m.group),
                    pods: pods.remove(n.name.as_str()).unwrap_or_default(),
                    ready: n.ready,
                    deleting: n.unschedulable || self.drains.contains_key(&n.name),
                }
            })
            .collect();
        let cooling = self
            .last_scale_up
            .is_some_and(|at| now < at + self.settings.delay_after_add)
            || self
                .last_failure
                .is_some_and(|at| now < at + self.settings.delay_after_failure);
        let draining = self.drains.values().filter(|d| d.reason != "empty").count();
        let removals = self.scale_down.scan(
            &ScaleDownInput {
                nodes: &facts,
                groups: &self.groups,
                sizes: &self.sizes,
                pdbs: &view.pdbs,
                daemonsets: &self.daemonsets,
                draining,
                now_ms,
                cooling,
            },
            &self.settings,
        );
        tracing::debug!(
            nodes = facts.len(),
            unneeded = self.scale_down.unneeded(),
            removals = removals.len(),
            cooling,
            draining,
            "Scale-down looked."
        );
        for removal in removals {
            let Some(member) = self
                .members
                .values()
                .find(|m| m.node.as_deref() == Some(removal.node.as_str()))
                .cloned()
            else {
                continue;
            };
            let reason = if removal.empty {
                "empty"
            } else {
                "underutilized"
            };
            info!(node = %removal.node, reason, utilization = removal.utilization, "Scaling down.");
            self.sizes[member.group] = self.sizes[member.group].saturating_sub(1);
            self.stats.removed += 1;
            self.start_drain(&removal.node, &member, reason, false, now)
                .await?;
        }
        Ok(())
    }

    /// Cordons `node` and starts evicting its pods.
    async fn start_drain(
        &mut self,
        node: &str,
        member: &Member,
        reason: &'static str,
        replace: bool,
        now: Instant,
    ) -> anyhow::Result<()> {
        if self.drains.contains_key(node) {
            return Ok(());
        }
        self.journal.append(&DomainEvent::NodeClaimDraining {
            nodeclaim: member.claim.clone(),
            reason: reason.into(),
        })?;
        self.cluster.cordon(node).await?;
        self.drains.insert(
            node.to_owned(),
            Drain {
                instance_id: member.instance.id.clone(),
                started: now,
                reason,
                replace,
            },
        );
        self.drain_step(now).await
    }

    /// Evicts what the draining nodes still run; a drained node is deleted with its
    /// instance; one whose pods could not all be evicted in time is given back.
    async fn drain_step(&mut self, now: Instant) -> anyhow::Result<()> {
        if self.drains.is_empty() {
            return Ok(());
        }
        let view = self.cluster.disruption_view().await;
        let nodes: Vec<String> = self.drains.keys().cloned().collect();
        for node in nodes {
            let on_node: Vec<&str> = view
                .pods
                .iter()
                .filter(|p| p.node == node)
                .map(|p| p.pod.uid.as_str())
                .collect();
            let mut left = 0;
            for uid in on_node {
                if self.cluster.evict(uid).await.is_err() {
                    left += 1;
                }
            }
            let Some(drain) = self.drains.get(&node).cloned() else {
                continue;
            };
            if left == 0 {
                self.drains.remove(&node);
                let group = self.members.get(&drain.instance_id).map(|m| m.group);
                self.terminate(&node, &drain.instance_id, drain.reason)
                    .await?;
                if drain.replace
                    && let Some(group) = group
                {
                    self.launch(group, None, now).await?;
                }
            } else if now >= drain.started + self.settings.max_pod_eviction_time {
                warn!(%node, left, "Scale-down failed: pods could not be evicted; the node stays.");
                self.drains.remove(&node);
                self.cluster.uncordon(&node);
                if let Some(m) = self.members.get(&drain.instance_id)
                    && !drain.replace
                {
                    self.sizes[m.group] += 1;
                }
                self.last_failure = Some(now);
            }
        }
        Ok(())
    }

    /// Deletes a node and its instance.
    async fn terminate(&mut self, node: &str, id: &str, reason: &str) -> anyhow::Result<()> {
        let Some(member) = self.members.get(id).cloned() else {
            return Ok(());
        };
        self.journal.append(&DomainEvent::NodeClaimTerminating {
            nodeclaim: member.claim.clone(),
            reason: reason.into(),
        })?;
        self.cluster.delete_node(node).await?;
        self.cloud
            .delete(id)
            .await
            .with_context(|| format!("cannot terminate {id}"))?;
        self.journal.append(&DomainEvent::NodeClaimTerminated {
            nodeclaim: member.claim.clone(),
            reason: reason.into(),
        })?;
        self.members.remove(id);
        Ok(())
    }

    /// The cloud took an interrupted instance back: its node and pods are gone, and the Auto
    /// Scaling group launches another.
    async fn reclaimed(&mut self, id: &str) -> anyhow::Result<()> {
        let Some(member) = self.members.get(id).cloned() else {
            return Ok(());
        };
        let _ = self.cloud.reclaim(id);
        if let Some(node) = &member.node {
            self.drains.remove(node);
            self.cluster.delete_node(node).await?;
        }
        self.journal.append(&DomainEvent::NodeClaimTerminated {
            nodeclaim: member.claim.clone(),
            reason: "interrupted".into(),
        })?;
        self.members.remove(id);
        self.launch(member.group, None, Instant::now()).await?;
        Ok(())
    }
}
