//! An in-memory Kubernetes cluster: pods, nodes, DaemonSets, PodDisruptionBudgets and
//! Deployments (which replace evicted or deleted pods), with a kube-scheduler stand-in that
//! binds pending pods to Ready nodes they fit and reports the rest as Unschedulable.
//!
//! What it does not do: kube-scheduler is modelled only as far as binding pending pods to
//! Ready nodes they fit (requests, taints, affinity, topology spread counted over the nodes
//! its nodeInclusionPolicy takes, cordoned ones included, as a round counts them);
//! evictions honour PodDisruptionBudgets. There are no DaemonSet or mirror pods on nodes: a
//! DaemonSet is overhead (requests and host ports) on each node whose taints it tolerates and
//! whose labels it selects, so every bound pod would have to move on disruption. A node
//! restored when a run resumes gets its NodePool's current labels and taints, not the ones
//! it registered with if the template changed since.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use karpenter_core::api::NodeClaim;
use karpenter_core::model::pod::{HostPort, ports_conflict};
use karpenter_core::model::taints::untolerated;
use karpenter_core::model::volumes::VolumeAttachment;
use karpenter_core::model::{InstanceType, Pod, Resources, Taint};
use karpenter_core::ports::{
    BoundPod, BoxFuture, BufferStatus, Cluster, ClusterError, ClusterEvent, DisruptionView,
    EventObject, EvictError, Instance, NodeCondition, NodeInfo, PodToDrain,
};
use karpenter_core::scheduling::buffers::BufferSource;
use karpenter_core::vocab::labels;
use karpenter_core::vocab::labels::{NODE_NOT_READY_TAINT, NODE_UNREACHABLE_TAINT};
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};

/// A PodDisruptionBudget: at most `max_unavailable` pods matching `selector` may be missing
/// (not bound) because of evictions.
#[derive(Debug, Clone, PartialEq)]
pub struct Pdb {
    /// Name.
    pub name: String,
    /// Label selector (all must match).
    pub selector: BTreeMap<String, String>,
    /// Pods that may be unavailable at once.
    pub max_unavailable: usize,
}

#[derive(Debug, Clone)]
struct SimPod {
    pod: Pod,
    owner: Option<String>,
    node: Option<String>,
    created: Instant,
    /// Reported to the autoscaler as unschedulable (once per pending spell).
    reported: bool,
    /// Its `karpenter.sh/do-not-disrupt` annotation (`"true"` or a duration).
    do_not_disrupt: Option<String>,
    /// Jobs finish this long after they start running.
    runs_for: Option<Duration>,
    /// The job it runs for: a job's pod that is evicted or lost before it finishes gets a
    /// new one, as the Job controller does (which runs from the start).
    job: Option<String>,
    started: Option<Instant>,
}

#[derive(Debug, Clone)]
struct SimNode {
    info: NodeInfo,
    ready_at: Instant,
    /// Conditions a scenario made hold (`Ready` `Unknown`, …), with since when (ms): a
    /// `Ready` that is not `True` keeps the node NotReady, tainted as the node lifecycle
    /// controller taints it.
    conditions: Vec<NodeCondition>,
}

/// What the simulation measured about pods, for the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PodStats {
    /// Pending → bound latencies, in seconds of simulated time.
    pub pending_latencies: Vec<f64>,
    /// Pods evicted.
    pub evictions: u64,
    /// Evictions refused by a PDB.
    pub pdb_blocks: u64,
    /// Pods evicted while `karpenter.sh/do-not-disrupt` protected them.
    pub protected_evictions: u64,
    /// Pods that went with their node (its grace period ran out, or it was reclaimed).
    pub lost_with_node: u64,
}

struct ClusterState {
    pods: BTreeMap<String, SimPod>,
    nodes: BTreeMap<String, SimNode>,
    daemonsets: Vec<Pod>,
    pdbs: Vec<Pdb>,
    deployments: BTreeMap<String, (Pod, usize)>,
    next_uid: u64,
    /// Identities of the pods a resumed run's journal knew, for the pods seeding recreates.
    identities: restore::Identities,
    stats: PodStats,
    events: Vec<(String, String, String)>,
    /// NodeClaim objects as the actors last wrote them, until released.
    nodeclaims: BTreeMap<String, NodeClaim>,
    /// CapacityBuffers, the PodTemplates they may name, and their statuses as last written.
    buffers: Vec<karpenter_core::api::CapacityBuffer>,
    pod_templates: BTreeMap<String, Pod>,
    buffer_statuses: BTreeMap<String, BufferStatus>,
}

