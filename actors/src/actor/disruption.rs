//! The disruption controller, one per system as upstream's singleton: every
//! `disruption_poll` while idle, and at once after it acted, it gathers a snapshot (every
//! NodeClaim as its actor knows it, the cluster's pods, PDBs and protections, the NodePools'
//! disruption settings, the round the scheduler would run now) and runs the pure pass of
//! [`karpenter_core::disruption`]: expired NodeClaims are disrupted, and the first method
//! with a command starts it. Commands in flight are moved on every second by
//! [`orchestration::advance`] until their candidates are gone or they are given up.
//!
//! Every decision is journaled (durably, before anything is tainted or launched) with the
//! snapshot it was made from, so `journal verify` can decide it again; every phase a
//! command enters is journaled too, so a restart finishes or rolls back what was in flight.
//! Before each pass, disruption marks no command holds (left by a crash or another leader)
//! are taken back.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tracing::{debug, info, info_span, warn};

use super::messages::*;
use super::{ASK_MS, Context};

mod repair;
mod scores;

use karpenter_core::disruption::observe::{self, ClaimFacts, Observed, PodEvents};
use karpenter_core::disruption::orchestration::{
    self, Action, Command, Member, Phase, Seen, replacement_plans,
};
use karpenter_core::disruption::pass::{self, Decision, PassResult};
use karpenter_core::disruption::{Method, PoolPolicy, Snapshot, reason_label, reason_name};
use karpenter_core::disruption::{statics, validation};
use karpenter_core::events::disruption::{DisruptionInput, DisruptionRecord};
use karpenter_core::events::{DomainEvent, NodeClaimPlan, NodeClaimState, RoundInput};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::model::{Pod, Requirements};
use karpenter_core::ports::EventObject;
use karpenter_core::vocab::labels;

/// How often commands in flight are moved on.
const ADVANCE_EVERY: Duration = Duration::from_secs(1);
/// How long before a `DisruptionBlocked` Event with the same message is recorded again.
const REPORT_AGAIN: Duration = Duration::from_secs(15 * 60);

/// What the disruption controller starts from.
pub struct DisruptionArgs {
    /// Shared context.
    pub ctx: Context,
    /// The scheduler.
    pub scheduler: ActorRef<SchedulerMsg>,
    /// Commands a previous run left unfinished.
    pub start: DisruptionStart,
}

/// The disruption controller's state.
pub struct DisruptionState {
    ctx: Context,
    scheduler: ActorRef<SchedulerMsg>,
    /// Commands in flight, by number.
    commands: BTreeMap<u64, Command>,
    /// When pods last came to or left each node.
    pod_events: PodEvents,
    /// The `Consolidatable` condition last told to each NodeClaim.
    told: BTreeMap<String, bool>,
    /// `DisruptionBlocked` messages reported, per NodeClaim, with when: reported again only
    /// when the message changes or [`REPORT_AGAIN`] has passed (as upstream dedupes its
    /// disruption Events).
    reported: BTreeMap<String, (String, i64)>,
    /// NodeClaims told they expired.
    expiring: BTreeSet<String>,
    /// `Unconsolidatable` messages reported, per NodeClaim, deduplicated as `reported`.
    unconsolidatable: BTreeMap<String, (String, i64)>,
    /// `NodeRepairBlocked` messages reported, per NodeClaim, deduplicated as `reported`.
    repair_blocked: BTreeMap<String, (String, i64)>,
    /// The consolidation command waiting for validation.
    validating: Option<Validating>,
    /// The fingerprint of the inputs consolidation last found nothing in: not searched
    /// again until something changes.
    consolidated: Option<u64>,
    /// The candidates the last single-node search could not consolidate: the next one
    /// tries them after the others.
    refused: BTreeSet<String>,
    status: DisruptionStatus,
    pass_armed: bool,
    advance_armed: bool,
}

/// The disruption controller.
pub struct DisruptionActor;

/// A consolidation command decided and waiting [`Settings::consolidation_validation`] to be
/// checked again before it starts, with what it was decided from.
///
/// [`Settings::consolidation_validation`]: super::Settings::consolidation_validation
struct Validating {
    decision: Decision,
    gathered: Gathered,
    result: PassResult,
}

