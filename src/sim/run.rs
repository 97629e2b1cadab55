//! Runs a scenario: the real actors against the simulated cluster and a cloud, then a
//! [`Report`]. With the in-memory cloud the tokio runtime starts paused, so its clock jumps
//! ahead whenever every task waits and a simulated hour takes seconds; with a real EC2 API
//! (`CloudChoice::Aws`) it runs in real time.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use karpenter_actors::actor::Settings;
use karpenter_actors::actor::messages::{InterruptionStatus, SchedulerStatus};
use karpenter_actors::handles::{CALL_TIMEOUT, NodeClaimHandle, System};
use karpenter_core::events::DomainEvent;
use karpenter_core::model::{ResourceName, total_price};
use karpenter_core::ports::{CloudProvider, ClusterEvent, InstanceState, InterruptionQueue};
use karpenter_journal::{Clock, Journal};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{info, warn};

use super::backend::Backend;
use super::cluster::{Pdb, SimCluster};
use super::scenario::{Action, Scenario, ScenarioFile};
use super::steps::Steps;
use crate::progress::{Progress, StatusLine};
use crate::report::run::{BufferLine, NodeGroup, Sample, percent, percentile};
use crate::simcloud::{InstanceBooted, SimCloud};

mod resume;
use resume::{Resume, resume_point};

pub use crate::report::run::{Report, hms, print_report};

/// Simulated time starts at 2026-01-01T00:00:00Z, so journals of two runs line up.
pub const SIM_EPOCH_MS: i64 = 1_767_225_600_000;

/// Journal time for the simulation: the epoch plus tokio's (virtual) elapsed time since the
/// timeline started, plus the simulated time a resumed run had already covered.
#[derive(Debug)]
pub struct SimClock {
    start: std::sync::Mutex<Instant>,
    offset: Duration,
}

impl SimClock {
    /// A clock whose timeline starts now, `offset` into the scenario.
    pub fn new(offset: Duration) -> Self {
        SimClock {
            start: std::sync::Mutex::new(Instant::now()),
            offset,
        }
    }

    /// Starts the timeline again from now (nothing is journaled before it starts), and
    /// returns when.
    pub fn restart(&self) -> Instant {
        let now = Instant::now();
        *self.start.lock().unwrap_or_else(|e| e.into_inner()) = now;
        now
    }
}

impl Clock for SimClock {
    fn now_ms(&self) -> i64 {
        let start = *self.start.lock().unwrap_or_else(|e| e.into_inner());
        SIM_EPOCH_MS + (self.offset + (Instant::now() - start)).as_millis() as i64
    }
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Where the journal goes.
    pub journal_dir: std::path::PathBuf,
    /// Progress shown while the run goes.
    pub progress: Progress,
    /// Actor timing.
    pub settings: Settings,
    /// Prefix for actor names (unique per run in one process).
    pub scope: String,
    /// Serve the admin endpoint during the run.
    pub admin: Option<crate::admin::AdminOptions>,
    /// Simulated seconds per real second (`None`: as fast as possible).
    pub pace: Option<f64>,
    /// Continue the journal in `journal_dir` from its last moment instead of starting anew.
    pub resume: bool,
    /// Which cloud the nodes come from.
    pub cloud: CloudChoice,
    /// Garbage collection of leaked instances and orphaned NodeClaims.
    pub gc: karpenter_actors::actor::messages::GcSettings,
    /// Samples also record the journal's size on disk and this process's resident memory.
    pub measure: bool,
}

/// The cloud behind a simulation.
#[derive(Debug, Clone, Default)]
pub enum CloudChoice {
    /// The in-memory EC2 (virtual time: an hour takes seconds).
    #[default]
    Sim,
    /// A real EC2 API, AWS or an emulator (real time: the scenario takes as long as it says).
    Aws(Box<crate::system::aws::AwsSetup>),
}