/// The simulated cluster.
pub struct SimCluster {
    state: Mutex<ClusterState>,
    events: mpsc::UnboundedSender<ClusterEvent>,
    ready_delay: Duration,
    /// When the cluster was made, and the journal's clock (ms since the Unix epoch) then.
    epoch: (Instant, i64),
}

impl SimCluster {
    /// Keeps `buffers`, whose `podTemplateRef`s name `templates`.
    pub fn set_buffers(
        &self,
        buffers: Vec<karpenter_core::api::CapacityBuffer>,
        templates: BTreeMap<String, Pod>,
    ) {
        let mut state = self.lock();
        state.buffers = buffers;
        state.pod_templates = templates;
    }

    /// The CapacityBuffers' statuses as rounds last wrote them, by `namespace/name`.
    pub fn buffer_statuses(&self) -> BTreeMap<String, BufferStatus> {
        self.lock().buffer_statuses.clone()
    }

    /// A cluster whose events go to `events`; nodes become Ready `ready_delay` after joining.
    pub fn new(events: mpsc::UnboundedSender<ClusterEvent>, ready_delay: Duration) -> Self {
        SimCluster {
            state: Mutex::new(ClusterState {
                pods: BTreeMap::new(),
                nodes: BTreeMap::new(),
                daemonsets: Vec::new(),
                pdbs: Vec::new(),
                deployments: BTreeMap::new(),
                next_uid: 1,
                identities: Default::default(),
                stats: PodStats::default(),
                events: Vec::new(),
                nodeclaims: BTreeMap::new(),
                buffers: Vec::new(),
                pod_templates: BTreeMap::new(),
                buffer_statuses: BTreeMap::new(),
            }),
            events,
            ready_delay,
            epoch: (Instant::now(), 0),
        }
    }

    /// Times the cluster reports (pods' creation) count from `epoch_ms` (ms since the Unix
    /// epoch) at the moment the cluster was made.
    pub fn with_epoch(mut self, epoch_ms: i64) -> Self {
        self.epoch.1 = epoch_ms;
        self
    }

    /// `at` on the journal's clock.
    fn ms(&self, at: Instant) -> i64 {
        let (start, epoch_ms) = self.epoch;
        let since = at.saturating_duration_since(start).as_millis();
        epoch_ms + i64::try_from(since).unwrap_or(i64::MAX)
    }

    /// Whether a pod's `do-not-disrupt` protects it now.
    fn protected(&self, pod: &SimPod) -> bool {
        pod.do_not_disrupt.as_deref().is_some_and(|value| {
            karpenter_core::model::drain::do_not_disrupt(
                value,
                Some(self.ms(pod.created)),
                self.ms(Instant::now()),
            )
            .unwrap_or(false)
        })
    }

