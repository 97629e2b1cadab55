//! One actor per NodePool: owns its spec, its limits accounting (in-flight NodeClaims count
//! pessimistically, at the largest capacity among their options) and its NodeClaim actors.

use std::collections::BTreeMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tracing::{info, warn};

use super::Context;
use super::messages::*;
use super::nodeclaim::{NodeClaimActor, NodeClaimArgs};

use karpenter_core::api::NodePool;
use karpenter_core::disruption::PoolPolicy;
use karpenter_core::events::{DomainEvent, NodeClaimPlan};
use karpenter_core::lifecycle::nodeclaim::Input;
use karpenter_core::lifecycle::nodepool::{Admission, LimitReached, PoolCount, capacity_of};
use karpenter_core::lifecycle::status::{NodePoolNotReady, nodepool_readiness};
use karpenter_core::model::{InstanceType, Requirements, ResourceName, Resources, Taint};
use karpenter_core::ports::CloudError;
use karpenter_core::scheduling::{Limits, NodePoolTemplate};
use karpenter_core::vocab::labels;

/// What a NodePool actor starts from.
pub struct NodePoolArgs {
    /// Shared context.
    pub ctx: Context,
    /// The NodePool object.
    pub nodepool: NodePool,
    /// The scheduler.
    pub scheduler: ActorRef<SchedulerMsg>,
}

/// The NodePool actor's state.
pub struct NodePoolActorState {
    ctx: Context,
    /// The object, for the NodeClaims it stamps (owner, template, hash).
    pool: NodePool,
    name: String,
    node_class: String,
    weight: i32,
    requirements: Requirements,
    labels: BTreeMap<String, String>,
    taints: Vec<Taint>,
    scheduler: ActorRef<SchedulerMsg>,
    instance_types: Vec<Arc<InstanceType>>,
    /// Its NodeClaims, counted against its limits.
    count: PoolCount,
    /// Launch and registration outcomes since the template or node class last changed.
    registration: karpenter_core::model::registration_health::RegistrationHealth,
    /// Whether the pool itself may be provisioned for, judged when it last changed.
    readiness: Result<(), NodePoolNotReady>,
}

/// The NodePool actor.
pub struct NodePoolActor;

impl NodePoolActorState {
    /// The cloud's `types` as this pool buys them: repriced by the NodeOverlays in force
    /// when the `NodeOverlay` gate is on.
    fn overlaid(&self, types: Vec<Arc<InstanceType>>) -> Vec<Arc<InstanceType>> {
        if self.ctx.settings.node_overlay {
            self.ctx.overlays.apply(&types, &self.name, &self.labels)
        } else {
            types
        }
    }

    /// Sends the pool and its node class's hash as they are now to one of its NodeClaims
    /// (which judges its drift, and stamps them over another controller's).
    fn show_pool_to(&self, nodeclaim: &str) {
        if let Some(actor) = self.ctx.nodeclaim_actor(nodeclaim) {
            if let Some(hash) = self.ctx.cloud.node_class_hash(&self.node_class) {
                let _ = actor.cast(NodeClaimMsg::Input(Input::NodeClassHash(hash)));
            }
            let _ = actor.cast(NodeClaimMsg::Input(Input::NodePoolChanged(Box::new(
                self.pool.clone(),
            ))));
        }
    }

    fn usage(&self) -> Resources {
        self.count.usage()
    }

    fn capacity_of(&self, instance_type: &str) -> Resources {
        capacity_of(&self.instance_types, instance_type)
    }

