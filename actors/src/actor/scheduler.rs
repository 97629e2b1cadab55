//! The scheduler actor: keeps the pending pods, batches them (a batch closes after
//! `batch_idle` without new pods or `batch_max` after it opened), runs a binpacking round
//! over existing nodes, in-flight NodeClaims and the NodePools, journals the round and hands
//! each planned NodeClaim to its NodePool actor.
//!
//! A pod is served until it binds or goes: every `pending_retry` while any pod is pending
//! (and at once when a NodePool is added or changed, or a NodeClaim ends) a new batch opens,
//! and the waits of pods nominated to NodeClaims or left to kube-scheduler on running nodes
//! are checked: when and why a wait ends is
//! `karpenter_core::provisioning::nominations::check`, on the journal clock; the actor
//! gathers the check, carries its outcome out and journals both (`NominationsChecked`).
//!
//! What it holds per pod and per NodeClaim on its way is `karpenter_core::provisioning::book`
//! ([`PodBook`], and [`LastSolved`] for whether a round repeats the last one): the actor
//! gathers, calls and carries out.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use ractor::{ActorProcessingErr, ActorRef};
use tokio::time::Instant;
use tracing::{debug, info, info_span, warn};

use super::Context;
use super::keeper::CATALOG_REMEMBERED;
use super::messages::*;

use karpenter_core::events::{
    DomainEvent, NodeClaimPlan, RoundInput, RoundRecord, catalog_digest_of, type_digest,
};
use karpenter_core::lifecycle::status::NodePoolNotReady;
use karpenter_core::model::{InstanceType, Pod, Requirements};
use karpenter_core::ports::BufferStatus;
use karpenter_core::ports::EventObject;
use karpenter_core::provisioning::book::{LastSolved, PodBook};
use karpenter_core::provisioning::nominations::{
    self, NodeFacts, NominationCheck, NominationRecord,
};
use karpenter_core::provisioning::{RoundRun, existing_nodes, plans, round_record};
use karpenter_core::scheduling::buffers::{self, Resolved};
use karpenter_core::scheduling::{SchedulingInput, SchedulingResult, StaticPool, solve_cached};

/// What the scheduler starts from.
pub struct SchedulerArgs {
    /// Shared context.
    pub ctx: Context,
    /// The last round already in the journal (0 when starting anew): numbering continues
    /// after it, so rounds and NodeClaim names stay unique across restarts.
    pub last_round: u64,
    /// Instance-type sets the journal holds that rounds used lately, with when.
    pub catalogs: BTreeMap<String, i64>,
}

/// The scheduler's state.
pub struct SchedulerState {
    ctx: Context,
    pools: Vec<ActorRef<NodePoolMsg>>,
    /// The pods: pending, nominated, left to kube-scheduler, unschedulable, reserved.
    book: PodBook,
    /// The NodePools the last round left out, and why.
    not_ready: BTreeMap<String, NodePoolNotReady>,
    window: Option<(Instant, Instant)>,
    /// A static NodePool was said to be short: the next round runs even with no pod
    /// pending.
    static_due: bool,
    /// A CapacityBuffer changed, or buffers are kept and `pending_retry` passed: the next
    /// round runs even with no pod pending.
    buffers_due: bool,
    /// The CapacityBuffers the last round resolved (`CapacityBuffer` gate).
    buffers: Vec<Resolved>,
    /// Nodes and NodeClaims the last solved round placed virtual pods on.
    buffered: BTreeSet<String>,
    tick_armed: bool,
    retry_armed: bool,
    round: u64,
    last_round: Option<RoundRecord>,
    /// The last round that planned NodeClaims.
    last_planning_round: Option<u64>,
    /// Digests of the instance-type sets already in the journal, with when a round last
    /// used each (journal clock, ms). A set unused for [`CATALOG_REMEMBERED`] is forgotten
    /// (the journal keeper may trim it away) and recorded again before its next use.
    recorded_catalogs: BTreeMap<String, i64>,
    /// The digest of each instance type of recent catalogs, by address: digesting means
    /// serializing, and a catalog changes a few types at a time (the types are kept, so
    /// their addresses cannot be reused by others).
    digests: HashMap<usize, (Arc<InstanceType>, u64)>,
    /// Per NodePool, the instance types of its last catalog and that catalog's digest: a
    /// pool asked again with the very same types (the disruption controller asks every
    /// pass) costs a pointer comparison per type.
    pool_catalogs: HashMap<String, (Vec<Arc<InstanceType>>, String)>,
    /// The last round that ran the solver: its input and its result.
    last_solved: Option<LastSolved>,
}