    fn lock(&self) -> MutexGuard<'_, ClusterState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn send(&self, event: ClusterEvent) {
        // The receiver only goes away when the run is over.
        let _ = self.events.send(event);
    }

    /// The NodeClaim objects the actors have written and not yet released.
    pub fn nodeclaims(&self) -> Vec<NodeClaim> {
        self.lock().nodeclaims.values().cloned().collect()
    }

    /// Adds a DaemonSet (its pod template).
    pub fn add_daemonset(&self, template: Pod) {
        self.lock().daemonsets.push(template);
    }

    /// Adds a PodDisruptionBudget.
    pub fn add_pdb(&self, pdb: Pdb) {
        self.lock().pdbs.push(pdb);
    }

    fn new_pod(state: &mut ClusterState, template: &Pod, name: &str) -> Pod {
        let mut pod = template.clone();
        if let Some((uid, pod_name)) = state.identities.take(name) {
            pod.uid = uid;
            pod.name = pod_name;
            return pod;
        }
        pod.uid = format!("uid-{:06}", state.next_uid);
        pod.name = format!("{name}-{:06}", state.next_uid);
        state.next_uid += 1;
        pod
    }

    /// Sets a Deployment's replicas (creating it from `template` if new): adds pending pods
    /// or deletes the newest ones.
    pub fn scale(&self, name: &str, template: Option<&Pod>, replicas: usize) {
        let mut deleted = Vec::new();
        {
            let mut state = self.lock();
            let template = match (template, state.deployments.get(name)) {
                (Some(t), _) => t.clone(),
                (None, Some((t, _))) => t.clone(),
                (None, None) => return,
            };
            state
                .deployments
                .insert(name.to_owned(), (template.clone(), replicas));
            let mut owned: Vec<String> = state
                .pods
                .iter()
                .filter(|(_, p)| p.owner.as_deref() == Some(name))
                .map(|(uid, _)| uid.clone())
                .collect();
            while owned.len() < replicas {
                let pod = Self::new_pod(&mut state, &template, name);
                owned.push(pod.uid.clone());
                Self::insert(&mut state, pod, Some(name.to_owned()), None);
            }
            // Newest (highest uid) first, as a ReplicaSet scaling down prefers unbound and young pods.
            owned.sort();
            while owned.len() > replicas {
                if let Some(uid) = owned.pop() {
                    // Its node has that much room again.
                    if let Some(p) = state.pods.remove(&uid)
                        && let Some(node) = p.node.as_ref().and_then(|n| state.nodes.get_mut(n))
                    {
                        node.info.requested = node.info.requested.sub(&p.pod.requests);
                    }
                    deleted.push(uid);
                }
            }
        }
        for uid in deleted {
            self.send(ClusterEvent::PodDeleted { uid });
        }
    }

    fn insert(
        state: &mut ClusterState,
        pod: Pod,
        owner: Option<String>,
        runs_for: Option<Duration>,
    ) {
        // Workloads carry the annotation as a label of the template; the pod holds it as the
        // annotation it stands for.
        let mut pod = pod;
        let do_not_disrupt = pod.labels.remove(labels::DO_NOT_DISRUPT);
        state.pods.insert(
            pod.uid.clone(),
            SimPod {
                pod,
                owner,
                node: None,
                created: Instant::now(),
                reported: false,
                do_not_disrupt,
                runs_for,
                job: None,
                started: None,
            },
        );
    }

    /// Creates `count` job pods from `template` that finish `runs_for` after they start.
    pub fn add_job(&self, name: &str, template: &Pod, count: usize, runs_for: Duration) {
        let mut state = self.lock();
        for _ in 0..count {
            Self::add_job_pod(&mut state, name, template, runs_for);
        }
    }

    fn add_job_pod(state: &mut ClusterState, job: &str, template: &Pod, runs_for: Duration) {
        let pod = Self::new_pod(state, template, job);
        let uid = pod.uid.clone();
        Self::insert(state, pod, None, Some(runs_for));
        if let Some(p) = state.pods.get_mut(&uid) {
            p.job = Some(job.to_owned());
        }
    }

    /// A node that was Ready when a previous run stopped joins again, Ready at once.
    pub fn restore_node(&self, instance: &Instance, instance_type: &InstanceType) {
        self.register(instance, instance_type);
        let name = format!("ip-{}.ec2.internal", instance.id.trim_start_matches("i-"));
        if let Some(node) = self.lock().nodes.get_mut(&name) {
            node.ready_at = Instant::now();
        }
    }

    /// An instance booted: its node joins now (with the unregistered taint, which
    /// registration removes) and turns Ready after the ready delay.
    pub fn register(&self, instance: &Instance, instance_type: &InstanceType) {
        let name = format!("ip-{}.ec2.internal", instance.id.trim_start_matches("i-"));
        let mut node_labels = instance.node_labels(Some(instance_type));
        node_labels.insert(labels::HOSTNAME.into(), name.clone());
        let info = NodeInfo {
            name: name.clone(),
            provider_id: instance.provider_id.clone(),
            labels: node_labels,
            taints: Vec::new(),
            allocatable: instance_type.allocatable(),
            requested: Resources::ZERO,
            daemon_requested: Resources::ZERO,
            pods: Vec::new(),
            anti_affinity: Vec::new(),
            host_ports: Vec::new(),
            attach_limits: BTreeMap::new(),
            attached: Vec::new(),
            ready: false,
            unschedulable: false,
        };
        {
            let mut state = self.lock();
            let daemon = daemon_requests(&state.daemonsets, &info.labels, &info.taints);
            let mut info = info.clone();
            info.requested = daemon;
            info.daemon_requested = daemon;
            state.nodes.insert(
                name.clone(),
                SimNode {
                    info,
                    ready_at: Instant::now() + self.ready_delay,
                    conditions: Vec::new(),
                },
            );
        }
        self.send(ClusterEvent::NodeRegistered(Box::new(info)));
    }

    /// Lays `labels` over a node's and gives it `taints` (DaemonSets that do not tolerate them
    /// stop counting on it), as registration does.
    pub fn label_node(&self, node: &str, labels: BTreeMap<String, String>, taints: Vec<Taint>) {
        let mut guard = self.lock();
        let state = &mut *guard;
        if let Some(n) = state.nodes.get_mut(node) {
            let before = daemon_requests(&state.daemonsets, &n.info.labels, &n.info.taints);
            n.info.labels.extend(labels);
            n.info.taints = taints;
            let after = daemon_requests(&state.daemonsets, &n.info.labels, &n.info.taints);
            n.info.requested = n.info.requested.sub(&before).add(&after);
            n.info.daemon_requested = after;
        }
    }

    /// The node an instance registered as, if it did.
    pub fn node_of(&self, provider_id: &str) -> Option<String> {
        let state = self.lock();
        state
            .nodes
            .values()
            .find(|n| n.info.provider_id == provider_id)
            .map(|n| n.info.name.clone())
    }

    /// Whether the instance's node holds condition `type_` at `status` already.
    pub fn holds_condition(&self, provider_id: &str, type_: &str, status: &str) -> bool {
        let state = self.lock();
        state.nodes.values().any(|n| {
            n.info.provider_id == provider_id
                && n.conditions
                    .iter()
                    .any(|c| c.type_ == type_ && c.status == status)
        })
    }

    /// Makes `node`'s condition `type_` hold at `status` from now (a failing kubelet, disk or
    /// network, as a scenario says). `Ready` at `False` or `Unknown` makes the node NotReady
    /// and gives it the `node.kubernetes.io/not-ready` or `unreachable` `NoSchedule` taint,
    /// as Kubernetes' node lifecycle controller does, so no new pod lands on it; its pods
    /// stay bound (evicting them is the taint manager's, after their tolerations, which the
    /// simulation leaves to node repair).
    pub fn set_condition(&self, node: &str, type_: &str, status: &str) -> bool {
        let since_ms = self.ms(Instant::now());
        let mut guard = self.lock();
        let Some(n) = guard.nodes.get_mut(node) else {
            return false;
        };
        n.conditions.retain(|c| c.type_ != type_);
        n.conditions.push(NodeCondition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            since_ms,
        });
        if type_ == "Ready" {
            n.info.ready = false;
            let key = if status == "Unknown" {
                NODE_UNREACHABLE_TAINT
            } else {
                NODE_NOT_READY_TAINT
            };
            if !n.info.taints.iter().any(|t| t.key == key) {
                n.info.taints.push(Taint::new(key, "", "NoSchedule"));
            }
        }
        true
    }

    /// Takes a cordon back: the node is schedulable again, without the disrupted taint.
    pub fn uncordon(&self, node: &str) {
        if let Some(n) = self.lock().nodes.get_mut(node) {
            n.info.unschedulable = false;
            n.info.taints.retain(|t| t.key != labels::DISRUPTED_TAINT);
        }
    }

    /// One pass of the kube-scheduler stand-in and the node lifecycle: nodes turn Ready,
    /// finished jobs go away, pending pods are bound where they fit (oldest first) and the
    /// rest are reported Unschedulable once.
    pub fn tick(&self) {
        let now = Instant::now();
        let mut out = Vec::new();
        {
            let mut guard = self.lock();
            let state = &mut *guard;
            for node in state.nodes.values_mut() {
                let held_down = node.conditions.iter().any(|c| c.type_ == "Ready");
                if !node.info.ready && now >= node.ready_at && !held_down {
                    node.info.ready = true;
                    out.push(ClusterEvent::NodeReady {
                        name: node.info.name.clone(),
                        provider_id: node.info.provider_id.clone(),
                    });
                }
            }
            let finished: Vec<String> = state
                .pods
                .iter()
                .filter(
                    |(_, p)| matches!((p.started, p.runs_for), (Some(s), Some(d)) if now >= s + d),
                )
                .map(|(uid, _)| uid.clone())
                .collect();
            for uid in finished {
                if let Some(p) = state.pods.remove(&uid)
                    && let Some(node) = p.node.and_then(|n| state.nodes.get_mut(&n))
                {
                    node.info.requested = node.info.requested.sub(&p.pod.requests);
                }
                out.push(ClusterEvent::PodDeleted { uid });
            }
            let mut pending: Vec<(Instant, String)> = state
                .pods
                .iter()
                .filter(|(_, p)| p.node.is_none())
                .map(|(uid, p)| (p.created, uid.clone()))
                .collect();
            pending.sort();
            for (_, uid) in pending {
                let Some(sim_pod) = state.pods.get(&uid) else {
                    continue;
                };
                let pod = &sim_pod.pod;
                let fits = |n: &SimNode| {
                    n.info.ready
                        && !n.info.unschedulable
                        && untolerated(&n.info.taints, &pod.tolerations).is_none()
                        && pod
                            .requirement_alternatives()
                            .iter()
                            .any(|alt| alt.admits(&n.info.labels))
                };
                let target = state.nodes.values().find(|n| {
                    fits(n)
                        && n.info
                            .requested
                            .add(&pod.requests)
                            .fits_in(&n.info.allocatable)
                        && spread_allows(state, pod, n)
                        && !host_ports_taken(state, pod, n)
                });
                match target.map(|n| n.info.name.clone()) {
                    Some(node_name) => {
                        let requests = pod.requests;
                        let name = format!("{}/{}", pod.namespace, pod.name);
                        if let Some(node) = state.nodes.get_mut(&node_name) {
                            node.info.requested = node.info.requested.add(&requests);
                        }
                        if let Some(p) = state.pods.get_mut(&uid) {
                            p.node = Some(node_name.clone());
                            p.started = Some(now);
                            state
                                .stats
                                .pending_latencies
                                .push((now - p.created).as_secs_f64());
                        }
                        out.push(ClusterEvent::PodBound {
                            uid,
                            pod: name,
                            node: node_name,
                        });
                    }
                    None if !sim_pod.reported => {
                        out.push(ClusterEvent::PodUnschedulable(Box::new(pod.clone())));
                        if let Some(p) = state.pods.get_mut(&uid) {
                            p.reported = true;
                        }
                    }
                    None => {}
                }
            }
        }
        for event in out {
            self.send(event);
        }
    }

    /// Pods not bound to a node.
    pub fn pending_count(&self) -> usize {
        self.lock()
            .pods
            .values()
            .filter(|p| p.node.is_none())
            .count()
    }

    /// Pods bound to a node.
    pub fn bound_count(&self) -> usize {
        self.lock()
            .pods
            .values()
            .filter(|p| p.node.is_some())
            .count()
    }

    /// Nodes tainted `karpenter.sh/disrupted` while still schedulable (marked by a
    /// disruption command, not draining).
    pub fn marked_nodes(&self) -> Vec<String> {
        self.lock()
            .nodes
            .values()
            .filter(|n| {
                !n.info.unschedulable
                    && n.info
                        .taints
                        .iter()
                        .any(|t| t.key == labels::DISRUPTED_TAINT)
            })
            .map(|n| n.info.name.clone())
            .collect()
    }

    /// Nodes in the cluster.
    pub fn node_count(&self) -> usize {
        self.lock().nodes.len()
    }

    /// Requested and allocatable CPU and memory summed over Ready nodes.
    pub fn utilisation(&self) -> (Resources, Resources) {
        let state = self.lock();
        state
            .nodes
            .values()
            .filter(|n| n.info.ready)
            .fold((Resources::ZERO, Resources::ZERO), |(r, a), n| {
                (r.add(&n.info.requested), a.add(&n.info.allocatable))
            })
    }

    /// What happened to pods.
    pub fn stats(&self) -> PodStats {
        self.lock().stats.clone()
    }

    /// Kubernetes Events emitted so far, as `(object, reason, message)`.
    pub fn recorded_events(&self) -> Vec<(String, String, String)> {
        self.lock().events.clone()
    }

    fn remove_pod(state: &mut ClusterState, uid: &str) -> Option<SimPod> {
        let pod = state.pods.remove(uid)?;
        if let Some(node) = pod.node.as_ref().and_then(|n| state.nodes.get_mut(n)) {
            node.info.requested = node.info.requested.sub(&pod.pod.requests);
        }
        // A Deployment replaces what it lost.
        if let Some(owner) = &pod.owner
            && let Some((template, _)) = state.deployments.get(owner).cloned()
        {
            let replacement = Self::new_pod(state, &template, owner);
            Self::insert(state, replacement, Some(owner.clone()), None);
        }
        // So does a Job, for a pod that did not finish.
        if let (Some(job), Some(runs_for)) = (&pod.job, pod.runs_for) {
            let mut template = pod.pod.clone();
            if let Some(value) = &pod.do_not_disrupt {
                template
                    .labels
                    .insert(labels::DO_NOT_DISRUPT.into(), value.clone());
            }
            Self::add_job_pod(state, job, &template, runs_for);
        }
        Some(pod)
    }
}