/// One pass's inputs.
struct Gathered {
    claims: Vec<ClaimFacts>,
    /// Each launched NodeClaim's image (the repair metric's `image_id`).
    images: BTreeMap<String, String>,
    snapshot: Snapshot,
    /// The scheduler's next round, when the pass may simulate.
    base: Option<DisruptionBase>,
    /// The last scheduling round's number.
    round: u64,
    /// Nodes carrying `karpenter.sh/disrupted` while still schedulable.
    tainted: BTreeSet<String>,
    /// The candidates the last single-node search could not consolidate.
    refused: BTreeSet<String>,
}

impl DisruptionState {
    fn now_ms(&self) -> i64 {
        self.ctx.journal.now_ms()
    }

    fn arm_pass(&mut self, myself: &ActorRef<DisruptionMsg>) {
        if !self.pass_armed {
            self.pass_armed = true;
            myself.send_after(self.ctx.settings.disruption_poll, || DisruptionMsg::Pass {
                timer: true,
            });
        }
    }

    fn arm_advance(&mut self, myself: &ActorRef<DisruptionMsg>) {
        if !self.advance_armed && !self.commands.is_empty() {
            self.advance_armed = true;
            myself.send_after(ADVANCE_EVERY, || DisruptionMsg::Advance);
        }
    }

    /// Tells a NodeClaim's actor an input; a NodeClaim whose actor is gone needs nothing.
    fn tell(&self, nodeclaim: &str, input: Input) {
        if let Some(actor) = self.ctx.nodeclaim_actor(nodeclaim) {
            let _ = actor.cast(NodeClaimMsg::Input(input));
        }
    }

    /// Every live NodeClaim as its actor knows it (an actor that does not answer is left
    /// out of this pass).
    async fn claims(&self) -> (Vec<ClaimFacts>, BTreeMap<String, String>) {
        let mut out = Vec::new();
        let mut images = BTreeMap::new();
        for (name, actor) in self.ctx.nodeclaim_actors() {
            match ractor::call_t!(actor, NodeClaimMsg::GetStatus, ASK_MS) {
                Ok(status) => {
                    if let Some(instance) = &status.instance {
                        images.insert(status.name.clone(), instance.image_id.clone());
                    }
                    out.push(status.facts)
                }
                Err(error) => {
                    debug!(nodeclaim = %name, %error, "A NodeClaim did not answer; leaving it out of this pass.")
                }
            }
        }
        (out, images)
    }

    /// The disruption settings of the NodePools the scheduler plans for (all of them when
    /// the scheduler did not answer).
    async fn pools(&self, view: Option<&SchedulerView>) -> Vec<PoolPolicy> {
        let mut out = Vec::new();
        for (name, actor) in self.ctx.nodepool_actors() {
            if view.is_some_and(|v| !v.nodepools.contains(&name)) {
                continue;
            }
            match ractor::call_t!(actor, NodePoolMsg::GetPolicy, ASK_MS) {
                Ok(policy) => out.push(policy),
                Err(error) => {
                    warn!(nodepool = %name, %error, "A NodePool did not answer; its nodes are not disrupted this pass.")
                }
            }
        }
        out
    }