/// The scheduler actor.
pub struct SchedulerActor;

impl SchedulerState {
    fn status(&self) -> SchedulerStatus {
        SchedulerStatus {
            pending: self.book.pending().len(),
            pending_pods: (self.book.pending().values())
                .take(PENDING_LISTED)
                .map(|pod| PendingPod {
                    uid: pod.uid.clone(),
                    pod: pod.key(),
                    requests: pod.requests.to_quantity_map(),
                })
                .collect(),
            nominated: self.book.nominated_count(),
            unschedulable: self.book.unschedulable().clone(),
            batching: self.window.is_some(),
            last_round: self.last_round.clone(),
            rounds: self.round,
            last_planning_round: self.last_planning_round,
        }
    }

    fn open_or_extend_window(&mut self, myself: &ActorRef<SchedulerMsg>) {
        let now = Instant::now();
        match &mut self.window {
            Some((_, last)) => *last = now,
            None => self.window = Some((now, now)),
        }
        if !self.tick_armed {
            self.tick_armed = true;
            myself.send_after(self.ctx.settings.batch_idle, || SchedulerMsg::Tick);
        }
    }

    /// Opens a batch window unless one is open: something changed that may let pods still
    /// pending be placed now, but it is no new pod, so it does not hold an open batch back.
    fn wake(&mut self, myself: &ActorRef<SchedulerMsg>) {
        if self.window.is_none() && self.round_due() {
            self.open_or_extend_window(myself);
        }
    }

    /// Whether a round has anything to do: pods pending, a static pool short, buffers to
    /// keep.
    fn round_due(&self) -> bool {
        !self.book.pending().is_empty() || self.static_due || self.buffers_due
    }

    /// Arms the retry timer while any pod is pending or nominated, or buffers are kept.
    fn arm_retry(&mut self, myself: &ActorRef<SchedulerMsg>) {
        let idle = self.book.idle() && self.buffers.is_empty();
        if !self.retry_armed && !idle {
            self.retry_armed = true;
            myself.send_after(self.ctx.settings.pending_retry, || SchedulerMsg::Retry);
        }
    }

    /// Checks the waits of nominated pods and of pods left on running nodes, and carries out
    /// what [`nominations::check`] decides: pods whose nomination expired are pending again,
    /// nodes that did not take a left pod are refused to it. The check is journaled with its
    /// outcome whenever a clock ran.
    async fn check_nominations(&mut self) -> Result<(), ActorProcessingErr> {
        if !self.book.waiting() {
            return Ok(());
        }
        let nodes = self.ctx.cluster.nodes().await;
        let check = self.nomination_check(&nodes);
        let outcome = nominations::check(&check);
        let mut events = Vec::new();
        if outcome.worth_recording(&check) {
            events.push(DomainEvent::NominationsChecked(Box::new(
                NominationRecord {
                    check,
                    outcome: outcome.clone(),
                },
            )));
        }
        for (expired, pod) in self.book.checked(&outcome) {
            if let Some(pod) = pod {
                if expired.nodeclaim.is_empty() {
                    info!(node = %expired.node, %pod, "kube-scheduler did not bind a pod to the running node the round found for it; planning it elsewhere.");
                } else {
                    info!(nodeclaim = %expired.nodeclaim, node = %expired.node, %pod, "kube-scheduler did not bind a nominated pod to its Ready node; planning it again.");
                }
            }
            events.push(DomainEvent::NominationExpired {
                uid: expired.uid.clone(),
                nodeclaim: expired.nodeclaim.clone(),
                node: expired.node.clone(),
            });
        }
        self.ctx.record(&events)
    }

    /// What a nomination check decides from: the launched NodeClaims with nominated pods and
    /// their clocks, the pods left on running nodes, the nodes they refer to, and whether
    /// other pods are in flight.
    fn nomination_check(&self, nodes: &[karpenter_core::ports::NodeInfo]) -> NominationCheck {
        let (claims, in_flight_elsewhere) = self.book.nominations();
        let left = self.book.left().waiting();
        let nodes = nodes
            .iter()
            .filter(|n| {
                claims.iter().any(|c| c.provider_id == n.provider_id)
                    || left.iter().any(|l| l.node == n.name)
            })
            .map(NodeFacts::of)
            .collect();
        NominationCheck {
            at_ms: self.ctx.journal.now_ms(),
            window_ms: i64::try_from(self.ctx.settings.nomination_window.as_millis())
                .unwrap_or(i64::MAX),
            nodes,
            claims,
            left,
            in_flight_elsewhere,
        }
    }