/// kube-scheduler's PodTopologySpread filter (DoNotSchedule constraints): the skew after
/// placing on `node` must stay within maxSkew over the domains of the nodes its
/// nodeInclusionPolicy counts — those matching the pod's node affinity (unless
/// `nodeAffinityPolicy: Ignore`) and, only with `nodeTaintsPolicy: Honor`, whose taints it
/// tolerates. Cordoned, tainted and not-ready nodes count by default, with their pods.
fn spread_allows(state: &ClusterState, pod: &Pod, node: &SimNode) -> bool {
    pod.spread.iter().filter(|s| !s.schedule_anyway).all(|s| {
        let eligible = |n: &SimNode| {
            (s.ignore_node_affinity
                || pod
                    .requirement_alternatives()
                    .iter()
                    .any(|alt| alt.admits(&n.info.labels)))
                && (!s.honor_node_taints || untolerated(&n.info.taints, &pod.tolerations).is_none())
        };
        let domain_of = |n: &SimNode| {
            if s.topology_key == labels::HOSTNAME {
                Some(n.info.name.clone())
            } else {
                n.info.labels.get(&s.topology_key).cloned()
            }
        };
        let Some(domain) = domain_of(node) else {
            return false;
        };
        let mut counts: BTreeMap<String, i64> = state
            .nodes
            .values()
            .filter(|n| eligible(n))
            .filter_map(domain_of)
            .map(|d| (d, 0))
            .collect();
        for p in state.pods.values() {
            if let Some(bound) = p.node.as_ref().and_then(|n| state.nodes.get(n))
                && s.counts(&pod.namespace, &p.pod.namespace, &p.pod.labels)
                && let Some(d) = domain_of(bound)
                && let Some(c) = counts.get_mut(&d)
            {
                *c += 1;
            }
        }
        let fewer_than_min_domains = s.min_domains.is_some_and(|m| (counts.len() as i64) < m);
        let min = if fewer_than_min_domains {
            0
        } else {
            counts.values().copied().min().unwrap_or(0)
        };
        let own = i64::from(s.counts(&pod.namespace, &pod.namespace, &pod.labels));
        counts.get(&domain).copied().unwrap_or(0) + own - min <= s.max_skew
    })
}