/// The scenario's NodeOverlays, in force from the start; an error when it has some and the
/// `NodeOverlay` gate is off (as upstream, overlays are ignored then, which a scenario
/// written for them would not expect).
fn scenario_overlays(
    scenario: &Scenario,
    settings: &Settings,
) -> anyhow::Result<Arc<karpenter_actors::overlays::OverlayStore>> {
    let store = Arc::new(karpenter_actors::overlays::OverlayStore::default());
    if scenario.overlays.is_empty() {
        return Ok(store);
    }
    anyhow::ensure!(
        settings.node_overlay,
        "the scenario has {} NodeOverlay(s), which apply only with the NodeOverlay feature gate on (off by default, as upstream): add --feature-gates NodeOverlay=true or FEATURE_GATES=NodeOverlay=true",
        scenario.overlays.len()
    );
    let overlays = scenario.overlays.iter().filter_map(|o| o.overlay());
    store.set(karpenter_core::model::overlay::Overlays::new(
        overlays.collect(),
    ));
    Ok(store)
}

/// Runs `scenario` to its end and reports.
pub fn run(scenario: &Scenario, options: &RunOptions) -> anyhow::Result<Report> {
    // Virtual time only works when nothing waits on real I/O: a real cloud runs in real time.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(matches!(options.cloud, CloudChoice::Sim))
        .build()
        .context("cannot start the simulation runtime")?;
    runtime.block_on(run_async(scenario, options))
}

/// Routes an instance or node event to the NodeClaim that owns it.
fn nodeclaim_actor(
    system: &System,
    cloud: &dyn Backend,
    provider_id: &str,
) -> Option<NodeClaimHandle> {
    let instance_id = provider_id.rsplit('/').next()?;
    let owner = cloud.owner_of(instance_id)?;
    system.nodeclaim(&owner)
}

/// The cloud a run launches in, and what the run needs of it besides the port.
struct CloudSetup {
    cloud: Arc<dyn Backend>,
    /// The EC2 backend, whose instances the run terminates at its end.
    aws: Option<Arc<super::aws::AwsBackend>>,
    interruption_queue: Option<Arc<dyn InterruptionQueue>>,
}

async fn connect_cloud(
    scenario: &Scenario,
    options: &RunOptions,
    offset: Duration,
    booted_tx: mpsc::UnboundedSender<InstanceBooted>,
    metrics: &Arc<karpenter_actors::metrics::Metrics>,
) -> anyhow::Result<CloudSetup> {
    let file = &scenario.file;
    Ok(match &options.cloud {
        CloudChoice::Sim => {
            let types = crate::system::catalog_instance_types(&file.region)?;
            let shortages = file
                .shortages
                .iter()
                .map(|s| s.to_cloud())
                .collect::<anyhow::Result<Vec<_>>>()?;
            // As upstream's gate: off, reservations are not looked up, so nothing launches
            // into them.
            let reservations = match options.settings.reserved_capacity {
                true => (file.reservations.iter().enumerate())
                    .map(|(i, r)| r.to_cloud(i, &types))
                    .collect::<anyhow::Result<Vec<_>>>()?,
                false => Vec::new(),
            };
            // A resumed run's cloud is made `offset` into the scenario.
            let reservations = (reservations.into_iter())
                .map(|mut r| {
                    r.ends_after = r.ends_after.map(|end| end.saturating_sub(offset));
                    r
                })
                .collect();
            CloudSetup {
                cloud: {
                    let offset_ms = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
                    let cloud = SimCloud::new(types, shortages, file.boot_delay, booted_tx)
                        .with_epoch(SIM_EPOCH_MS + offset_ms)
                        .with_price_table(crate::system::catalog_price_table(&file.region)?)
                        .with_reservations(reservations);
                    for class in &scenario.nodeclasses {
                        cloud.set_node_class(class);
                    }
                    Arc::new(cloud)
                },
                aws: None,
                interruption_queue: None,
            }
        }
        CloudChoice::Aws(aws) => {
            if !file.reservations.is_empty() && options.settings.reserved_capacity {
                anyhow::bail!(
                    "reservations: the scenario's capacity reservations are held by the in-memory cloud only; run it without --cloud aws, or select EC2's own reservations with the EC2NodeClass's capacityReservationSelectorTerms"
                );
            }
            let (backend, queue) =
                super::aws::connect(aws, scenario, booted_tx, file.boot_delay, metrics).await?;
            CloudSetup {
                cloud: backend.clone(),
                aws: Some(backend),
                interruption_queue: queue,
            }
        }
    })
}

