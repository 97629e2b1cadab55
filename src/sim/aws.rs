//! The simulated cluster on a real EC2 API (AWS, or an emulator such as moto): instances are
//! launched through the AWS provider, and each one "boots" into a simulated node. At the end
//! of the run every instance this run launched is terminated, since its cluster is gone.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use karpenter_aws::provider::AwsCloud;
use karpenter_aws::sqs::SqsQueue;
use karpenter_core::api::EC2NodeClass;
use karpenter_core::model::InstanceType;
use karpenter_core::ports::InterruptionKind;
use karpenter_core::ports::{
    BoxFuture, CloudError, CloudProvider, Drift, DriftCheck, Instance, InstanceState,
    LaunchRequest, NodeClassHash, OfferingKey,
};
use tokio::sync::mpsc;
use tracing::{info, warn};

use super::backend::Backend;
use crate::simcloud::{InstanceBooted, announce_boot};
use crate::system::aws::{AwsParts, AwsSetup};

#[derive(Default)]
struct Launched {
    instances: BTreeMap<String, Instance>,
    launched: u64,
    terminated: u64,
}

/// EC2 behind the simulation.
pub struct AwsBackend {
    cloud: Arc<AwsCloud>,
    booted: mpsc::UnboundedSender<InstanceBooted>,
    boot_delay: Duration,
    queue: Option<SqsQueue>,
    region: String,
    launched: Mutex<Launched>,
    types: Mutex<HashMap<String, Arc<InstanceType>>>,
}

impl AwsBackend {
    /// Wraps the provider. `queue`, when set, is where interruptions are sent (and the
    /// interruption actor polls it).
    pub fn new(
        cloud: Arc<AwsCloud>,
        booted: mpsc::UnboundedSender<InstanceBooted>,
        boot_delay: Duration,
        queue: Option<SqsQueue>,
        region: &str,
    ) -> Self {
        AwsBackend {
            cloud,
            booted,
            boot_delay,
            queue,
            region: region.to_owned(),
            launched: Mutex::new(Launched::default()),
            types: Mutex::new(HashMap::new()),
        }
    }

    fn state(&self) -> MutexGuard<'_, Launched> {
        self.launched.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn remember_types(&self, types: &[Arc<InstanceType>]) {
        let mut known = self.types.lock().unwrap_or_else(|p| p.into_inner());
        for t in types {
            known.insert(t.name.clone(), t.clone());
        }
    }

    /// Terminates every instance this run launched that is still running, and deletes its
    /// launch templates; returns the instance ids.
    pub async fn terminate_all(&self) -> Vec<String> {
        let running: Vec<String> = self
            .state()
            .instances
            .values()
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| i.id.clone())
            .collect();
        let mut done = Vec::new();
        for id in running {
            match self.delete(&id).await {
                Ok(()) => done.push(id),
                Err(error) => {
                    warn!(instance.id = %id, %error, "Could not terminate an instance at the end of the run.")
                }
            }
        }
        if let Err(error) = self.cloud.delete_own_launch_templates().await {
            warn!(%error, "Could not delete this run's launch templates.");
        }
        done
    }
}

impl CloudProvider for AwsBackend {
    fn now_ms(&self) -> i64 {
        self.cloud.now_ms()
    }

