//! One NodeClaim's launch: adopt the instance a replayed launch already made, plan the
//! CreateFleet call, make its launch templates (one per image and reservation targeted),
//! call, and turn the answer into an instance or the offerings that had no capacity.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::reservation::price_source;
use karpenter_core::model::{CapacityType, InstanceType, Reservation};
use karpenter_core::ports::{CloudError, Instance, InstanceState, LaunchRequest, OfferingKey};
use karpenter_core::vocab::labels;
use tokio::time::Instant;
use tracing::{info, warn};

use super::fleet::{FleetAnswer, FleetMember};
use super::{AwsCloud, now_ms, tags};
use crate::bootstrap::{NodeBootstrap, user_data};
use crate::error::AwsError;
use crate::launch::{LaunchTemplateSpec, block_device_mappings};
use crate::nodeclass::ResolvedNodeClass;
use crate::selection::{FleetPlan, FleetPlanError, is_capacity_error, plan_fleet};

/// A CreateFleet error: (instance type, zone, code, message).
type FleetError = (String, String, String, String);

impl AwsCloud {
    pub(super) async fn launch(&self, request: &LaunchRequest) -> Result<Instance, CloudError> {
        let node_class = self.usable_node_class(&request.node_class)?;
        let resolved = self.resolve(&request.node_class).await?;
        resolved
            .ready()
            .map_err(|not_ready| CloudError::NodeClassNotReady {
                name: request.node_class.clone(),
                reason: not_ready.to_string(),
            })?;
        // A launch replayed after a crash adopts the instance the first attempt made.
        let existing = self
            .adopt
            .call(request.nodeclaim.clone())
            .await
            .unwrap_or_else(|| {
                Err(AwsError::new(
                    "DescribeInstances",
                    "BatcherStopped",
                    "the adoption lookup batcher stopped",
                ))
            })?;
        if let Some(existing) = existing {
            info!(nodeclaim = %request.nodeclaim, instance.id = %existing.id, "Instance for this NodeClaim already exists; adopting it.");
            return Ok(self.to_instance(&existing).await);
        }
        let plan = Arc::new(self.plan_launch(request, &resolved, &node_class).await?);
        let pool_tags = self.pool_tags(request, &node_class);
        let specs = self.template_specs(request, &plan, &resolved, &node_class, &pool_tags)?;
        let mut own_tags = BTreeMap::new();
        own_tags.insert(tags::NODECLAIM.to_owned(), request.nodeclaim.clone());
        own_tags.insert(
            "Name".to_owned(),
            format!("{}/{}", request.nodepool, request.nodeclaim),
        );
        let member = |templates: BTreeMap<String, String>| FleetMember {
            plan: plan.clone(),
            templates,
            shared_tags: pool_tags.clone(),
            own_tags: own_tags.clone(),
            client_token: request.client_token.clone(),
        };
        let templates = self.ensure_templates(specs.clone()).await?;
        let mut answer = self.create_fleet(member(templates.clone())).await;
        let template_missing = |code: &str| {
            code.starts_with("InvalidLaunchTemplateName.NotFound")
                || code.starts_with("InvalidLaunchTemplateId.NotFound")
        };
        let missing = match &answer {
            Err(e) => template_missing(&e.code),
            Ok(FleetAnswer::Failed(errors)) => {
                errors.iter().any(|(_, _, code, _)| template_missing(code))
            }
            Ok(FleetAnswer::Launched(_)) => false,
        };
        if missing {
            // Someone deleted a template we had cached: forget it, recreate, try once more.
            warn!(nodeclaim = %request.nodeclaim, "A cached launch template is gone; recreating it.");
            self.templates
                .lock()
                .await
                .retain(|name, _| !templates.values().any(|t| t == name));
            let templates = self.ensure_templates(specs).await?;
            answer = self.create_fleet(member(templates)).await;
        }
        match answer? {
            FleetAnswer::Launched(launched) => Ok(self.launched(request, &plan, launched).await),
            FleetAnswer::Failed(errors) => Err(self.launch_failed(&plan, &errors)),
        }
    }

    /// The CreateFleet call for `request`: its capacity type and overrides.
    async fn plan_launch(
        &self,
        request: &LaunchRequest,
        resolved: &Arc<ResolvedNodeClass>,
        node_class: &EC2NodeClass,
    ) -> Result<FleetPlan, CloudError> {
        let types = self.priced_types(resolved, node_class).await?;
        let by_name: HashMap<&str, &InstanceType> = types
            .iter()
            .map(|t| (t.name.as_str(), t.as_ref()))
            .collect();
        let candidates: Vec<&InstanceType> = request
            .instance_types
            .iter()
            .filter_map(|o| by_name.get(&*o.name).copied())
            .collect();
        let plan = {
            let unavailable = self
                .unavailable
                .lock()
                .map_err(|_| CloudError::Other("unavailable-offerings cache poisoned".into()))?;
            plan_fleet(
                &candidates,
                &request.requirements,
                &resolved.subnet_per_zone,
                &resolved.amis,
                &unavailable,
                Instant::now(),
            )
        };
        let mut plan = match plan {
            Ok(plan) => plan,
            Err(FleetPlanError::AllUnavailable(offerings)) => {
                return Err(CloudError::InsufficientCapacity { offerings });
            }
            Err(FleetPlanError::Unlaunchable(reason)) => return Err(CloudError::Other(reason)),
        };
        if request.overlaid {
            let order: Vec<&str> = request.instance_types.iter().map(|o| &*o.name).collect();
            plan.prioritize(&order);
        }
        Ok(plan)
    }