/// Puts the scenario's workloads into the cluster as they stand `offset` into the timeline:
/// daemonsets, deployments (with their PDBs, scaled as the timeline had them by then) and
/// jobs still running.
pub(super) fn seed_cluster(
    file: &ScenarioFile,
    cluster: &SimCluster,
    offset: Duration,
) -> anyhow::Result<()> {
    for ds in &file.daemonsets {
        cluster.add_daemonset(ds.pod()?);
    }
    for d in &file.deployments {
        if let Some(max_unavailable) = d.max_unavailable {
            cluster.add_pdb(Pdb {
                name: d.name.clone(),
                selector: d.labels.clone(),
                max_unavailable,
            });
        }
        // A resumed run starts from the replicas the timeline had set by then.
        let replicas = file
            .timeline
            .iter()
            .filter(|s| s.at <= offset)
            .filter_map(|s| match &s.action {
                Action::Scale {
                    deployment,
                    replicas,
                } if deployment == &d.name => Some((s.at, *replicas)),
                _ => None,
            })
            .max_by_key(|(at, _)| *at)
            .map_or(d.replicas, |(_, r)| r);
        cluster.scale(&d.name, Some(&d.pod()?), replicas);
    }
    let mut restored_jobs = BTreeSet::new();
    for step in file.timeline.iter().filter(|s| s.at <= offset) {
        if let Action::Job(job) = &step.action {
            let run_for = job.run_for.unwrap_or_default();
            let ends = step.at + run_for;
            if ends > offset {
                // None of its pods can have finished yet.
                cluster.add_job(&job.name, &job.pod()?, job.replicas, ends - offset);
            } else if restored_jobs.insert(job.name.as_str()) {
                // Pods a resumed journal still had past the job's time waited pending or
                // started late (finished ones were deleted); they run it all again.
                let known = cluster.known_pods(&job.name);
                if known > 0 {
                    cluster.add_job(&job.name, &job.pod()?, known, run_for);
                }
            }
        }
    }
    Ok(())
}

/// What the timeline's manifests and image releases had made of the NodePools and the cloud
/// `offset` into it (for a resumed run): the NodePools as last applied, the node classes
/// applied, the images released. Returns the NodePools.
async fn catch_up(
    scenario: &Scenario,
    cloud: &dyn Backend,
    offset: Duration,
) -> anyhow::Result<Vec<karpenter_core::api::NodePool>> {
    let mut nodepools = scenario.nodepools.clone();
    let mut steps: Vec<_> = scenario
        .file
        .timeline
        .iter()
        .filter(|s| s.at <= offset)
        .collect();
    steps.sort_by_key(|s| s.at);
    for step in steps {
        match &step.action {
            Action::Apply(apply) => {
                for class in &apply.nodeclasses {
                    cloud.apply_node_class(class);
                }
                for pool in &apply.nodepools {
                    nodepools.retain(|p| p.metadata.name != pool.metadata.name);
                    nodepools.push(pool.clone());
                }
            }
            Action::AmiRelease { node_class } => {
                cloud.release_image(node_class.as_deref()).await?;
            }
            _ => {}
        }
    }
    Ok(nodepools)
}