    /// Counts a NodeClaim at `capacity` against the limits and starts its actor.
    async fn spawn_nodeclaim(
        &mut self,
        myself: &ActorRef<NodePoolMsg>,
        plan: NodeClaimPlan,
        requirements: Requirements,
        capacity: Resources,
        resume: Option<karpenter_core::recovery::Adopt>,
    ) -> Result<(), ActorProcessingErr> {
        self.count.count(&plan.nodeclaim, capacity);
        self.ctx
            .metrics
            .set_nodepool_usage(&self.name, &self.usage());
        let name = self.ctx.nodeclaim_actor_name(&plan.nodeclaim);
        let (requests, _) = Resources::from_quantities(
            plan.requests.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        )?;
        let adopted = resume
            .as_ref()
            .and_then(|a| a.object.clone())
            .map(|o| o.without_server_fields());
        let object = adopted.unwrap_or_else(|| {
            let mut claim = karpenter_core::api::NodeClaim::planned(
                &plan.nodeclaim,
                &self.pool,
                &karpenter_core::scheduling::PlannedNodeClaim {
                    nodepool: plan.nodepool.clone(),
                    requirements: requirements.clone(),
                    instance_types: plan.instance_types.clone(),
                    pods: plan.pods.clone(),
                    requests,
                    min_values_relaxed: plan.min_values_relaxed,
                },
            );
            // The node class as it is now, for its static drift.
            if let Some(hash) = self.ctx.cloud.node_class_hash(&self.node_class) {
                let annotations = claim
                    .metadata
                    .annotations
                    .get_or_insert_with(Default::default);
                annotations.insert(labels::EC2NODECLASS_HASH.into(), hash.hash);
                annotations.insert(labels::EC2NODECLASS_HASH_VERSION.into(), hash.version);
            }
            claim
        });
        let options: std::collections::HashSet<&str> =
            plan.instance_types.iter().map(|o| &*o.name).collect();
        let instance_types = self
            .instance_types
            .iter()
            .filter(|t| options.contains(t.name.as_str()))
            .cloned()
            .collect();
        let args = NodeClaimArgs {
            ctx: self.ctx.clone(),
            object,
            instance_types,
            requirements,
            taints: self.taints.clone(),
            labels: self.labels.clone(),
            node_class: self.node_class.clone(),
            scheduler: self.scheduler.clone(),
            nodepool: myself.clone(),
            plan,
            resume,
        };
        Actor::spawn_linked(Some(name), NodeClaimActor, args, myself.get_cell()).await?;
        Ok(())
    }
}

/// Records the NodePool as this actor now uses it.
fn observe(ctx: &Context, pool: &NodePool) -> Result<(), ActorProcessingErr> {
    let spec_json = serde_json::to_vec(&pool.spec.template)?;
    let hash = format!(
        "{:016x}",
        karpenter_core::model::Fnv1a::default()
            .write(&spec_json)
            .finish()
    );
    ctx.record(&[DomainEvent::NodePoolObserved {
        nodepool: pool.metadata.name.clone().unwrap_or_default(),
        weight: pool.spec.weight.unwrap_or(0),
        hash,
    }])?;
    Ok(())
}

fn template_parts(pool: &NodePool) -> (Requirements, BTreeMap<String, String>, Vec<Taint>, Limits) {
    let spec = &pool.spec.template.spec;
    let (requirements, labels) = pool.node_requirements();
    let taints = spec.taints.iter().map(Taint::from).collect();
    let mut limits = Limits::default();
    for (name, quantity) in pool.spec.limits.iter().flatten() {
        if name == "nodes" {
            limits.nodes = pool.node_limit();
            continue;
        }
        match (
            ResourceName::register(name),
            Resources::from_quantities([(name.as_str(), quantity.0.as_str())]),
        ) {
            (Some(r), Ok((parsed, _))) => {
                limits.resources.insert(r, parsed.get(r));
            }
            _ => {
                warn!(nodepool = ?pool.metadata.name, limit = %name, "Ignoring a limit on a resource Karpenter does not track.")
            }
        }
    }
    (requirements, labels, taints, limits)
}

impl NodePoolActorState {
    /// The pool as the next scheduling round should see it, with its instance types fetched
    /// again (the last known list when listing fails for another reason); not Ready when
    /// the pool is invalid or being deleted, or the cloud says its node class is missing,
    /// being deleted or not Ready.
    async fn template(&mut self) -> Result<PoolTemplate, NodePoolNotReady> {
        self.readiness.clone()?;
        if self.pool.is_static() && !self.ctx.settings.static_capacity {
            return Err(NodePoolNotReady {
                nodepool: self.name.clone(),
                reason: "StaticCapacityDisabled",
                message: "spec.replicas: static NodePools need the StaticCapacity feature gate (FEATURE_GATES=StaticCapacity=true); until then this NodePool provisions nothing".into(),
            });
        }
        match self
            .ctx
            .cloud_as("provisioner")
            .instance_types(&self.node_class)
            .await
        {
            Ok(types) => self.instance_types = self.overlaid(types),
            Err(CloudError::NodeClassNotReady { reason, .. }) => {
                return Err(NodePoolNotReady {
                    nodepool: self.name.clone(),
                    reason: "NodeClassNotReady",
                    message: reason,
                });
            }
            Err(error) => {
                warn!(nodepool = %self.name, %error, "Listing instance types failed; using the last known list.")
            }
        }
        let template = NodePoolTemplate {
            name: self.name.clone(),
            weight: self.weight,
            requirements: self.requirements.clone(),
            taints: self.taints.clone(),
            startup_taints: (self.pool.spec.template.spec.startup_taints.iter())
                .map(Taint::from)
                .collect(),
            instance_types: self.instance_types.clone(),
            limits: self.count.limits().clone(),
            usage: self.usage(),
            node_count: self.count.nodes(),
        };
        Ok((template, self.pool.spec.replicas))
    }