    /// What the round decides from: the pending pods, the NodePools as they are now (with
    /// their instance types), the nodes and the NodeClaims on their way, the daemonsets.
    /// A NodePool that is not Ready is left out, as upstream's provisioner leaves it, and
    /// said so when that changes.
    async fn gather(&mut self) -> SchedulingInput {
        let mut templates = Vec::new();
        let mut static_pools = Vec::new();
        let mut not_ready = BTreeMap::new();
        for pool in &self.pools {
            match ractor::call_t!(pool, NodePoolMsg::GetTemplate, 30_000) {
                Ok(Ok((template, Some(replicas)))) => {
                    static_pools.push(StaticPool { template, replicas })
                }
                Ok(Ok((template, None))) => templates.push(template),
                Ok(Err(why)) => {
                    not_ready.insert(why.nodepool.clone(), why);
                }
                Err(error) => warn!(%error, "A NodePool did not answer; planning without it."),
            }
        }
        for (nodepool, why) in &not_ready {
            if self.not_ready.get(nodepool) != Some(why) {
                warn!(%nodepool, reason = why.reason, message = %why.message, "NodePool is not Ready; not provisioning for it.");
            }
        }
        for nodepool in self.not_ready.keys() {
            if !not_ready.contains_key(nodepool) && templates.iter().any(|t| &t.name == nodepool) {
                info!(%nodepool, "NodePool is Ready again.");
            }
        }
        self.not_ready = not_ready;
        let daemonsets = self.ctx.cluster.daemonsets().await;
        let claims = self.book.in_flight();
        let mut nodes = self.ctx.cluster.nodes().await;
        // A held node takes no pods, as if cordoned (and its NodeClaim, having joined, does
        // not count as capacity on its way either).
        for node in nodes.iter_mut().filter(|n| self.book.held(&n.name)) {
            node.unschedulable = true;
        }
        let existing = existing_nodes(
            nodes,
            &claims,
            self.book.on_their_way(),
            // Static pools' nodes lose their startup taints as any.
            &templates
                .iter()
                .chain(static_pools.iter().map(|s| &s.template))
                .cloned()
                .collect::<Vec<_>>(),
            &daemonsets,
        );
        let mut pods = self.book.round_pods();
        if self.ctx.settings.capacity_buffer {
            self.buffers = (self.ctx.cluster.capacity_buffers().await.iter())
                .map(buffers::resolve)
                .collect();
            pods.extend(self.buffers.iter().flat_map(buffers::virtual_pods));
        }
        SchedulingInput {
            pods,
            nodepools: templates,
            static_pools,
            existing: existing.into_iter().map(Arc::new).collect(),
            daemonsets,
            preference_policy: self.ctx.settings.preference_policy,
            min_values_policy: self.ctx.settings.min_values_policy,
            namespace_labels: self.ctx.cluster.namespace_labels().await,
        }
    }