async fn run_async(scenario: &Scenario, options: &RunOptions) -> anyhow::Result<Report> {
    let file = &scenario.file;
    let resume_from = if options.resume {
        resume_point(&options.journal_dir)?
    } else {
        None
    };
    if options.resume && resume_from.is_none() {
        eprintln!(
            "note: the journal in {} holds no event (its run stopped before recording one); starting the scenario from the beginning",
            options.journal_dir.display()
        );
    }
    let resuming = resume_from.is_some();
    let offset = resume_from.unwrap_or(Duration::ZERO);
    anyhow::ensure!(
        offset < file.duration,
        "the journal already covers the whole scenario ({offset:?} of {:?}); nothing to resume",
        file.duration
    );
    let clock = Arc::new(SimClock::new(offset));
    let journal = Journal::<DomainEvent>::open_with_clock(&options.journal_dir, clock.clone())
        .with_context(|| {
            format!(
                "cannot open the journal in {}",
                options.journal_dir.display()
            )
        })?;
    if !resuming {
        // What ran, beside what it did: `journal whatif` replays it under other manifests.
        let path = options.journal_dir.join(super::whatif::SCENARIO_FILE);
        std::fs::write(&path, &scenario.source)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    let (booted_tx, booted_rx) = mpsc::unbounded_channel::<InstanceBooted>();
    let metrics = Arc::new(karpenter_actors::metrics::Metrics::new());
    let setup = connect_cloud(scenario, options, offset, booted_tx, &metrics).await?;
    // The timeline starts once the cloud is connected (a real one has answered its catalogs).
    let start = clock.restart();
    let (events_tx, events_rx) = mpsc::unbounded_channel::<ClusterEvent>();
    let cloud = setup.cloud.clone();
    let offset_ms = i64::try_from(offset.as_millis()).unwrap_or(i64::MAX);
    let cluster =
        Arc::new(SimCluster::new(events_tx, file.ready_delay).with_epoch(SIM_EPOCH_MS + offset_ms));
    let resumed = if resuming {
        Some(
            journal
                .replay::<karpenter_core::events::ClusterView>(karpenter_journal::Until::End)?
                .state,
        )
    } else {
        None
    };
    if let Some(view) = &resumed {
        cluster.reuse_identities(&view.names);
    }
    seed_cluster(file, &cluster, offset)?;
    let templates = (file.pod_templates.iter())
        .map(|t| Ok((t.name.clone(), t.pod()?)))
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    cluster.set_buffers(scenario.buffers.clone(), templates);
    let forgotten = cluster.forget_unused_identities();
    let nodepools = catch_up(scenario, cloud.as_ref(), offset).await?;
    let catalogs = resumed.as_ref().map_or_else(Default::default, |v| {
        crate::system::recent_catalogs(v, journal.now_ms())
    });
    let overlays = scenario_overlays(scenario, &options.settings)?;
    let started = crate::system::start(crate::system::Start {
        journal,
        overlays,
        cloud: cloud.clone() as Arc<dyn CloudProvider>,
        cluster: cluster.clone(),
        metrics: metrics.clone(),
        settings: options.settings,
        scope: options.scope.clone(),
        nodepools: nodepools.clone(),
        last_round: resumed.as_ref().map_or(0, |v| v.last_round),
        catalogs,
        interruption_queue: setup.interruption_queue.clone(),
        // A resumed run adopts its NodeClaims first: until then their instances would look
        // leaked.
        gc: (!resuming).then_some(options.gc),
        disruption: (!resuming).then(Default::default),
        admin: options.admin.clone(),
        shipping: None,
    })
    .await?;
    if let Some(addr) = started.admin_addr() {
        eprintln!(
            "admin page: http://{addr}/ (JSON at /nodeclaims /nodepools /scheduler /disruption /journal /metrics)"
        );
    }
    let system = started.system.clone();
    let ctx = system.context().clone();
    if options.settings.capacity_buffer && !scenario.buffers.is_empty() {
        system.scheduler().buffers_changed()?;
    }
    if let Some(view) = &resumed {
        // Adopting an instance needs its type: read each node class's catalog first (EC2's
        // is not read until a NodePool asks).
        let classes: BTreeSet<&str> = nodepools
            .iter()
            .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
            .collect();
        for class in classes {
            cloud.instance_types(class).await.with_context(|| {
                format!("cannot read the instance types of node class {class} to resume")
            })?;
        }
        Resume {
            view,
            ctx: &ctx,
            cloud: cloud.as_ref(),
            cluster: &cluster,
            system: &system,
            nodepools: &nodepools,
        }
        .run()
        .await?;
        // The cluster outlived the process that was killed: its pods run where they ran.
        let rebound = cluster.rebind(&view.bound);
        info!(
            rebound,
            forgotten, "Pods back on their nodes; pods the workloads no longer have deleted."
        );
        system.start_gc(options.gc)?;
        system.start_disruption(crate::system::disruption_start(view))?;
    }
    let run = Drive {
        file,
        options,
        cloud: cloud.as_ref(),
        cluster: &cluster,
        system: &system,
        nodepools: &nodepools,
        start,
        offset,
        prices: std::cell::RefCell::new(super::prices::LaunchPrices::new(
            !scenario.overlays.is_empty(),
        )),
    };
    let samples = run.drive(booted_rx, events_rx).await?;
    let ended = run.ended().await;
    started.stop().await?;
    if let Some(backend) = &setup.aws {
        let terminated = backend.terminate_all().await;
        info!(
            instances = terminated.len(),
            "Terminated this run's instances (its cluster is gone)."
        );
    }
    ctx.journal.flush()?;
    let mut report = report(file, &cluster, cloud.as_ref(), ended, samples, &ctx.journal)?;
    report.cloud_retries = metrics.cloud_attempts();
    info!(
        cost_per_hour = report.cost_per_hour,
        nodes = report.node_count,
        "Simulation finished."
    );
    Ok(report)
}

/// A running simulation: the scenario's timeline played against the system on the virtual
/// clock, the simulated cluster ticking, instances booting into nodes, cluster events routed
/// to the actors.
struct Drive<'a> {
    file: &'a ScenarioFile,
    options: &'a RunOptions,
    cloud: &'a dyn Backend,
    cluster: &'a SimCluster,
    system: &'a System,
    /// The NodePools the run starts with.
    nodepools: &'a [karpenter_core::api::NodePool],
    /// When the run started (virtual clock), and how far into the timeline that was.
    start: Instant,
    offset: Duration,
    /// What instances are paid at (overlays change it).
    prices: std::cell::RefCell<super::prices::LaunchPrices>,
}