    /// The NodePool object changed: later rounds and NodeClaims use the new template, and
    /// each NodeClaim judges its drift against it.
    fn update(&mut self, pool: NodePool) -> Result<(), ActorProcessingErr> {
        observe(&self.ctx, &pool)?;
        let (requirements, labels, taints, limits) = template_parts(&pool);
        self.weight = pool.spec.weight.unwrap_or(0);
        self.node_class = pool.spec.template.spec.node_class_ref.name.clone();
        self.requirements = requirements;
        self.labels = labels;
        self.taints = taints;
        self.readiness = nodepool_readiness(&pool);
        self.ctx.metrics.set_nodepool_limits(&self.name, &limits);
        self.count.set_limits(limits);
        self.pool = pool;
        self.registration.reset();
        for name in self.count.nodeclaims() {
            self.show_pool_to(name);
        }
        if self.pool.is_static() && self.ctx.settings.static_capacity {
            // `kubectl scale`: the next round launches what the pool lacks now (disruption
            // removes what it has too many of).
            let _ = self.scheduler.cast(SchedulerMsg::StaticPoolShort);
        }
        info!(nodepool = %self.name, "NodePool updated.");
        Ok(())
    }

    /// Creates a NodeClaim a round planned, unless the pool's limits no longer allow it (then
    /// the scheduler hears it ended, so its pods are planned again).
    async fn create(
        &mut self,
        myself: &ActorRef<NodePoolMsg>,
        plan: NodeClaimPlan,
        requirements: Requirements,
    ) -> Result<Result<(), LimitReached>, ActorProcessingErr> {
        let reservation = match self.count.admit(&plan.instance_types, &self.instance_types) {
            Admission::Create(reservation) => reservation,
            Admission::Refuse(problem) => {
                warn!(nodepool = %self.name, nodeclaim = %plan.nodeclaim, %problem, "Refusing NodeClaim: limits.");
                let _ = self.scheduler.cast(SchedulerMsg::NodeClaimEnded {
                    nodeclaim: plan.nodeclaim.clone(),
                    reason: format!("limits: {problem}"),
                });
                return Ok(Err(problem));
            }
        };
        info!(
            nodepool = %self.name,
            nodeclaim = %plan.nodeclaim,
            pods = plan.pods.len(),
            requests = %serde_json::Value::from_iter(plan.requests.clone()),
            instance_types = %instance_type_summary(&plan.instance_types),
            "Creating NodeClaim."
        );
        self.spawn_nodeclaim(myself, plan, requirements, reservation, None)
            .await?;
        Ok(Ok(()))
    }

    /// Adopts a NodeClaim whose instance survived a restart; returns once its actor runs.
    async fn adopt(
        &mut self,
        myself: &ActorRef<NodePoolMsg>,
        plan: NodeClaimPlan,
        adopt: karpenter_core::recovery::Adopt,
    ) -> Result<(), ActorProcessingErr> {
        // The instance types are needed for its capacity; fetch them if this is the
        // pool's first message.
        if self.instance_types.is_empty()
            && let Ok(types) = self
                .ctx
                .cloud_as("provisioner")
                .instance_types(&self.node_class)
                .await
        {
            self.instance_types = self.overlaid(types);
        }
        let capacity = self.capacity_of(&adopt.instance.instance_type);
        let name = plan.nodeclaim.clone();
        self.spawn_nodeclaim(myself, plan, Requirements::new(), capacity, Some(adopt))
            .await?;
        // An adopted NodeClaim may predate the pool's current template.
        self.show_pool_to(&name);
        Ok(())
    }

    /// Its state as the admin endpoint and the NodePool's status show it.
    fn status(&self) -> NodePoolStatus {
        let limits: Resources = self
            .count
            .limits()
            .resources
            .iter()
            .fold(Resources::ZERO, |acc, (r, v)| acc.with(*r, *v));
        NodePoolStatus {
            name: self.name.clone(),
            weight: self.weight,
            nodeclaims: self.count.nodeclaims().cloned().collect(),
            registration: self.registration.verdict(),
            usage: self.usage().to_quantity_map(),
            limits: limits.to_quantity_map(),
            disruption: self.pool.spec.disruption.clone(),
        }
    }
}