    async fn gather(&mut self) -> Gathered {
        let now_ms = self.now_ms();
        let (claims, images) = self.claims().await;
        let view = self.ctx.cluster.disruption_view().await;
        let scheduler = match ractor::call_t!(self.scheduler, SchedulerMsg::DisruptionView, ASK_MS)
        {
            Ok(view) => Some(view),
            Err(error) => {
                warn!(%error, "The scheduler did not answer; every node may have pods nominated, so nothing is disrupted this pass.");
                None
            }
        };
        let pools = self.pools(scheduler.as_ref()).await;
        self.pod_events.observe(
            claims.iter().filter_map(|c| c.node.as_deref()),
            &view.pods,
            now_ms,
        );
        // Without the scheduler's word, every NodeClaim counts as nominated.
        let nominated = match &scheduler {
            Some(s) => s.nominated.clone(),
            None => claims.iter().map(|c| c.nodeclaim.clone()).collect(),
        };
        let buffered = scheduler
            .as_ref()
            .map(|s| s.buffered.clone())
            .unwrap_or_default();
        let scaling_out = scheduler
            .as_ref()
            .map(|s| s.scaling_out.clone())
            .unwrap_or_default();
        let policies = repair::policies(&self.ctx.settings);
        let snapshot = observe::snapshot(Observed {
            now_ms,
            claims: &claims,
            view: &view,
            pools: &pools,
            nominated: &nominated,
            commands: &self.commands,
            pod_events: &self.pod_events,
            spot_to_spot: self.ctx.settings.spot_to_spot,
            static_capacity: self.ctx.settings.static_capacity,
            buffered: &buffered,
            repair: self.ctx.settings.node_repair.then_some(policies.as_slice()),
            scaling_out: &scaling_out,
        });
        let base = if scheduler.is_some() && pass::needs_base(&snapshot) {
            match ractor::call_t!(self.scheduler, SchedulerMsg::DisruptionBase, ASK_MS) {
                Ok(base) => Some(base),
                Err(error) => {
                    warn!(%error, "The scheduler did not give its next round; no command that moves pods this pass.");
                    None
                }
            }
        } else {
            None
        };
        let nodes = self.ctx.cluster.nodes().await;
        // Every pass reads every node; the per-node gauges come up to date with it.
        self.ctx.metrics.set_nodes(&nodes);
        let tainted = nodes
            .into_iter()
            .filter(|n| {
                !n.unschedulable && n.taints.iter().any(|t| t.key == labels::DISRUPTED_TAINT)
            })
            .map(|n| n.name)
            .collect();
        Gathered {
            claims,
            images,
            snapshot,
            base,
            round: scheduler.map_or(0, |s| s.round),
            tainted,
            refused: self.refused.clone(),
        }
    }

    /// One pass: stale marks taken back, conditions and metrics brought up to date,
    /// expired NodeClaims disrupted, and the command the first method has, started.
    async fn pass(&mut self, myself: &ActorRef<DisruptionMsg>) -> Result<(), ActorProcessingErr> {
        if self.validating.is_some() {
            // As upstream's loop, which waits out a validation before it looks again.
            return Ok(());
        }
        let span = info_span!("disruption_pass", pass = self.status.passes + 1);
        let _entered = span.enter();
        let gathered = self.gather().await;
        for nodeclaim in observe::stale_marks(&gathered.claims, &gathered.tainted, &self.commands) {
            info!(%nodeclaim, "Taking back a disruption mark no command holds.");
            self.tell(&nodeclaim, Input::MarkDisrupted { reason: None });
        }
        let started = std::time::Instant::now();
        let base_input = gathered.base.as_ref().map(|b| &b.input);
        // Node repair's policies are the snapshot's (so `journal verify` repairs alike).
        let options = pass::Options {
            consolidated: self.consolidated,
            unconsolidatable: &gathered.refused,
            cache: Some(&self.ctx.pools),
            catalogs: gathered.base.as_ref().map(|b| &b.catalogs[..]),
            ..pass::Options::default()
        };
        let result = pass::run_with(&gathered.snapshot, base_input, options);
        self.consolidated = result.consolidated;
        if let Some(refused) = &result.unconsolidatable_next {
            self.refused.clone_from(refused);
        }
        let duration = started.elapsed();
        self.status.passes += 1;
        self.observe(&gathered.snapshot, &result, duration);
        self.expire(&gathered.snapshot, &result.expired);
        self.repair(&gathered, &result.repair);
        self.scale_down(&result.overprovisioned);
        if !result.static_short.is_empty() {
            debug!(nodepools = ?result.static_short, "Static NodePools are short of their replicas; telling the scheduler.");
            let _ = self.scheduler.cast(SchedulerMsg::StaticPoolShort);
        }
        let mut command = None;
        if let Some(decision) = result.command.clone() {
            if self.ctx.settings.disruption_enabled && decision.method.consolidates() {
                info!(
                    method = decision.method.name(),
                    candidates = ?decision.candidates,
                    savings = decision.savings,
                    "Consolidation command decided; validating it before it starts."
                );
                self.status.validating = Some((
                    decision.method.name().to_owned(),
                    decision.candidates.clone(),
                ));
                self.validating = Some(Validating {
                    decision,
                    gathered,
                    result,
                });
                myself.send_after(self.ctx.settings.consolidation_validation, || {
                    DisruptionMsg::Validate
                });
                return Ok(());
            } else if self.ctx.settings.disruption_enabled {
                command = self
                    .start_command(myself, decision, &gathered, &result)
                    .await?;
            } else {
                debug!("Disruption is off; not acting on the pass's command.");
            }
        }
        if let Some(summary) = self.status.last_pass.as_mut() {
            summary.command = command;
        }
        if command.is_some() {
            // At once after acting, as upstream.
            myself.send_message(DisruptionMsg::Pass { timer: false })?;
        }
        Ok(())
    }