/// How often the fleet is sampled for the report.
const SAMPLE_EVERY: Duration = Duration::from_secs(60);
/// How often (simulated time) the live status line is brought up to date.
const LIVE_EVERY: Duration = Duration::from_secs(10);

/// What the system said as the run ended.
struct Ended {
    status: SchedulerStatus,
    interruptions: InterruptionStatus,
    failures: Vec<String>,
    running: Vec<karpenter_core::ports::Instance>,
    /// Instances running with no NodeClaim.
    leaked: usize,
    /// The disruption controller, if it ran.
    disruption: Option<karpenter_actors::actor::messages::DisruptionStatus>,
    /// A round from scratch for the pods running.
    from_scratch: Option<crate::report::run::FromScratch>,
}

impl Drive<'_> {
    /// The scenario's Capacity Blocks that expire during the run, and when (virtual clock),
    /// while the `ReservedCapacity` gate is on.
    fn expiring_blocks(&self) -> Vec<(Instant, String)> {
        if !self.options.settings.reserved_capacity {
            return Vec::new();
        }
        let expiring = self
            .file
            .reservations
            .iter()
            .enumerate()
            .filter_map(|(i, r)| {
                let at = r
                    .ends_after?
                    .saturating_sub(crate::simcloud::CAPACITY_BLOCK_EXPIRING);
                (at >= self.offset).then(|| (self.start + (at - self.offset), r.id(i)))
            });
        expiring.collect()
    }

    /// Plays the timeline until the scenario's end.
    async fn drive(
        &self,
        mut booted_rx: mpsc::UnboundedReceiver<InstanceBooted>,
        mut events_rx: mpsc::UnboundedReceiver<ClusterEvent>,
    ) -> anyhow::Result<Vec<Sample>> {
        let (start, offset, cloud) = (self.start, self.offset, self.cloud);
        let real_start = std::time::Instant::now();
        let mut timeline: Vec<_> = self
            .file
            .timeline
            .iter()
            .filter(|s| s.at > offset)
            .cloned()
            .collect();
        timeline.sort_by_key(|s| s.at);
        let mut timeline = timeline.into_iter().peekable();
        let mut steps = Steps {
            cloud,
            cluster: self.cluster,
            system: self.system,
            reclaims: Vec::new(),
            pools: self
                .nodepools
                .iter()
                .map(|p| (p.metadata.name.clone().unwrap_or_default(), p.clone()))
                .collect(),
        };
        let mut expiring = self.expiring_blocks();
        let mut samples = Vec::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let end = start + (self.file.duration - offset);
        let live =
            (self.options.progress == Progress::Live).then(|| StatusLine::show(self.file.duration));
        let progress_every = match self.options.progress {
            Progress::Off => None,
            Progress::Lines(every) => Some(every),
            Progress::Live => Some(LIVE_EVERY),
        };
        // The status line shows from the start; plain lines after the first interval.
        let mut next_progress = match self.options.progress {
            Progress::Live => Some(start),
            _ => progress_every.map(|p| start + p),
        };
        let mut next_sample = start;
        loop {
            let now = Instant::now();
            if now >= next_sample || now >= end {
                samples.push(self.sample(now).await);
                next_sample += SAMPLE_EVERY;
            }
            if now >= end {
                return Ok(samples);
            }
            while let Some(step) = timeline.next_if(|s| start + (s.at - offset) <= now) {
                steps.apply(&step.action, now).await?;
            }
            for (at, id) in expiring.extract_if(.., |(at, _)| *at <= now) {
                steps.capacity_block_expiring(&id, at).await?;
            }
            for (_, instance_id) in steps.reclaims.extract_if(.., |(at, _)| *at <= now) {
                // The cloud takes the instance back; the NodeClaim hears its node is gone.
                if let Some(instance) = cloud.reclaim(&instance_id).await
                    && let Some(actor) = self.system.nodeclaim(&instance.nodeclaim)
                {
                    let _ = actor.node_gone("instance reclaimed after interruption".into());
                }
            }
            if let Some(at) = next_progress
                && now >= at
            {
                self.progress(now, live.as_ref()).await;
                next_progress = progress_every.map(|p| at + p);
            }
            tokio::select! {
                _ = tick.tick() => self.cluster.tick(),
                Some(booted) = booted_rx.recv() => {
                    if booted.instance.state == InstanceState::Running && cloud.get(&booted.instance.id).await.is_ok_and(|i| i.state == InstanceState::Running) {
                        let overlays = &self.system.context().overlays;
                        let it = overlays.as_applied(&booted.instance.nodepool, &booted.instance_type);
                        self.cluster.register(&booted.instance, &it);
                    }
                }
                Some(event) = events_rx.recv() => route(event, cloud, self.system),
            }
            if let Some(pace) = self.options.pace {
                // Hold the virtual clock back to `pace` × real time, in short sleeps so the
                // admin endpoint's questions still get answered.
                let target = real_start + (Instant::now() - start).div_f64(pace);
                let real_now = std::time::Instant::now();
                if target > real_now {
                    std::thread::sleep((target - real_now).min(Duration::from_millis(20)));
                }
            }
        }
    }

    /// The fleet and the pods now.
    async fn sample(&self, now: Instant) -> Sample {
        let (requested, allocatable) = self.cluster.utilisation();
        Sample {
            at_seconds: (self.offset + (now - self.start)).as_secs(),
            cost_per_hour: self.cost_per_hour().await,
            nodes: self.cluster.node_count(),
            cpu_utilisation: percent(&requested, &allocatable, ResourceName::Cpu),
            pods_pending: self.cluster.pending_count(),
            journal_bytes: self
                .options
                .measure
                .then(|| dir_bytes(&self.options.journal_dir)),
            rss_bytes: self
                .options
                .measure
                .then(crate::system::host::resident_bytes)
                .flatten(),
        }
    }

    /// What the running instances cost, in $/h.
    async fn cost_per_hour(&self) -> f64 {
        total_price(self.running().await.iter().map(|i| i.price))
    }

    /// The running instances, each at the price it is paid at.
    async fn running(&self) -> Vec<karpenter_core::ports::Instance> {
        let mut running = self.cloud.running().await;
        let mut prices = self.prices.borrow_mut();
        if let Err(error) = prices.catch_up(&self.system.context().journal) {
            warn!(%error, "Reading launch prices from the journal failed; the cloud's are shown.");
        }
        for instance in &mut running {
            instance.price = prices.price(instance);
        }
        running
    }

    /// Where the run is: on the live status line, or as a line on stderr.
    async fn progress(&self, now: Instant, live: Option<&StatusLine>) {
        let status: SchedulerStatus = self
            .system
            .scheduler()
            .status(CALL_TIMEOUT)
            .await
            .unwrap_or_default();
        let cost = self.cost_per_hour().await;
        let at = self.offset + (now - self.start);
        let (pending, bound, nodes) = (
            self.cluster.pending_count(),
            self.cluster.bound_count(),
            self.cluster.node_count(),
        );
        match live {
            // Short enough to fit beside the bar on an 80-column terminal.
            Some(line) => line.update(
                at,
                hms(at),
                format!(
                    "{pending} pending, {bound} bound, {nodes} nodes, ${cost:.2}/h, {} rounds",
                    status.rounds
                ),
            ),
            None => eprintln!(
                "t={} pending={pending} nominated={} bound={bound} nodes={nodes} ${cost:.2}/h rounds={}",
                hms(at),
                status.nominated,
                status.rounds
            ),
        }
    }

    /// One scheduling round from scratch for the pods running now: the scheduler's NodePools
    /// and instance types, no existing node. `None` when the scheduler does not answer.
    async fn round_from_scratch(&self) -> Option<crate::report::run::FromScratch> {
        use karpenter_core::ports::Cluster as _;
        let base = match self.system.scheduler().next_round(CALL_TIMEOUT).await {
            Ok(base) => base,
            Err(error) => {
                warn!(%error, "The scheduler did not give its round; no from-scratch comparison.");
                return None;
            }
        };
        let view = self.cluster.disruption_view().await;
        let mut input = base.input;
        input.pods = view
            .pods
            .into_iter()
            .filter(|p| p.reschedulable)
            .map(|p| p.pod)
            .collect();
        input.existing.clear();
        for pool in &mut input.nodepools {
            pool.usage = karpenter_core::model::Resources::ZERO;
            pool.node_count = 0;
        }
        // The fleet's own reserved instances are not there either.
        let mut in_use = std::collections::BTreeMap::new();
        for instance in self.cloud.running().await {
            if let Some(r) = instance.reservation {
                *in_use.entry(r.id).or_insert(0) += 1;
            }
        }
        karpenter_core::scheduling::credit_reservations(&mut input, &in_use);
        // Planned whole, a NodeClaim past a reservation's count is bought otherwise.
        let mode = karpenter_core::scheduling::ReservedOfferingMode::Fallback;
        let result = karpenter_core::scheduling::solve_in(&input, None, mode);
        Some(crate::report::run::FromScratch {
            pods: input.pods.len(),
            nodes: result.new_claims.len(),
            cost_per_hour: result.new_capacity_cost(),
            bound: karpenter_core::scheduling::bound::cost_lower_bound(&input).ok(),
        })
    }

    /// What the system says as the run ends (before it stops).
    async fn ended(&self) -> Ended {
        let system = self.system;
        let status: SchedulerStatus = system
            .scheduler()
            .status(CALL_TIMEOUT)
            .await
            .unwrap_or_default();
        let interruptions: InterruptionStatus = system
            .interruption()
            .status(CALL_TIMEOUT)
            .await
            .unwrap_or_default();
        let failures = system.failures().await.unwrap_or_default();
        let running = self.running().await;
        let live: Vec<String> = running
            .iter()
            .filter(|i| system.nodeclaim(&i.nodeclaim).is_none())
            .map(|i| i.id.clone())
            .collect();
        if !live.is_empty() {
            warn!(instances = ?live, "Instances running without a NodeClaim.");
        }
        let from_scratch = self.round_from_scratch().await;
        Ended {
            from_scratch,
            status,
            interruptions,
            failures,
            running,
            leaked: live.len(),
            disruption: system.disruption().await.unwrap_or_default(),
        }
    }
}