    fn create<'a>(
        &'a self,
        request: &'a LaunchRequest,
    ) -> BoxFuture<'a, Result<Instance, CloudError>> {
        Box::pin(async move {
            let instance = self.cloud.create(request).await?;
            let known = self
                .types
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&instance.instance_type)
                .cloned();
            let instance_type = match known {
                Some(t) => t,
                None => {
                    let types = self.cloud.instance_types(&request.node_class).await?;
                    self.remember_types(&types);
                    types
                        .into_iter()
                        .find(|t| t.name == instance.instance_type)
                        .ok_or_else(|| {
                            CloudError::Other(format!(
                                "launched {} but the catalog does not list it",
                                instance.instance_type
                            ))
                        })?
                }
            };
            {
                let mut state = self.state();
                if state
                    .instances
                    .insert(instance.id.clone(), instance.clone())
                    .is_none()
                {
                    state.launched += 1;
                }
            }
            announce_boot(&self.booted, self.boot_delay, &instance, instance_type);
            Ok(instance)
        })
    }

    fn delete<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            self.cloud.delete(instance_id).await?;
            let mut state = self.state();
            if let Some(instance) = state.instances.get_mut(instance_id)
                && instance.state == InstanceState::Running
            {
                instance.state = InstanceState::Terminated;
                state.terminated += 1;
            }
            Ok(())
        })
    }

    fn get<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Result<Instance, CloudError>> {
        self.cloud.get(instance_id)
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<Instance>, CloudError>> {
        self.cloud.list()
    }

    fn instance_types<'a>(
        &'a self,
        node_class: &'a str,
    ) -> BoxFuture<'a, Result<Vec<Arc<InstanceType>>, CloudError>> {
        Box::pin(async move {
            let types = self.cloud.instance_types(node_class).await?;
            self.remember_types(&types);
            Ok(types)
        })
    }

    fn node_class_hash(&self, node_class: &str) -> Option<NodeClassHash> {
        self.cloud.node_class_hash(node_class)
    }

    fn drift<'a>(
        &'a self,
        check: &'a DriftCheck,
    ) -> BoxFuture<'a, Result<Option<Drift>, CloudError>> {
        self.cloud.drift(check)
    }

    fn provider_name(&self) -> &'static str {
        self.cloud.provider_name()
    }

    fn expiring_block_instances(&self) -> BoxFuture<'_, Result<Option<Vec<String>>, CloudError>> {
        self.cloud.expiring_block_instances()
    }

    fn mark_unavailable(&self, offering: &OfferingKey) {
        self.cloud.mark_unavailable(offering);
    }
}

impl Backend for AwsBackend {
    fn owner_of(&self, instance_id: &str) -> Option<String> {
        self.state()
            .instances
            .get(instance_id)
            .filter(|i| i.state == InstanceState::Running)
            .map(|i| i.nodeclaim.clone())
    }

    fn running(&self) -> BoxFuture<'_, Vec<Instance>> {
        Box::pin(async move {
            match self.cloud.list().await {
                Ok(instances) => instances
                    .into_iter()
                    .filter(|i| i.state == InstanceState::Running)
                    .collect(),
                Err(error) => {
                    warn!(%error, "Listing instances failed; reporting what this run launched.");
                    self.state()
                        .instances
                        .values()
                        .filter(|i| i.state == InstanceState::Running)
                        .cloned()
                        .collect()
                }
            }
        })
    }

    fn counts(&self) -> (u64, u64) {
        let state = self.state();
        (state.launched, state.terminated)
    }

    fn instance_type(&self, name: &str) -> Option<Arc<InstanceType>> {
        self.types
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    fn restore(&self, instances: &[Instance]) {
        let mut state = self.state();
        for instance in instances {
            state
                .instances
                .insert(instance.id.clone(), instance.clone());
        }
    }

    fn send_interruption<'a>(
        &'a self,
        instance: &'a Instance,
        kind: InterruptionKind,
    ) -> BoxFuture<'a, anyhow::Result<bool>> {
        Box::pin(async move {
            let Some(queue) = &self.queue else {
                return Ok(false);
            };
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            let time = karpenter_core::model::time::format_rfc3339(now_ms);
            // A kind no queue message says is told to the interruption actor directly.
            let Some(body) =
                karpenter_aws::messages::event_body(kind, &instance.id, &self.region, &time)
            else {
                return Ok(false);
            };
            queue.send(&body).await?;
            Ok(true)
        })
    }

    fn reclaim<'a>(&'a self, instance_id: &'a str) -> BoxFuture<'a, Option<Instance>> {
        Box::pin(async move {
            let instance = self.state().instances.get(instance_id).cloned()?;
            if instance.state != InstanceState::Running {
                return None;
            }
            if let Err(error) = self.delete(instance_id).await {
                warn!(instance.id = %instance_id, %error, "Could not reclaim an interrupted instance.");
                return None;
            }
            Some(Instance {
                state: InstanceState::Terminated,
                ..instance
            })
        })
    }

    fn apply_node_class(&self, node_class: &EC2NodeClass) {
        self.cloud.set_node_class(node_class.clone());
    }

    fn release_image<'a>(
        &'a self,
        _node_class: Option<&'a str>,
    ) -> BoxFuture<'a, anyhow::Result<Vec<(String, String)>>> {
        Box::pin(async {
            anyhow::bail!(
                "amiRelease: images on EC2 are released by AWS, not by a scenario; run scenarios with amiRelease steps on the in-memory cloud"
            )
        })
    }
}