    /// The consolidation command waiting for validation is checked against the cluster as
    /// it is now: started if it still holds, given up with a `ConsolidationRejected` Event
    /// on each candidate if not. Either way a pass follows at once.
    async fn validate(
        &mut self,
        myself: &ActorRef<DisruptionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        let Some(validating) = self.validating.take() else {
            return Ok(());
        };
        self.status.validating = None;
        let span = info_span!(
            "disruption_validation",
            method = validating.decision.method.name()
        );
        let _entered = span.enter();
        let now = self.gather().await;
        let base = now.base.as_ref().map(|b| &b.input);
        match validation::validate_cached(
            &validating.decision,
            &now.snapshot,
            base,
            Some(&self.ctx.pools),
        ) {
            Ok(()) => {
                let started = self
                    .start_command(
                        myself,
                        validating.decision,
                        &validating.gathered,
                        &validating.result,
                    )
                    .await?;
                if let Some(summary) = self.status.last_pass.as_mut() {
                    summary.command = started;
                }
            }
            Err(rejected) => {
                self.status.rejected += 1;
                info!(%rejected, candidates = ?validating.decision.candidates, "Consolidation command rejected at validation.");
                let message = format!("Consolidation was rejected: {rejected}");
                for name in &validating.decision.candidates {
                    let object = event_object(&now.snapshot, name);
                    self.ctx
                        .cluster
                        .emit_event(&object, "ConsolidationRejected", &message);
                }
            }
        }
        myself.send_message(DisruptionMsg::Pass { timer: false })?;
        Ok(())
    }

    /// Conditions, metrics, `DisruptionBlocked` Events and the pass summary.
    fn observe(&mut self, snapshot: &Snapshot, result: &PassResult, duration: Duration) {
        let metrics = &self.ctx.metrics;
        for (nodeclaim, condition) in &result.consolidatable {
            let wanted = condition.is_true();
            if self.told.get(nodeclaim) != Some(&wanted) {
                self.told.insert(nodeclaim.clone(), wanted);
                self.tell(nodeclaim, Input::Consolidatable(wanted));
            }
        }
        self.told
            .retain(|n, _| result.consolidatable.contains_key(n));
        for (method, eligible) in &result.eligible {
            metrics.set_disruption_eligible(method.as_str(), *eligible);
        }
        metrics.disruption_evaluation("pass", duration.as_secs_f64());
        let mut allowed = BTreeMap::new();
        for ((pool, reason), left) in &result.allowed {
            metrics.set_allowed_disruptions(pool, reason_label(*reason), *left);
            allowed.insert(format!("{pool}/{}", reason_name(*reason)), *left);
        }
        for (pool, error) in &result.budget_errors {
            warn!(nodepool = %pool, %error, "A disruption budget cannot be read; it allows nothing.");
        }
        let mut blocked = BTreeMap::new();
        for b in &result.blocked {
            if fresh_report(&self.reported, &b.nodeclaim, &b.message, snapshot.now_ms) {
                let object = match &b.node {
                    Some(node) => EventObject::Node(node.clone()),
                    None => EventObject::NodeClaim(b.nodeclaim.clone()),
                };
                self.ctx
                    .cluster
                    .emit_event(&object, "DisruptionBlocked", &b.message);
                self.reported
                    .insert(b.nodeclaim.clone(), (b.message.clone(), snapshot.now_ms));
            }
            blocked.insert(b.nodeclaim.clone(), b.message.clone());
        }
        for (nodeclaim, why) in &result.unconsolidatable {
            let message = why.to_string();
            if fresh_report(&self.unconsolidatable, nodeclaim, &message, snapshot.now_ms) {
                let object = event_object(snapshot, nodeclaim);
                self.ctx
                    .cluster
                    .emit_event(&object, "Unconsolidatable", &message);
                self.unconsolidatable
                    .insert(nodeclaim.clone(), (message, snapshot.now_ms));
            }
        }
        scores::observe(&self.ctx, snapshot, result);
        for method in &result.timed_out {
            warn!(
                method = method.name(),
                "Consolidation stopped at its timeout; it goes on from the best command found."
            );
            metrics.consolidation_timeout(method.consolidation_type());
        }
        // NodeClaims gone are forgotten.
        self.reported
            .retain(|n, _| result.consolidatable.contains_key(n));
        self.unconsolidatable
            .retain(|n, _| result.consolidatable.contains_key(n));
        self.status.last_pass = Some(PassSummary {
            at_ms: snapshot.now_ms,
            nodeclaims: snapshot.nodes.len(),
            eligible: result
                .eligible
                .iter()
                .map(|(m, n)| (m.name().to_owned(), *n))
                .collect(),
            allowed,
            command: None,
            blocked,
            duration_us: u64::try_from(duration.as_micros()).unwrap_or(u64::MAX),
            simulations: result.simulations,
        });
        self.status.simulations += result.simulations as u64;
    }