    /// The digest of each NodePool's instance types in `input`, and an
    /// `InstanceTypesObserved` event for each set the journal does not hold yet.
    fn catalogs(&mut self, input: &SchedulingInput) -> (Vec<String>, Vec<DomainEvent>) {
        let mut events = Vec::new();
        let mut catalogs = Vec::new();
        let now = self.ctx.journal.now_ms();
        let remembered = CATALOG_REMEMBERED.as_millis() as i64;
        self.recorded_catalogs
            .retain(|_, used| now - *used < remembered);
        let mut pool_catalogs = HashMap::with_capacity(self.pool_catalogs.len());
        for (template, _) in input.all_pools() {
            let types = &template.instance_types;
            let same = |(kept, _): &(Vec<Arc<InstanceType>>, String)| {
                kept.len() == types.len() && kept.iter().zip(types).all(|(a, b)| Arc::ptr_eq(a, b))
            };
            let digest = match self.pool_catalogs.remove(&template.name).filter(same) {
                Some((_, digest)) => digest,
                None => catalog_digest_of(types.iter().map(|t| {
                    let entry = self.digests.entry(Arc::as_ptr(t).addr());
                    entry.or_insert_with(|| (t.clone(), type_digest(t))).1
                })),
            };
            pool_catalogs.insert(template.name.clone(), (types.clone(), digest.clone()));
            if self.recorded_catalogs.insert(digest.clone(), now).is_none() {
                events.push(DomainEvent::InstanceTypesObserved {
                    digest: digest.clone(),
                    instance_types: template.instance_types.clone(),
                });
            }
            catalogs.push(digest);
        }
        self.pool_catalogs = pool_catalogs;
        // Types no pool lists any more are forgotten once they outnumber those in use.
        let in_use: usize = self.pool_catalogs.values().map(|(t, _)| t.len()).sum();
        if self.digests.len() > 2 * in_use + 64 {
            let addresses: HashSet<usize> = (self.pool_catalogs.values())
                .flat_map(|(types, _)| types.iter().map(|t| Arc::as_ptr(t).addr()))
                .collect();
            self.digests
                .retain(|address, _| addresses.contains(address));
        }
        (catalogs, events)
    }

    /// Solves the round, unless its input equals the last solved round's (a retry while
    /// nothing changed): that round's decisions are reused and the input is not recorded
    /// again.
    fn decide(
        &mut self,
        round: u64,
        input: &SchedulingInput,
        recorded: RoundInput,
    ) -> (SchedulingResult, RoundRun) {
        let input_json = serde_json::to_vec(&recorded).ok();
        let started = std::time::Instant::now();
        let now = self.ctx.journal.now_ms();
        let keep_ms = CATALOG_REMEMBERED.as_millis() as i64;
        // A round solved long ago is solved (and recorded) again: the journal keeper may
        // have trimmed its input away.
        let repeated = (self.last_solved.as_ref())
            .and_then(|last| last.repeated_by(input_json.as_deref(), now, keep_ms))
            .map(|(round, result)| (result.clone(), Some(round)));
        let (result, repeats) = match repeated {
            Some(repeated) => repeated,
            None => {
                let result = solve_cached(input, &self.ctx.pools);
                self.last_solved = Some(LastSolved::new(round, input_json, now, result.clone()));
                (result, None)
            }
        };
        let duration_us = started.elapsed().as_micros() as u64;
        if repeats.is_none() {
            // The metric is the solver's time; a repeat did not run it.
            self.ctx.metrics.scheduling_round(duration_us as f64 / 1e6);
        }
        let run = RoundRun {
            round,
            pods: input.pods.len(),
            duration_us,
            input: repeats.is_none().then_some(recorded),
            repeats,
        };
        (result, run)
    }

    async fn run_round(&mut self) -> Result<(), ActorProcessingErr> {
        let only_buffers = self.book.pending().is_empty() && !self.static_due;
        self.round += 1;
        self.static_due = false;
        self.buffers_due = false;
        let round = self.round;
        let span = info_span!("round", round, pods = self.book.pending().len());
        let _entered = span.enter();
        let input = self.gather().await;
        let ignored = input.pods.iter().filter(|p| p.blocked.is_some()).count();
        self.ctx.metrics.set_ignored_pods(ignored);
        let (catalogs, mut events) = self.catalogs(&input);
        let recorded = RoundInput::record(&input, &catalogs);
        let (result, run) = self.decide(round, &input, recorded);
        if only_buffers && run.repeats.is_some() && events.is_empty() {
            // Buffers kept, nothing changed: the round it repeats stands, unrecorded again.
            self.round -= 1;
            return Ok(());
        }
        self.buffer_statuses(&result);
        let plans = plans(&result, round, self.ctx.settings.nodeclaim_name_seed);
        let nodeclaims = plans.iter().map(|(p, _)| p.nodeclaim.clone()).collect();
        let record = round_record(run, &result, nodeclaims);
        // The catalogs a round refers to come before it.
        events.push(DomainEvent::RoundCompleted(Box::new(record.clone())));
        events.extend(
            plans
                .iter()
                .map(|(plan, _)| DomainEvent::NodeClaimPlanned(Box::new(plan.clone()))),
        );
        self.ctx.record(&events)?;
        match record.repeats {
            // A retry while nothing changed: worth a line only when debugging.
            Some(of) => debug!(
                repeats = of,
                unschedulable = record.unschedulable.len(),
                "Scheduling round repeated an earlier round's input and decisions."
            ),
            None => info!(
                nodeclaims = plans.len(),
                bindings = record.bindings.len(),
                unschedulable = record.unschedulable.len(),
                duration_us = record.duration_us,
                "Scheduling round done."
            ),
        }
        for pool in input.static_pools.iter().filter(|p| p.shortfall() > 0) {
            let name = &pool.template.name;
            let planned = result
                .new_claims
                .iter()
                .filter(|c| &c.nodepool == name)
                .count();
            if planned == 0 {
                warn!(nodepool = %name, replicas = pool.replicas, nodes = pool.template.node_count, "Static NodePool is short of its replicas, but no instance type it allows is offered now.");
            } else {
                info!(nodepool = %name, replicas = pool.replicas, nodes = pool.template.node_count, launching = planned, "Static NodePool is short of its replicas; launching what it lacks.");
            }
        }
        self.carry_out(&result, plans)?;
        if !record.nodeclaims.is_empty() {
            self.last_planning_round = Some(record.round);
        }
        // The status keeps the decisions, not the (large) inputs.
        self.last_round = Some(RoundRecord {
            input: None,
            ..record
        });
        Ok(())
    }