/// kube-scheduler's NodePorts filter: a pod bound to `node`, or a DaemonSet's pod running
/// on it, already binds a host port `pod` needs.
fn host_ports_taken(state: &ClusterState, pod: &Pod, node: &SimNode) -> bool {
    !pod.host_ports.is_empty()
        && (state.pods.values().any(|p| {
            p.node.as_deref() == Some(node.info.name.as_str())
                && ports_conflict(&p.pod.host_ports, &pod.host_ports)
        }) || ports_conflict(
            &daemon_ports(&state.daemonsets, &node.info),
            &pod.host_ports,
        ))
}

/// What the DaemonSets that run on a node with these labels and taints request.
fn daemon_requests(
    daemonsets: &[Pod],
    labels: &BTreeMap<String, String>,
    taints: &[Taint],
) -> Resources {
    daemonsets
        .iter()
        .filter(|ds| ds.daemon_runs_on(labels, taints))
        .fold(Resources::ZERO, |acc, ds| acc.add(&ds.requests))
}

/// The host ports the DaemonSets' pods running on a node bind.
fn daemon_ports(daemonsets: &[Pod], node: &NodeInfo) -> Vec<HostPort> {
    daemonsets
        .iter()
        .filter(|ds| ds.daemon_runs_on(&node.labels, &node.taints))
        .flat_map(|ds| ds.host_ports.iter().cloned())
        .collect()
}