    /// Expired NodeClaims are disrupted at once, outside budgets (each told once).
    fn expire(&mut self, snapshot: &Snapshot, expired: &[String]) {
        for nodeclaim in expired {
            if self.expiring.insert(nodeclaim.clone()) {
                info!(%nodeclaim, "NodeClaim expired; disrupting it.");
                self.status.expired += 1;
                self.tell(
                    nodeclaim,
                    Input::Disrupt {
                        reason: "expired".into(),
                    },
                );
            }
        }
        // NodeClaims gone are forgotten.
        let live: BTreeSet<&String> = snapshot.nodes.iter().map(|n| &n.nodeclaim).collect();
        self.expiring.retain(|n| live.contains(n));
    }

    /// A static NodePool's NodeClaims beyond its replicas are deleted at once, outside
    /// budgets, as upstream's static deprovisioning (each drain still waits for PDBs until
    /// its terminationGracePeriod). Each is told once; one told already is deleting, so a
    /// later pass does not count it as running.
    fn scale_down(&mut self, overprovisioned: &[String]) {
        for nodeclaim in overprovisioned {
            if self.expiring.insert(nodeclaim.clone()) {
                info!(%nodeclaim, "Static NodePool has more nodes than replicas; deleting this NodeClaim.");
                self.tell(
                    nodeclaim,
                    Input::Disrupt {
                        reason: statics::SCALE_DOWN_REASON.into(),
                    },
                );
            }
        }
    }