    /// What the round decided, done: pods placed on in-flight NodeClaims (which take part in
    /// the round under their own name) are nominated to them, while pods placed on nodes stay
    /// pending until kube-scheduler binds them; pods left over get a `FailedScheduling`
    /// Event; each planned NodeClaim is handed to its NodePool with its pods nominated.
    fn carry_out(
        &mut self,
        result: &SchedulingResult,
        plans: Vec<(NodeClaimPlan, Requirements)>,
    ) -> Result<(), ActorProcessingErr> {
        let unschedulable = (result.unschedulable.iter())
            .filter(|u| !buffers::is_virtual_uid(&u.pod))
            .map(|u| (u.pod.as_str(), u.reason.as_str()));
        self.book
            .placed(&result.bindings, unschedulable, self.ctx.journal.now_ms());
        for (uid, reason) in self.book.unschedulable() {
            if let Some(pod) = self.book.pending().get(uid) {
                self.ctx
                    .cluster
                    .emit_event(&pod_object(pod), "FailedScheduling", reason);
            }
        }
        for (plan, requirements) in plans {
            self.hand_over(plan, requirements)?;
        }
        Ok(())
    }

    /// What the round says of each CapacityBuffer, written to its status; the nodes it put
    /// virtual pods on are kept for disruption passes.
    fn buffer_statuses(&mut self, result: &SchedulingResult) {
        self.buffered = buffers::hosts(result);
        let placed = buffers::placed(result);
        for buffer in &self.buffers {
            let key = buffer.key();
            let provisioning = buffers::provisioning(buffer, placed.get(&key));
            if let Some(p) = placed.get(&key).filter(|p| p.new > 0) {
                info!(capacitybuffer = %key, launching_for = p.new, "CapacityBuffer needs new capacity; launching ahead of demand.");
            }
            self.ctx.cluster.buffer_status(&BufferStatus {
                resolved: buffer.clone(),
                provisioning,
            });
        }
    }

    /// Nominates a planned NodeClaim's pods to it and asks its NodePool to create it.
    fn hand_over(
        &mut self,
        plan: NodeClaimPlan,
        requirements: Requirements,
    ) -> Result<(), ActorProcessingErr> {
        self.track(&plan);
        let pool_name = self.ctx.nodepool_actor_name(&plan.nodepool);
        let pool = self
            .pools
            .iter()
            .find(|p| p.get_name().as_deref() == Some(pool_name.as_str()));
        match pool {
            Some(pool) => pool.cast(NodePoolMsg::CreateNodeClaim(
                Box::new(plan),
                Box::new(requirements),
            ))?,
            None => {
                warn!(nodepool = %plan.nodepool, "Planned a NodeClaim for a NodePool without an actor.")
            }
        }
        Ok(())
    }
}

/// The object Events about a pod name.
fn pod_object(pod: &Pod) -> EventObject {
    EventObject::Pod {
        namespace: pod.namespace.clone(),
        name: pod.name.clone(),
    }
}