/// Fails a run at once when a selector of one of its EC2NodeClasses matches nothing: a
/// bounded run would otherwise spend its whole length unable to launch. Failed calls are not
/// judged here; the provider retries them like any other.
async fn refuse_unresolvable(provider: &AwsCloud, aws: &AwsSetup) -> anyhow::Result<()> {
    for name in provider.node_class_names() {
        let resolved = provider
            .resolve(&name)
            .await
            .map_err(|e| anyhow::anyhow!("EC2NodeClass {name}: {e}"))?;
        if let Some(missing) = resolved.not_found() {
            let fix = if aws.connection.endpoint.is_some() {
                "On an empty emulator, add --prepare-emulator: it creates a VPC with subnets and a security group tagged for the cluster, and the AMI parameters."
            } else {
                "Tag the subnets, security groups or AMIs the selector terms name (e.g. karpenter.sh/discovery: <cluster name>), or change the EC2NodeClass's selector terms."
            };
            anyhow::bail!(
                "EC2NodeClass {name} cannot launch anything: {} is False ({}: {}). {fix}",
                missing.kind,
                missing.reason,
                missing.message
            );
        }
    }
    Ok(())
}

/// Reads the instance-type catalog of each node class the scenario's NodePools use, so that
/// the run's timeline, in real time, starts once the API has answered it: the first round
/// then schedules at once instead of waiting on the first DescribeInstanceTypes, which takes
/// an emulator seconds (tens of seconds on a busy machine), while the timeline's steps went by.
/// A failure is only logged: the rounds read the catalog again and say why they cannot.
async fn read_catalogs(provider: &AwsCloud, scenario: &super::scenario::Scenario) {
    let classes: BTreeSet<&str> = (scenario.nodepools.iter())
        .map(|p| p.spec.template.spec.node_class_ref.name.as_str())
        .collect();
    for class in classes {
        match provider.instance_types(class).await {
            Ok(types) => info!(
                node_class = class,
                types = types.len(),
                "Catalog read before the timeline starts."
            ),
            Err(error) => {
                warn!(node_class = class, %error, "Cannot read the catalog before the timeline starts; the rounds will try again.")
            }
        }
    }
}

/// Connects to the EC2 API for a run ([`open`](crate::system::aws::open)), and registers the scenario's
/// EC2NodeClasses with the provider.
pub async fn connect(
    aws: &AwsSetup,
    scenario: &super::scenario::Scenario,
    booted: mpsc::UnboundedSender<InstanceBooted>,
    boot_delay: Duration,
    metrics: &Arc<karpenter_actors::metrics::Metrics>,
) -> anyhow::Result<(
    Arc<AwsBackend>,
    Option<Arc<dyn karpenter_core::ports::InterruptionQueue>>,
)> {
    if scenario.file.region != aws.connection.region {
        tracing::warn!(scenario = %scenario.file.region, region = %aws.connection.region, "The scenario names another region; using the connection's.");
    }
    let AwsParts {
        provider, queue, ..
    } = crate::system::aws::open(aws, metrics).await?;
    for node_class in &scenario.nodeclasses {
        provider.set_node_class(node_class.clone());
    }
    refuse_unresolvable(&provider, aws).await?;
    read_catalogs(&provider, scenario).await;
    let backend = Arc::new(AwsBackend::new(
        provider,
        booted,
        boot_delay,
        queue.clone(),
        &aws.connection.region,
    ));
    let queue = queue.map(|q| Arc::new(q) as Arc<dyn karpenter_core::ports::InterruptionQueue>);
    Ok((backend, queue))
}