    /// The launch templates `plan` needs: one per image and reservation targeted; launches
    /// outside reservations stay out of `open` ones when the class selects any.
    fn template_specs(
        &self,
        request: &LaunchRequest,
        plan: &FleetPlan,
        resolved: &ResolvedNodeClass,
        node_class: &EC2NodeClass,
        pool_tags: &BTreeMap<String, String>,
    ) -> Result<Vec<LaunchTemplateSpec>, CloudError> {
        let mut labels = request.labels.clone();
        labels.insert(labels::NODEPOOL.into(), request.nodepool.clone());
        let mut taints = request.taints.clone();
        if !taints.iter().any(|t| t.key == labels::UNREGISTERED_TAINT) {
            taints.push(karpenter_core::model::Taint::new(
                labels::UNREGISTERED_TAINT,
                "",
                "NoExecute",
            ));
        }
        let data = user_data(
            resolved.family,
            &NodeBootstrap {
                cluster: &self.settings.cluster,
                labels: &labels,
                taints: &taints,
                kubelet: node_class.spec.kubelet.as_ref(),
                user_data: node_class.spec.user_data.as_deref(),
            },
        )
        .map_err(|e| CloudError::NodeClassNotReady {
            name: request.node_class.clone(),
            reason: e.to_string(),
        })?;
        let selects_reservations = self.settings.reserved_capacity
            && !node_class
                .spec
                .capacity_reservation_selector_terms
                .is_empty();
        let mut keyed: BTreeMap<String, (&str, Option<&Reservation>)> = BTreeMap::new();
        for o in &plan.overrides {
            keyed.insert(o.template_key(), (&o.image_id, o.reservation.as_ref()));
        }
        Ok(keyed
            .into_values()
            .map(|(image, reservation)| LaunchTemplateSpec {
                capacity_reservation: reservation.cloned(),
                outside_reservations: reservation.is_none() && selects_reservations,
                image_id: image.to_owned(),
                user_data: data.clone(),
                security_group_ids: resolved
                    .security_groups
                    .iter()
                    .map(|(id, _)| id.clone())
                    .collect(),
                instance_profile: resolved.instance_profile.clone(),
                block_device_mappings: block_device_mappings(&node_class.spec, resolved.family),
                metadata_options: node_class.spec.metadata_options.clone(),
                detailed_monitoring: node_class.spec.detailed_monitoring.unwrap_or(false),
                associate_public_ip_address: node_class.spec.associate_public_ip_address,
                tags: pool_tags.clone(),
            })
            .collect())
    }

    /// The instance CreateFleet launched, (id, type, zone), as `plan` priced it; one launched
    /// into a reservation is counted against it.
    async fn launched(
        &self,
        request: &LaunchRequest,
        plan: &FleetPlan,
        (id, instance_type, zone): (String, String, String),
    ) -> Instance {
        let chosen = plan
            .overrides
            .iter()
            .find(|o| o.instance_type == instance_type && o.zone == zone);
        let reservation = chosen.and_then(|o| o.reservation.clone());
        let source = match &reservation {
            Some(r) => {
                self.launched_into(r);
                price_source(r, &self.price_source().to_string())
            }
            None => {
                self.price_source_of(&instance_type, &zone, plan.capacity_type)
                    .await
            }
        };
        Instance {
            provider_id: format!("aws:///{zone}/{id}"),
            id,
            instance_type,
            zone,
            capacity_type: plan.capacity_type,
            price: chosen.map_or(0.0, |o| o.price),
            image_id: chosen.map(|o| o.image_id.clone()).unwrap_or_default(),
            nodeclaim: request.nodeclaim.clone(),
            nodepool: request.nodepool.clone(),
            state: InstanceState::Running,
            launched_at_ms: Some(now_ms()),
            price_source: Some(source),
            reservation,
        }
    }

    /// Why CreateFleet launched nothing: the offerings without capacity (marked unavailable,
    /// a reservation's until it is described again), else the other errors.
    fn launch_failed(&self, plan: &FleetPlan, errors: &[FleetError]) -> CloudError {
        let now = Instant::now();
        let mut failed = Vec::new();
        let mut other = Vec::new();
        for (instance_type, zone, code, message) in errors {
            if is_capacity_error(code) {
                let key = OfferingKey {
                    instance_type: instance_type.clone(),
                    zone: zone.clone(),
                    capacity_type: plan.capacity_type,
                };
                if plan.capacity_type == CapacityType::Reserved {
                    self.reservation_failed(plan, instance_type, zone, code);
                } else if let Ok(mut unavailable) = self.unavailable.lock() {
                    unavailable.mark(key.clone(), now);
                }
                failed.push(key);
            } else {
                other.push(format!("{code}: {message}"));
            }
        }
        if !failed.is_empty() {
            failed.sort();
            failed.dedup();
            return CloudError::InsufficientCapacity { offerings: failed };
        }
        other.sort();
        other.dedup();
        CloudError::Other(if other.is_empty() {
            "CreateFleet launched nothing and reported no error".into()
        } else {
            format!("CreateFleet: {}", other.join("; "))
        })
    }
}