impl SchedulerState {
    /// A pod kube-scheduler could not place: recorded and batched (once).
    fn pod_pending(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        pod: Pod,
    ) -> Result<(), ActorProcessingErr> {
        if self.book.knows(&pod.uid) {
            return Ok(());
        }
        self.ctx.record(&[DomainEvent::PodPending {
            uid: pod.uid.clone(),
            pod: pod.key(),
            requests: pod.requests.to_quantity_map(),
        }])?;
        self.ctx
            .metrics
            .set_pod_state(&pod.namespace, &pod.name, "", Some("Pending"), None);
        self.book.pend(pod, self.ctx.journal.now_ms());
        self.open_or_extend_window(myself);
        Ok(())
    }

    /// A pod bound: it is no longer pending or nominated.
    fn pod_bound(
        &mut self,
        uid: String,
        pod: String,
        node: String,
    ) -> Result<(), ActorProcessingErr> {
        let bound = self.book.bind(&uid, &node, self.ctx.journal.now_ms());
        if let Some(waited_ms) = bound.waited_ms {
            self.ctx.metrics.pod_bound_after(waited_ms as f64 / 1000.0);
        }
        if let Some(before) = bound.before {
            let old_phase = if before.node.is_empty() {
                "Pending"
            } else {
                "Running"
            };
            self.ctx.metrics.set_pod_state(
                &before.namespace,
                &before.name,
                &node,
                Some("Running"),
                Some((before.node.as_str(), old_phase)),
            );
        }
        self.ctx.record(&[DomainEvent::PodBound {
            uid,
            node,
            pod: Some(pod),
        }])?;
        Ok(())
    }

    /// A pod deleted: forgotten everywhere.
    fn pod_deleted(&mut self, uid: String) -> Result<(), ActorProcessingErr> {
        if let Some(seen) = self.book.delete(&uid) {
            let phase = if seen.node.is_empty() {
                "Pending"
            } else {
                "Running"
            };
            self.ctx.metrics.set_pod_state(
                &seen.namespace,
                &seen.name,
                "",
                None,
                Some((seen.node.as_str(), phase)),
            );
        }
        self.ctx.record(&[DomainEvent::PodDeleted { uid }])?;
        Ok(())
    }

    /// Runs a round once the batch window closed, or looks again when it will.
    async fn tick(&mut self, myself: &ActorRef<SchedulerMsg>) -> Result<(), ActorProcessingErr> {
        self.tick_armed = false;
        let Some((first, last)) = self.window else {
            return Ok(());
        };
        let now = Instant::now();
        let settings = self.ctx.settings;
        if now >= last + settings.batch_idle || now >= first + settings.batch_max {
            self.window = None;
            if self.round_due() {
                self.run_round().await?;
            }
        } else {
            let next = (last + settings.batch_idle).min(first + settings.batch_max);
            self.tick_armed = true;
            myself.send_after(next - now, || SchedulerMsg::Tick);
        }
        Ok(())
    }

    /// The NodePools rounds plan for and the NodeClaims pods are nominated to.
    fn disruption_view(&self) -> SchedulerView {
        SchedulerView {
            nodepools: self
                .pools
                .iter()
                .filter_map(|p| p.get_name())
                .filter_map(|n| {
                    n.strip_prefix(&self.ctx.nodepool_actor_name(""))
                        .map(str::to_owned)
                })
                .collect(),
            nominated: self.book.nominated_claims(),
            round: self.round,
            buffered: self.buffered.clone(),
            scaling_out: self.book.scaling_out(),
        }
    }

    /// The round that would run now, its instance types recorded (so a disruption record
    /// can name them).
    async fn disruption_base(&mut self) -> Result<DisruptionBase, ActorProcessingErr> {
        let input = self.gather().await;
        let (catalogs, events) = self.catalogs(&input);
        self.ctx.record(&events)?;
        Ok(DisruptionBase { input, catalogs })
    }

    /// A planned NodeClaim counted as capacity on its way, with the pending pods planned
    /// onto it nominated to it (each told so with a `Nominated` Event).
    fn track(&mut self, plan: &NodeClaimPlan) {
        for pod in self.book.track(plan) {
            self.ctx.cluster.emit_event(
                &pod_object(pod),
                "Nominated",
                &format!("Pod should schedule on: nodeclaim/{}", plan.nodeclaim),
            );
        }
    }