    /// Starts a command: the scheduler lets go of its nodes, the decision (with its
    /// replacements) is journaled durably, the candidates are marked and the replacements
    /// created. `None` when the scheduler nominated pods to a candidate meanwhile.
    async fn start_command(
        &mut self,
        myself: &ActorRef<DisruptionMsg>,
        decision: Decision,
        gathered: &Gathered,
        result: &PassResult,
    ) -> Result<Option<u64>, ActorProcessingErr> {
        let snapshot = &gathered.snapshot;
        let id = self.status.last_command + 1;
        let candidates: Vec<Member> = decision
            .candidates
            .iter()
            .map(|name| Member {
                nodeclaim: name.clone(),
                node: snapshot
                    .nodes
                    .iter()
                    .find(|n| &n.nodeclaim == name)
                    .and_then(|n| n.node.clone()),
            })
            .collect();
        let nodes: Vec<String> = candidates.iter().filter_map(|m| m.node.clone()).collect();
        let held = ractor::call_t!(
            self.scheduler,
            |reply| SchedulerMsg::HoldNodes {
                nodeclaims: decision.candidates.clone(),
                nodes: nodes.clone(),
                force: false,
                reply,
            },
            ASK_MS
        )?;
        if let Err(nominated) = held {
            info!(
                ?nominated,
                "Pods were nominated to a candidate meanwhile; not disrupting it this pass."
            );
            return Ok(None);
        }
        let round = gathered.round;
        let plans = replacement_plans(
            &decision.replacements,
            id,
            round,
            self.ctx.settings.nodeclaim_name_seed,
        );
        let moved = moved_pods(&decision, snapshot, &plans);
        let record = DisruptionRecord {
            command: id,
            method: decision.method,
            candidates,
            replacements: plans.iter().map(|(p, _)| p.nodeclaim.clone()).collect(),
            moved: moved.iter().map(|(_, p)| p.uid.clone()).collect(),
            savings: decision.savings,
            allowed: result
                .allowed
                .iter()
                .filter(|((_, reason), _)| *reason == decision.method.reason())
                .map(|((pool, _), left)| (pool.clone(), *left))
                .collect(),
            input: Some(Box::new(DisruptionInput {
                snapshot: snapshot.clone(),
                // What the command was decided from: the round its simulation started
                // from, or the static pools' templates its replacements were made of.
                base: (decision.simulation.is_some() || decision.method == Method::StaticDrift)
                    .then_some(gathered.base.as_ref())
                    .flatten()
                    .map(|b| RoundInput::record(&b.input, &b.catalogs)),
                unconsolidatable: gathered.refused.clone(),
            })),
        };
        let mut events = vec![DomainEvent::DisruptionDecided(Box::new(record.clone()))];
        events.extend(
            plans
                .iter()
                .map(|(plan, _)| DomainEvent::NodeClaimPlanned(Box::new(plan.clone()))),
        );
        self.ctx.record_durably(&events)?;
        self.status.last_command = id;
        let consolidation_type = decision.method.consolidation_type();
        let kind = if plans.is_empty() {
            "delete"
        } else {
            "replace"
        };
        self.ctx
            .metrics
            .disruption_decision(kind, decision.method.as_str(), consolidation_type);
        info!(
            command = id,
            method = decision.method.name(),
            candidates = ?decision.candidates,
            replacements = ?record.replacements,
            savings = decision.savings,
            "Disruption command decided."
        );
        let command = Command::started(&record, self.now_ms());
        self.commands.insert(id, command.clone());
        self.act(id, orchestration::start(&command)).await?;
        if !plans.is_empty() {
            self.launch(id, plans, moved).await?;
        }
        self.advance_one(id).await?;
        self.arm_advance(myself);
        Ok(Some(id))
    }

    /// Creates a command's replacements (the scheduler counts them and keeps the moved
    /// pods' room first); a pool that refuses one gives the command up.
    async fn launch(
        &mut self,
        id: u64,
        plans: Vec<(NodeClaimPlan, Requirements)>,
        moved: Vec<(String, Pod)>,
    ) -> Result<(), ActorProcessingErr> {
        self.scheduler.cast(SchedulerMsg::Replacements {
            plans: plans.clone(),
            moved,
        })?;
        for (plan, requirements) in plans {
            let name = plan.nodeclaim.clone();
            let refused = match self.ctx.nodepool_actor(&plan.nodepool) {
                None => Some(format!("NodePool {} is gone", plan.nodepool)),
                Some(pool) => match ractor::call_t!(
                    pool,
                    |reply| NodePoolMsg::CreateReplacement(
                        Box::new(plan),
                        Box::new(requirements),
                        reply
                    ),
                    ASK_MS
                ) {
                    Ok(Ok(())) => None,
                    Ok(Err(limit)) => Some(format!("limits: {limit}")),
                    Err(error) => Some(error.to_string()),
                },
            };
            if let Some(why) = refused {
                let Some(command) = self.commands.get(&id).cloned() else {
                    return Ok(());
                };
                let seen = self.seen(&command).await;
                let actions = orchestration::give_up(
                    &command,
                    &seen,
                    format!("replacement {name} was not created: {why}"),
                );
                return self.act(id, actions).await;
            }
        }
        Ok(())
    }

    /// What each NodeClaim of a command is now.
    async fn seen(&self, command: &Command) -> BTreeMap<String, Seen> {
        let mut out = BTreeMap::new();
        let names = command
            .candidates
            .iter()
            .map(|m| &m.nodeclaim)
            .chain(&command.replacements);
        for name in names {
            let Some(actor) = self.ctx.nodeclaim_actor(name) else {
                continue;
            };
            let seen = match ractor::call_t!(actor, NodeClaimMsg::GetStatus, ASK_MS) {
                Ok(status) => match status.state {
                    NodeClaimState::Initialized => Seen::Initialized,
                    NodeClaimState::Draining | NodeClaimState::Terminating => Seen::Deleting,
                    NodeClaimState::Terminated => {
                        Seen::Gone(status.reason.clone().unwrap_or_default())
                    }
                    _ => Seen::Coming,
                },
                // Busy is not gone: looked at again at the next advance.
                Err(_) => Seen::Coming,
            };
            out.insert(name.clone(), seen);
        }
        out
    }