fn pdb_matches(pdb: &Pdb, pod: &Pod) -> bool {
    pdb.selector
        .iter()
        .all(|(k, v)| pod.labels.get(k) == Some(v))
}

impl Cluster for SimCluster {
    fn nodes(&self) -> BoxFuture<'_, Vec<NodeInfo>> {
        Box::pin(async move {
            let state = self.lock();
            let mut pods: BTreeMap<&str, Vec<karpenter_core::scheduling::PodLabels>> =
                BTreeMap::new();
            let mut anti: BTreeMap<&str, Vec<karpenter_core::scheduling::AntiAffinityOf>> =
                BTreeMap::new();
            let mut ports: BTreeMap<&str, Vec<HostPort>> = BTreeMap::new();
            let mut volumes: BTreeMap<&str, Vec<VolumeAttachment>> = BTreeMap::new();
            for p in state.pods.values() {
                if let Some(node) = &p.node {
                    pods.entry(node.as_str())
                        .or_default()
                        .push((p.pod.namespace.clone(), p.pod.labels.clone()));
                    anti.entry(node.as_str())
                        .or_default()
                        .extend(karpenter_core::scheduling::anti_affinity_of(&p.pod));
                    ports
                        .entry(node.as_str())
                        .or_default()
                        .extend(p.pod.host_ports.iter().cloned());
                    volumes
                        .entry(node.as_str())
                        .or_default()
                        .extend(p.pod.volume_attachments.iter().cloned());
                }
            }
            state
                .nodes
                .values()
                .map(|n| NodeInfo {
                    pods: pods.remove(n.info.name.as_str()).unwrap_or_default(),
                    anti_affinity: anti.remove(n.info.name.as_str()).unwrap_or_default(),
                    host_ports: {
                        let mut bound = ports.remove(n.info.name.as_str()).unwrap_or_default();
                        bound.extend(daemon_ports(&state.daemonsets, &n.info));
                        bound
                    },
                    attached: volumes.remove(n.info.name.as_str()).unwrap_or_default(),
                    ..n.info.clone()
                })
                .collect()
        })
    }

    fn pods_to_drain<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Vec<PodToDrain>> {
        // The simulated cluster has no DaemonSet or critical pods on its nodes: one tier.
        Box::pin(async move {
            self.lock()
                .pods
                .iter()
                .filter(|(_, p)| p.node.as_deref() == Some(node))
                .map(|(uid, p)| PodToDrain {
                    uid: uid.clone(),
                    namespace: p.pod.namespace.clone(),
                    name: p.pod.name.clone(),
                    wait: self.protected(p),
                })
                .collect()
        })
    }

    fn daemonsets(&self) -> BoxFuture<'_, Vec<Pod>> {
        Box::pin(async move { self.lock().daemonsets.clone() })
    }

    fn capacity_buffers(&self) -> BoxFuture<'_, Vec<BufferSource>> {
        Box::pin(async move {
            let state = self.lock();
            super::buffers::sources(&state.buffers, &state.pod_templates, &state.deployments)
        })
    }

    fn buffer_status(&self, status: &BufferStatus) {
        let mut state = self.lock();
        let kept = state.buffer_statuses.entry(status.resolved.key());
        let entry = kept.or_insert_with(|| status.clone());
        // A round that said nothing of its Provisioning leaves it as it was.
        let provisioning = status.provisioning.clone().or(entry.provisioning.take());
        *entry = BufferStatus {
            resolved: status.resolved.clone(),
            provisioning,
        };
    }

    fn namespace_labels(&self) -> BoxFuture<'_, BTreeMap<String, BTreeMap<String, String>>> {
        // The simulated cluster's namespaces are those its pods live in, each labelled with
        // its name as the API server labels every namespace.
        Box::pin(async move {
            self.lock()
                .pods
                .values()
                .map(|p| {
                    let name = p.pod.namespace.clone();
                    let labels = [(labels::NAMESPACE_NAME.to_owned(), name.clone())].into();
                    (name, labels)
                })
                .collect()
        })
    }

    fn sync_node<'a>(
        &'a self,
        node: &'a str,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let mut labels = claim.metadata.labels.clone().unwrap_or_default();
            labels.insert(labels::REGISTERED.into(), "true".into());
            let taints: Vec<Taint> = claim.spec.taints.iter().map(Taint::from).collect();
            self.label_node(node, labels, taints);
            Ok(())
        })
    }

    fn cordon<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            if let Some(n) = self.lock().nodes.get_mut(node) {
                n.info.unschedulable = true;
                if !n
                    .info
                    .taints
                    .iter()
                    .any(|t| t.key == labels::DISRUPTED_TAINT)
                {
                    n.info
                        .taints
                        .push(Taint::new(labels::DISRUPTED_TAINT, "", "NoSchedule"));
                }
            }
            Ok(())
        })
    }

    fn taint_disrupted<'a>(
        &'a self,
        node: &'a str,
        disrupted: bool,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            if let Some(n) = self.lock().nodes.get_mut(node) {
                n.info.taints.retain(|t| t.key != labels::DISRUPTED_TAINT);
                if disrupted {
                    n.info
                        .taints
                        .push(Taint::new(labels::DISRUPTED_TAINT, "", "NoSchedule"));
                }
            }
            Ok(())
        })
    }

    fn evict<'a>(&'a self, uid: &'a str) -> BoxFuture<'a, Result<(), EvictError>> {
        Box::pin(async move {
            let mut event = None;
            {
                let mut guard = self.lock();
                let state = &mut *guard;
                let Some(target) = state.pods.get(uid) else {
                    return Ok(());
                };
                let protected = self.protected(target);
                for pdb in state
                    .pdbs
                    .iter()
                    .filter(|pdb| pdb_matches(pdb, &target.pod))
                {
                    let selected: Vec<&SimPod> = state
                        .pods
                        .values()
                        .filter(|p| pdb_matches(pdb, &p.pod))
                        .collect();
                    let unavailable = selected.iter().filter(|p| p.node.is_none()).count();
                    if unavailable + 1 > pdb.max_unavailable {
                        state.stats.pdb_blocks += 1;
                        return Err(EvictError::BlockedByPdb {
                            pod: target.pod.key(),
                            pdb: pdb.name.clone(),
                        });
                    }
                }
                if protected {
                    state.stats.protected_evictions += 1;
                }
                if Self::remove_pod(state, uid).is_some() {
                    state.stats.evictions += 1;
                    event = Some(ClusterEvent::PodDeleted {
                        uid: uid.to_owned(),
                    });
                }
            }
            if let Some(event) = event {
                self.send(event);
            }
            Ok(())
        })
    }

    fn delete_node<'a>(&'a self, node: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let mut out = Vec::new();
            {
                let mut guard = self.lock();
                let state = &mut *guard;
                if state.nodes.remove(node).is_none() {
                    return Ok(());
                }
                let orphans: Vec<String> = state
                    .pods
                    .iter()
                    .filter(|(_, p)| p.node.as_deref() == Some(node))
                    .map(|(uid, _)| uid.clone())
                    .collect();
                for uid in orphans {
                    Self::remove_pod(state, &uid);
                    state.stats.lost_with_node += 1;
                    out.push(ClusterEvent::PodDeleted { uid });
                }
                out.push(ClusterEvent::NodeDeleted {
                    name: node.to_owned(),
                });
            }
            for event in out {
                self.send(event);
            }
            Ok(())
        })
    }

    fn volumes_attached<'a>(&'a self, _node: &'a str) -> BoxFuture<'a, usize> {
        // Simulated volumes detach with their pods.
        Box::pin(async move { 0 })
    }

    fn put_nodeclaim<'a>(
        &'a self,
        claim: &'a NodeClaim,
    ) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            let name = claim.metadata.name.clone().unwrap_or_default();
            self.lock().nodeclaims.insert(name, claim.clone());
            Ok(())
        })
    }

    fn release_nodeclaim<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ClusterError>> {
        Box::pin(async move {
            self.lock().nodeclaims.remove(name);
            Ok(())
        })
    }

    fn emit_event(&self, object: &EventObject, reason: &str, message: &str) {
        self.lock()
            .events
            .push((object.to_string(), reason.to_owned(), message.to_owned()));
    }

    fn disruption_view(&self) -> BoxFuture<'_, DisruptionView> {
        Box::pin(async move {
            let state = self.lock();
            // A PDB allows as many evictions as pods it selects may still go missing.
            let pdbs: BTreeMap<String, i32> = state
                .pdbs
                .iter()
                .map(|pdb| {
                    let unavailable = state
                        .pods
                        .values()
                        .filter(|p| p.node.is_none() && pdb_matches(pdb, &p.pod))
                        .count();
                    let allowed = pdb.max_unavailable.saturating_sub(unavailable);
                    (pdb_key(pdb), i32::try_from(allowed).unwrap_or(i32::MAX))
                })
                .collect();
            // The simulated cluster runs no DaemonSet or static pods (DaemonSets are
            // overhead), so every bound pod would have to move.
            let pods = state
                .pods
                .values()
                .filter_map(|p| {
                    Some(BoundPod {
                        node: p.node.clone()?,
                        pod: p.pod.clone(),
                        reschedulable: true,
                        do_not_disrupt: p.do_not_disrupt.clone(),
                        created_ms: Some(self.ms(p.created)),
                        pdbs: state
                            .pdbs
                            .iter()
                            .filter(|pdb| pdb_matches(pdb, &p.pod))
                            .map(pdb_key)
                            .collect(),
                    })
                })
                .collect();
            let not_ready = state
                .nodes
                .values()
                .filter(|n| !n.info.ready)
                .map(|n| n.info.name.clone())
                .collect();
            let conditions = state
                .nodes
                .values()
                .filter(|n| !n.conditions.is_empty())
                .map(|n| (n.info.name.clone(), n.conditions.clone()))
                .collect();
            DisruptionView {
                pods,
                pdbs,
                protected: Default::default(),
                not_ready,
                conditions,
            }
        })
    }
}

/// A PDB's `namespace/name` (simulated PDBs live in the pods' namespace, `default`).
fn pdb_key(pdb: &Pdb) -> String {
    format!("default/{}", pdb.name)
}

mod restore;
#[cfg(test)]
mod tests;