impl Actor for NodePoolActor {
    type Msg = NodePoolMsg;
    type State = NodePoolActorState;
    type Arguments = NodePoolArgs;

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.ctx.overlays.forget(&state.name);
        Ok(())
    }

    async fn pre_start(
        &self,
        _myself: ActorRef<Self::Msg>,
        args: NodePoolArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let name = args.nodepool.metadata.name.clone().unwrap_or_default();
        let weight = args.nodepool.spec.weight.unwrap_or(0);
        observe(&args.ctx, &args.nodepool)?;
        let (requirements, labels, taints, limits) = template_parts(&args.nodepool);
        args.ctx.metrics.set_nodepool_limits(&name, &limits);
        Ok(NodePoolActorState {
            readiness: nodepool_readiness(&args.nodepool),
            node_class: args.nodepool.spec.template.spec.node_class_ref.name.clone(),
            pool: args.nodepool,
            ctx: args.ctx,
            name,
            weight,
            requirements,
            labels,
            taints,
            scheduler: args.scheduler,
            instance_types: Vec::new(),
            count: PoolCount::new(limits),
            registration: Default::default(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match message {
            NodePoolMsg::GetTemplate(reply) => {
                let _ = reply.send(state.template().await);
            }
            NodePoolMsg::Update(pool) => state.update(*pool)?,
            NodePoolMsg::CreateNodeClaim(plan, requirements) => {
                // A refusal is the scheduler's to hear, and it has.
                let _ = state.create(&myself, *plan, *requirements).await?;
            }
            NodePoolMsg::CreateReplacement(plan, requirements, reply) => {
                let created = state.create(&myself, *plan, *requirements).await?;
                let _ = reply.send(created);
            }
            NodePoolMsg::GetPolicy(reply) => {
                let _ = reply.send(PoolPolicy::of(&state.pool));
            }
            NodePoolMsg::AdoptNodeClaim(plan, adopt, reply) => {
                state.adopt(&myself, *plan, *adopt).await?;
                let _ = reply.send(());
            }
            NodePoolMsg::NodeClaimChanged {
                nodeclaim,
                instance_type,
                terminated,
            } => {
                if terminated {
                    state.count.forget(&nodeclaim);
                } else if let Some(t) = instance_type {
                    let capacity = state.capacity_of(&t);
                    state.count.count(&nodeclaim, capacity);
                }
                state
                    .ctx
                    .metrics
                    .set_nodepool_usage(&state.name, &state.usage());
            }
            NodePoolMsg::RegistrationOutcome(None) => state.registration.registered(),
            NodePoolMsg::RegistrationOutcome(Some(reason)) => state.registration.failed(reason),
            NodePoolMsg::NodeClassChanged => {
                state.registration.reset();
                // Its NodeClaims judge their drift from the class again.
                for name in state.count.nodeclaims() {
                    if let Some(actor) = state.ctx.nodeclaim_actor(name) {
                        let _ = actor.cast(NodeClaimMsg::Input(Input::NodeClassChanged));
                    }
                }
            }
            NodePoolMsg::GetStatus(reply) => {
                let _ = reply.send(state.status());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let SupervisionEvent::ActorFailed(cell, failure) = event {
            let name = cell.get_name().unwrap_or_default();
            let nodeclaim = name.rsplit('/').next().unwrap_or(&name).to_owned();
            tracing::error!(nodepool = %state.name, %nodeclaim, error = %failure, "NodeClaim actor failed.");
            if state.count.forget(&nodeclaim) {
                let _ = state.scheduler.cast(SchedulerMsg::NodeClaimEnded {
                    nodeclaim,
                    reason: format!("actor failed: {failure}"),
                });
            }
        }
        Ok(())
    }
}

/// The candidate types by name, the first five then how many more: `a, b, c, d, e and 12
/// other(s)` (upstream's "created nodeclaim" `instance-types`).
fn instance_type_summary(options: &[karpenter_core::scheduling::InstanceTypeOption]) -> String {
    let names: std::collections::BTreeSet<&str> = options.iter().map(|o| o.name.as_str()).collect();
    let shown = names.iter().take(5).copied().collect::<Vec<_>>().join(", ");
    match names.len().saturating_sub(5) {
        0 => shown,
        more => format!("{shown} and {more} other(s)"),
    }
}

#[cfg(test)]
mod tests {
    use karpenter_core::model::CapacityType;
    use karpenter_core::scheduling::InstanceTypeOption;

    fn option(name: &str, zone: &str) -> InstanceTypeOption {
        InstanceTypeOption {
            name: name.into(),
            price: 0.1,
            zone: zone.into(),
            capacity_type: CapacityType::Spot,
        }
    }

    #[test]
    fn instance_types_are_summarised_as_upstream_logs_them() {
        let few = [
            option("m5.large", "a"),
            option("c5.large", "a"),
            option("m5.large", "b"),
        ];
        assert_eq!(super::instance_type_summary(&few), "c5.large, m5.large");
        let many: Vec<_> = (1..=8)
            .map(|i| option(&format!("t{i}.large"), "a"))
            .collect();
        assert_eq!(
            super::instance_type_summary(&many),
            "t1.large, t2.large, t3.large, t4.large, t5.large and 3 other(s)"
        );
    }
}