/// The run's report: nodes by type and capacity type, cost, utilisation, pod latency,
/// what the system did, disruptions, and the fleet over time.
fn report(
    file: &ScenarioFile,
    cluster: &SimCluster,
    cloud: &dyn Backend,
    ended: Ended,
    samples: Vec<Sample>,
    journal: &Journal<DomainEvent>,
) -> anyhow::Result<Report> {
    let running = &ended.running;
    let mut groups: BTreeMap<(String, String), NodeGroup> = BTreeMap::new();
    for i in running {
        let key = (i.instance_type.clone(), i.capacity_type.as_str().to_owned());
        let group = groups.entry(key).or_insert_with(|| NodeGroup {
            instance_type: i.instance_type.clone(),
            capacity_type: i.capacity_type.as_str().to_owned(),
            count: 0,
            cost_per_hour: 0.0,
        });
        group.count += 1;
        group.cost_per_hour += i.price;
    }
    let (requested, allocatable) = cluster.utilisation();
    let stats = cluster.stats();
    let mut latencies = stats.pending_latencies.clone();
    latencies.sort_by(f64::total_cmp);
    let (launched, terminated) = cloud.counts();
    let (mut disruptions, journal_last_seq) = crate::report::run::journaled(journal)?;
    // The disruption controller's, about nodes (a drain's refused evictions are about pods).
    disruptions.blocked_events = cluster
        .recorded_events()
        .iter()
        .filter(|(object, reason, _)| reason == "DisruptionBlocked" && !object.starts_with("Pod/"))
        .count();
    disruptions.repair_blocked_events = cluster
        .recorded_events()
        .iter()
        .filter(|(object, reason, _)| reason == "NodeRepairBlocked" && object.starts_with("Node/"))
        .count();
    disruptions.protected_evictions = stats.protected_evictions;
    disruptions.pods_lost_with_node = stats.lost_with_node;
    if let Some(status) = &ended.disruption {
        disruptions.passes = status.passes;
        disruptions.simulations = status.simulations;
    }
    let held: std::collections::BTreeSet<&str> = ended
        .disruption
        .iter()
        .flat_map(|s| &s.commands)
        .flat_map(|c| c.candidates.iter().filter_map(|m| m.node.as_deref()))
        .collect();
    disruptions.stale_marks = cluster
        .marked_nodes()
        .iter()
        .filter(|n| !held.contains(n.as_str()))
        .count();
    Ok(Report {
        scenario: file.name.clone(),
        simulated_seconds: file.duration.as_secs(),
        nodes: groups.into_values().collect(),
        node_count: running.len(),
        cost_per_hour: total_price(running.iter().map(|i| i.price)),
        cpu_utilisation: percent(&requested, &allocatable, ResourceName::Cpu),
        memory_utilisation: percent(&requested, &allocatable, ResourceName::Memory),
        pending_p50: percentile(&latencies, 50.0),
        pending_p99: percentile(&latencies, 99.0),
        pods_bound: cluster.bound_count(),
        pods_pending: cluster.pending_count(),
        unschedulable: ended.status.unschedulable,
        nodeclaims_launched: launched,
        nodeclaims_terminated: terminated,
        interruptions: ended.interruptions,
        evictions: (stats.evictions, stats.pdb_blocks),
        rounds: ended.status.rounds,
        disruptions,
        samples,
        leaked_instances: ended.leaked,
        actor_failures: ended.failures,
        journal_last_seq,
        from_scratch: ended.from_scratch,
        cloud_retries: (0, 0),
        buffers: cluster
            .buffer_statuses()
            .into_iter()
            .map(|(buffer, s)| BufferLine {
                buffer,
                replicas: s.resolved.replicas,
                ready: (
                    s.resolved.ready.status,
                    s.resolved.ready.reason.to_owned(),
                    s.resolved.ready.message,
                ),
                provisioning: s
                    .provisioning
                    .map(|p| (p.status, p.reason.to_owned(), p.message)),
            })
            .collect(),
    })
}