    async fn advance_one(&mut self, id: u64) -> Result<(), ActorProcessingErr> {
        let Some(command) = self.commands.get(&id).cloned() else {
            return Ok(());
        };
        let seen = self.seen(&command).await;
        let actions = orchestration::advance(&command, &seen, self.now_ms());
        self.act(id, actions).await
    }

    /// Carries out a command's actions.
    async fn act(&mut self, id: u64, actions: Vec<Action>) -> Result<(), ActorProcessingErr> {
        for action in actions {
            let Some(command) = self.commands.get(&id).cloned() else {
                return Ok(());
            };
            let reason = command.reason();
            match action {
                Action::Taint(members) => {
                    for m in members {
                        self.tell(
                            &m.nodeclaim,
                            Input::MarkDisrupted {
                                reason: Some(reason_name(reason).to_owned()),
                            },
                        );
                    }
                }
                Action::Untaint(members) => {
                    for m in members {
                        self.tell(&m.nodeclaim, Input::MarkDisrupted { reason: None });
                    }
                }
                Action::Delete(names) => {
                    for name in names {
                        self.tell(
                            &name,
                            Input::Disrupt {
                                reason: reason_label(reason).to_owned(),
                            },
                        );
                    }
                }
                Action::Emit {
                    object,
                    reason,
                    message,
                } => self.ctx.cluster.emit_event(&object, reason, &message),
                Action::ReportedWaiting => {
                    if let Some(c) = self.commands.get_mut(&id) {
                        c.waiting_reported = true;
                    }
                }
                Action::Enter(phase) => self.enter(id, phase)?,
            }
        }
        Ok(())
    }

    /// A command enters a phase: journaled; the scheduler lets go of the room kept for the
    /// moved pods once the candidates drain, and of the candidates' nodes once it ends.
    fn enter(&mut self, id: u64, phase: Phase) -> Result<(), ActorProcessingErr> {
        self.ctx.record(&[DomainEvent::DisruptionProgressed {
            command: id,
            phase: phase.clone(),
        }])?;
        let Some(command) = self.commands.get_mut(&id) else {
            return Ok(());
        };
        command.phase = phase.clone();
        let command = command.clone();
        match &phase {
            Phase::Abandoned(why) => {
                warn!(command = id, %why, "Disruption command given up.")
            }
            phase => info!(
                command = id,
                phase = phase.name(),
                "Disruption command moved on."
            ),
        }
        if phase != Phase::WaitingReadiness {
            self.scheduler.cast(SchedulerMsg::ReleaseReservations(
                command.replacements.clone(),
            ))?;
        }
        if phase.ended() {
            self.scheduler.cast(SchedulerMsg::ReleaseNodes(
                command
                    .candidates
                    .iter()
                    .filter_map(|m| m.node.clone())
                    .collect(),
            ))?;
            let key = format!("{}/{}", command.method.name(), phase.name());
            *self.status.ended.entry(key).or_default() += 1;
            self.commands.remove(&id);
        }
        Ok(())
    }

    async fn advance(
        &mut self,
        myself: &ActorRef<DisruptionMsg>,
    ) -> Result<(), ActorProcessingErr> {
        self.advance_armed = false;
        let ids: Vec<u64> = self.commands.keys().copied().collect();
        for id in ids {
            self.advance_one(id).await?;
        }
        self.arm_advance(myself);
        Ok(())
    }