    /// A disruption command's replacements: counted as capacity on its way, with the pods
    /// that will move reserving their room and pending pods planned beside them nominated.
    fn replacements(
        &mut self,
        plans: Vec<(NodeClaimPlan, Requirements)>,
        moved: Vec<(String, Pod)>,
    ) {
        for (plan, _) in &plans {
            self.track(plan);
        }
        self.book.reserve(moved);
    }

    /// A NodeClaim ended (or was refused): its pods not yet bound are pending again.
    fn nodeclaim_ended(
        &mut self,
        myself: &ActorRef<SchedulerMsg>,
        nodeclaim: String,
        reason: String,
    ) {
        let returned = self.book.claim_ended(&nodeclaim);
        if returned > 0 {
            info!(
                nodeclaim,
                reason,
                pods = returned,
                "NodeClaim ended before its pods bound; they are pending again."
            );
            self.open_or_extend_window(myself);
        }
    }
}

impl ractor::Actor for SchedulerActor {
    type Msg = SchedulerMsg;
    type State = SchedulerState;
    type Arguments = SchedulerArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: SchedulerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(SchedulerState {
            ctx: args.ctx,
            pools: Vec::new(),
            book: PodBook::default(),
            not_ready: BTreeMap::new(),
            window: None,
            static_due: false,
            buffers_due: false,
            buffers: Vec::new(),
            buffered: BTreeSet::new(),
            tick_armed: false,
            retry_armed: false,
            round: args.last_round,
            last_round: None,
            last_planning_round: None,
            recorded_catalogs: args.catalogs,
            digests: HashMap::new(),
            pool_catalogs: HashMap::new(),
            last_solved: None,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            SchedulerMsg::PodPending(pod) => state.pod_pending(&myself, *pod)?,
            SchedulerMsg::Retry => {
                state.retry_armed = false;
                state.check_nominations().await?;
                // Kept buffers are looked at again, as upstream's buffer controller requeues.
                state.buffers_due |= !state.buffers.is_empty();
                state.wake(&myself);
            }
            SchedulerMsg::PodBound { uid, pod, node } => state.pod_bound(uid, pod, node)?,
            SchedulerMsg::PodDeleted { uid } => state.pod_deleted(uid)?,
            SchedulerMsg::Tick => state.tick(&myself).await?,
            SchedulerMsg::StaticPoolShort => {
                state.static_due = true;
                state.wake(&myself);
            }
            SchedulerMsg::BuffersChanged => {
                state.buffers_due = state.ctx.settings.capacity_buffer;
                state.wake(&myself);
            }
            SchedulerMsg::AddNodePool(pool) => {
                if !state.pools.iter().any(|p| p.get_id() == pool.get_id()) {
                    state.pools.push(pool);
                }
                // A new or changed NodePool may place pods no round could.
                state.wake(&myself);
            }
            SchedulerMsg::RemoveNodePool(pool) => {
                state.pools.retain(|p| p.get_id() != pool.get_id())
            }
            SchedulerMsg::NodeClaimLaunched {
                nodeclaim,
                instance,
                labels,
            } => {
                state.book.launched(&nodeclaim, *instance, labels);
            }
            SchedulerMsg::NodeClaimEnded { nodeclaim, reason } => {
                state.nodeclaim_ended(&myself, nodeclaim, reason)
            }
            SchedulerMsg::GetStatus(reply) => {
                let _ = reply.send(state.status());
            }
            SchedulerMsg::DisruptionView(reply) => {
                let _ = reply.send(state.disruption_view());
            }
            SchedulerMsg::DisruptionBase(reply) => {
                let base = state.disruption_base().await?;
                let _ = reply.send(base);
            }
            SchedulerMsg::RecordedCatalogs(reply) => {
                let _ = reply.send(state.recorded_catalogs.keys().cloned().collect());
            }
            SchedulerMsg::HoldNodes {
                nodeclaims,
                nodes,
                force,
                reply,
            } => {
                let _ = reply.send(state.book.hold(&nodeclaims, nodes, force));
            }
            SchedulerMsg::ReleaseNodes(nodes) => {
                state.book.release(&nodes);
                // Released nodes may take pods still pending.
                state.wake(&myself);
            }
            SchedulerMsg::Replacements { plans, moved } => state.replacements(plans, moved),
            SchedulerMsg::ReleaseReservations(claims) => {
                state.book.release_reservations(&claims);
            }
        }
        state.arm_retry(&myself);
        state
            .ctx
            .metrics
            .set_queue_depth(state.book.pending().len());
        Ok(())
    }
}