fn route(event: ClusterEvent, cloud: &dyn Backend, system: &System) {
    let delivered = match event {
        ClusterEvent::PodUnschedulable(pod) => system
            .scheduler()
            .pod_pending(*pod)
            .map_err(|e| e.to_string()),
        ClusterEvent::PodBound { uid, pod, node } => system
            .scheduler()
            .pod_bound(uid, pod, node)
            .map_err(|e| e.to_string()),
        ClusterEvent::PodDeleted { uid } => system
            .scheduler()
            .pod_deleted(uid)
            .map_err(|e| e.to_string()),
        ClusterEvent::NodeRegistered(node) => {
            match nodeclaim_actor(system, cloud, &node.provider_id) {
                Some(actor) => actor
                    .node_registered(node.name.clone())
                    .map_err(|e| e.to_string()),
                None => Err(format!(
                    "node {} registered but no NodeClaim owns it",
                    node.name
                )),
            }
        }
        ClusterEvent::NodeReady { name, provider_id } => {
            match nodeclaim_actor(system, cloud, &provider_id) {
                Some(actor) => actor.node_ready().map_err(|e| e.to_string()),
                None => Err(format!("node {name} became Ready but no NodeClaim owns it")),
            }
        }
        ClusterEvent::NodeDeleted { .. } => Ok(()),
    };
    if let Err(error) = delivered {
        warn!(%error, "Could not deliver a cluster event to its actor.");
    }
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(Result::ok)
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}