    /// Commands a previous run left unfinished: their nodes held again, their candidates
    /// marked again while they wait for replacements.
    async fn resume(&mut self) -> Result<(), ActorProcessingErr> {
        let commands: Vec<Command> = self.commands.values().cloned().collect();
        for command in commands {
            info!(
                command = command.id,
                phase = command.phase.name(),
                "Resuming a disruption command from the journal."
            );
            let held = ractor::call_t!(
                self.scheduler,
                |reply| SchedulerMsg::HoldNodes {
                    nodeclaims: command
                        .candidates
                        .iter()
                        .map(|m| m.nodeclaim.clone())
                        .collect(),
                    nodes: command
                        .candidates
                        .iter()
                        .filter_map(|m| m.node.clone())
                        .collect(),
                    force: true,
                    reply,
                },
                ASK_MS
            )?;
            // Forced: it cannot be refused.
            let _ = held;
            self.act(command.id, orchestration::resume(&command))
                .await?;
        }
        Ok(())
    }
}

/// What an Event about `nodeclaim` is recorded on: its Node, or the NodeClaim before it has
/// one.
fn event_object(snapshot: &Snapshot, nodeclaim: &str) -> EventObject {
    match snapshot
        .nodes
        .iter()
        .find(|n| n.nodeclaim == nodeclaim)
        .and_then(|n| n.node.clone())
    {
        Some(node) => EventObject::Node(node),
        None => EventObject::NodeClaim(nodeclaim.to_owned()),
    }
}

/// Whether `message` about `nodeclaim` is to be reported: it was not, it changed, or
/// [`REPORT_AGAIN`] has passed since it was.
fn fresh_report(
    reported: &BTreeMap<String, (String, i64)>,
    nodeclaim: &str,
    message: &str,
    now_ms: i64,
) -> bool {
    let again = i64::try_from(REPORT_AGAIN.as_millis()).unwrap_or(i64::MAX);
    match reported.get(nodeclaim) {
        Some((last, at)) => last != message || now_ms.saturating_sub(*at) >= again,
        None => true,
    }
}

/// The pods that move to each replacement: the candidates' pods the simulation placed
/// there.
fn moved_pods(
    decision: &Decision,
    snapshot: &Snapshot,
    plans: &[(NodeClaimPlan, Requirements)],
) -> Vec<(String, Pod)> {
    let Some(simulation) = &decision.simulation else {
        return Vec::new();
    };
    let pods: BTreeMap<&str, &Pod> = snapshot
        .nodes
        .iter()
        .filter(|n| decision.candidates.contains(&n.nodeclaim))
        .flat_map(|n| n.pods.iter())
        .map(|p| (p.pod.uid.as_str(), &p.pod))
        .collect();
    let mut out = Vec::new();
    for (plan, _) in plans {
        for uid in &plan.pods {
            if simulation.moved.contains(uid)
                && let Some(pod) = pods.get(uid.as_str())
            {
                out.push((plan.nodeclaim.clone(), (*pod).clone()));
            }
        }
    }
    out
}

impl Actor for DisruptionActor {
    type Msg = DisruptionMsg;
    type State = DisruptionState;
    type Arguments = DisruptionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: DisruptionArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let commands = args
            .start
            .commands
            .into_iter()
            .filter(|c| !c.phase.ended())
            .map(|c| (c.id, c))
            .collect();
        Ok(DisruptionState {
            ctx: args.ctx,
            scheduler: args.scheduler,
            commands,
            pod_events: PodEvents::default(),
            told: BTreeMap::new(),
            reported: BTreeMap::new(),
            unconsolidatable: BTreeMap::new(),
            repair_blocked: BTreeMap::new(),
            validating: None,
            consolidated: None,
            refused: BTreeSet::new(),
            expiring: BTreeSet::new(),
            status: DisruptionStatus {
                last_command: args.start.last_command,
                ..DisruptionStatus::default()
            },
            pass_armed: false,
            advance_armed: false,
        })
    }

    async fn post_start(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.resume().await?;
        state.arm_advance(&myself);
        state.arm_pass(&myself);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            DisruptionMsg::Pass { timer } => {
                if timer {
                    state.pass_armed = false;
                }
                state.pass(&myself).await?;
                state.arm_pass(&myself);
            }
            DisruptionMsg::Advance => state.advance(&myself).await?,
            DisruptionMsg::Validate => state.validate(&myself).await?,
            DisruptionMsg::GetStatus(reply) => {
                let mut status = state.status.clone();
                status.commands = state.commands.values().cloned().collect();
                let _ = reply.send(status);
            }
        }
        Ok(())
    }
}
