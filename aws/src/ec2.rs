//! Every EC2 call the provider makes, each turning SDK shapes into plain data at once so the
//! rest of the crate deals in `selection` types and the actors' model.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use aws_sdk_ec2::Client;
use aws_sdk_ec2::types::{
    ArchitectureType, DefaultTargetCapacityType, Filter, FleetLaunchTemplateConfigRequest,
    FleetLaunchTemplateOverrides, FleetLaunchTemplateOverridesRequest,
    FleetLaunchTemplateSpecificationRequest, FleetOnDemandAllocationStrategy, FleetType,
    InstanceLifecycleType, InstanceStateName, LocationType, OnDemandOptionsRequest,
    RequestLaunchTemplateData, ResourceType, SpotAllocationStrategy, SpotOptionsRequest, Tag,
    TagSpecification, TargetCapacitySpecificationRequest, UsageClassType,
};
use karpenter_core::api::ec2nodeclass::{
    AmiSelectorTerm, SecurityGroupSelectorTerm, SubnetSelectorTerm,
};
use karpenter_core::model::catalog::InstanceTypeInfo;
use karpenter_core::model::{CapacityType, ReservationKind};
use karpenter_core::ports::InstanceState;

use crate::error::AwsError;
use crate::selection::{FleetPlan, Subnet};

/// An image as DescribeImages reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageInfo {
    /// `ami-…`.
    pub id: String,
    /// Name.
    pub name: String,
    /// `x86_64` or `arm64`.
    pub architecture: String,
    /// ISO 8601.
    pub created: String,
    /// ISO 8601, if set.
    pub deprecation_time: Option<String>,
}

/// An instance as DescribeInstances reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceInfo {
    /// `i-…`.
    pub id: String,
    /// Type.
    pub instance_type: String,
    /// Zone.
    pub zone: String,
    /// Spot or on-demand.
    pub capacity_type: CapacityType,
    /// Image.
    pub image_id: String,
    /// State.
    pub state: InstanceState,
    /// Launch time, ms since the Unix epoch.
    pub launched_at_ms: Option<i64>,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Its subnet.
    pub subnet_id: Option<String>,
    /// Its security groups' ids.
    pub security_groups: Vec<String>,
    /// The capacity reservation it runs in, and whether that is a Capacity Block.
    pub capacity_reservation: Option<(String, bool)>,
}

/// What CreateFleet returned.
#[derive(Debug, Clone, PartialEq)]
pub struct FleetOutcome {
    /// The instances launched, with the override each used: (id, type, zone).
    pub launched: Vec<(String, String, String)>,
    /// Per-override errors: (instance type, zone, error code, message).
    pub errors: Vec<(String, String, String, String)>,
}

fn tag_filters(tags: &BTreeMap<String, String>) -> Vec<Filter> {
    tags.iter()
        .map(|(k, v)| {
            if v == "*" {
                Filter::builder().name("tag-key").values(k).build()
            } else {
                Filter::builder().name(format!("tag:{k}")).values(v).build()
            }
        })
        .collect()
}

fn tags_of(tags: &[Tag]) -> BTreeMap<String, String> {
    tags.iter()
        .filter_map(|t| {
            Some((
                t.key()?.to_owned(),
                t.value().unwrap_or_default().to_owned(),
            ))
        })
        .collect()
}

/// `TagSpecification`s for the given resource types, all with the same tags.
pub fn tag_specifications(
    resource_types: &[ResourceType],
    tags: &BTreeMap<String, String>,
) -> Vec<TagSpecification> {
    resource_types
        .iter()
        .map(|rt| {
            let mut spec = TagSpecification::builder().resource_type(rt.clone());
            for (k, v) in tags {
                spec = spec.tags(Tag::builder().key(k).value(v).build());
            }
            spec.build()
        })
        .collect()
}

/// EC2, as the provider uses it.
#[derive(Debug, Clone)]
pub struct Ec2 {
    pub(crate) client: Client,
}

impl Ec2 {
    /// Wraps a client.
    pub fn new(client: Client) -> Self {
        Ec2 { client }
    }

    /// Subnets matching any of the terms (a union, as upstream).
    pub async fn subnets(&self, terms: &[SubnetSelectorTerm]) -> Result<Vec<Subnet>, AwsError> {
        let mut found: BTreeMap<String, Subnet> = BTreeMap::new();
        for term in terms {
            let mut token = None;
            loop {
                let mut call = self.client.describe_subnets().set_next_token(token.take());
                if let Some(id) = &term.id {
                    call = call.subnet_ids(id);
                }
                for filter in tag_filters(term.tags.as_ref().unwrap_or(&BTreeMap::new())) {
                    call = call.filters(filter);
                }
                let out = call
                    .send()
                    .await
                    .map_err(|e| AwsError::from_sdk("DescribeSubnets", e))?;
                for s in out.subnets() {
                    let (Some(id), Some(zone)) = (s.subnet_id(), s.availability_zone()) else {
                        continue;
                    };
                    found.insert(
                        id.to_owned(),
                        Subnet {
                            id: id.to_owned(),
                            zone: zone.to_owned(),
                            zone_id: s.availability_zone_id().map(str::to_owned),
                            available_ips: i64::from(s.available_ip_address_count().unwrap_or(0)),
                        },
                    );
                }
                token = out.next_token().map(str::to_owned);
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(found.into_values().collect())
    }

    /// Security groups matching any of the terms: `(id, name)`.
    pub async fn security_groups(
        &self,
        terms: &[SecurityGroupSelectorTerm],
    ) -> Result<Vec<(String, String)>, AwsError> {
        let mut found: BTreeMap<String, String> = BTreeMap::new();
        for term in terms {
            let mut token = None;
            loop {
                let mut call = self
                    .client
                    .describe_security_groups()
                    .set_next_token(token.take());
                if let Some(id) = &term.id {
                    call = call.group_ids(id);
                }
                if let Some(name) = &term.name {
                    call = call.filters(Filter::builder().name("group-name").values(name).build());
                }
                for filter in tag_filters(term.tags.as_ref().unwrap_or(&BTreeMap::new())) {
                    call = call.filters(filter);
                }
                let out = call
                    .send()
                    .await
                    .map_err(|e| AwsError::from_sdk("DescribeSecurityGroups", e))?;
                for g in out.security_groups() {
                    if let Some(id) = g.group_id() {
                        found.insert(id.to_owned(), g.group_name().unwrap_or_default().to_owned());
                    }
                }
                token = out.next_token().map(str::to_owned);
                if token.is_none() {
                    break;
                }
            }
        }
        Ok(found.into_iter().collect())
    }

    /// Images matching one selector term (owners default to `self` and `amazon` when the term
    /// selects by name or tags, as upstream).
    pub async fn images(&self, term: &AmiSelectorTerm) -> Result<Vec<ImageInfo>, AwsError> {
        self.images_by(term.id.as_deref(), term, None).await
    }

    /// Images by id (for SSM-resolved aliases).
    pub async fn images_by_id(&self, ids: &[String]) -> Result<Vec<ImageInfo>, AwsError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        self.images_by(None, &AmiSelectorTerm::default(), Some(ids))
            .await
    }

    async fn images_by(
        &self,
        id: Option<&str>,
        term: &AmiSelectorTerm,
        ids: Option<&[String]>,
    ) -> Result<Vec<ImageInfo>, AwsError> {
        let mut call = self.client.describe_images();
        if let Some(id) = id {
            call = call.image_ids(id);
        }
        if let Some(ids) = ids {
            call = call.set_image_ids(Some(ids.to_vec()));
        }
        if let Some(name) = &term.name {
            call = call.filters(Filter::builder().name("name").values(name).build());
        }
        for filter in tag_filters(term.tags.as_ref().unwrap_or(&BTreeMap::new())) {
            call = call.filters(filter);
        }
        if id.is_none() && ids.is_none() {
            match &term.owner {
                Some(owner) => call = call.owners(owner),
                None => call = call.owners("self").owners("amazon"),
            }
        }
        let out = call
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("DescribeImages", e))?;
        Ok(out
            .images()
            .iter()
            .filter_map(|i| {
                Some(ImageInfo {
                    id: i.image_id()?.to_owned(),
                    name: i.name().unwrap_or_default().to_owned(),
                    architecture: i
                        .architecture()
                        .map(|a| a.as_str().to_owned())
                        .unwrap_or_else(|| "x86_64".to_owned()),
                    created: i.creation_date().unwrap_or_default().to_owned(),
                    deprecation_time: i.deprecation_time().map(str::to_owned),
                })
            })
            .collect())
    }

    /// Every instance type of the region that Karpenter can launch (HVM, x86_64 or arm64).
    pub async fn instance_types(&self) -> Result<Vec<InstanceTypeInfo>, AwsError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_instance_types()
                .filters(
                    Filter::builder()
                        .name("supported-virtualization-type")
                        .values("hvm")
                        .build(),
                )
                .filters(
                    Filter::builder()
                        .name("processor-info.supported-architecture")
                        .values("x86_64")
                        .values("arm64")
                        .build(),
                )
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeInstanceTypes", e))?;
            out.extend(page.instance_types().iter().filter_map(instance_type_info));
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Zones each instance type is offered in.
    pub async fn offerings(&self) -> Result<BTreeMap<String, BTreeSet<String>>, AwsError> {
        let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_instance_type_offerings()
                .location_type(LocationType::AvailabilityZone)
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeInstanceTypeOfferings", e))?;
            for o in page.instance_type_offerings() {
                if let (Some(t), Some(zone)) = (o.instance_type(), o.location()) {
                    out.entry(t.as_str().to_owned())
                        .or_default()
                        .insert(zone.to_owned());
                }
            }
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// The latest Linux spot price per (type, zone) over the last day.
    pub async fn spot_prices(&self) -> Result<HashMap<(String, String), f64>, AwsError> {
        let since = std::time::SystemTime::now() - std::time::Duration::from_secs(86_400);
        let mut latest: HashMap<(String, String), (i64, f64)> = HashMap::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_spot_price_history()
                .product_descriptions("Linux/UNIX")
                .product_descriptions("Linux/UNIX (Amazon VPC)")
                .start_time(aws_sdk_ec2::primitives::DateTime::from(since))
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeSpotPriceHistory", e))?;
            for p in page.spot_price_history() {
                let (Some(t), Some(zone), Some(price)) = (
                    p.instance_type(),
                    p.availability_zone(),
                    p.spot_price().and_then(|s| s.parse::<f64>().ok()),
                ) else {
                    continue;
                };
                let at = p.timestamp().map_or(0, |ts| ts.secs());
                let entry = latest
                    .entry((t.as_str().to_owned(), zone.to_owned()))
                    .or_insert((at, price));
                if at >= entry.0 {
                    *entry = (at, price);
                }
            }
            token = page
                .next_token()
                .filter(|t| !t.is_empty())
                .map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        Ok(latest.into_iter().map(|(k, (_, p))| (k, p)).collect())
    }

    /// Creates a launch template; one that already exists under the name is success (names
    /// are content hashes).
    pub async fn create_launch_template(
        &self,
        name: &str,
        data: RequestLaunchTemplateData,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        let result = self
            .client
            .create_launch_template()
            .launch_template_name(name)
            .launch_template_data(data)
            .set_tag_specifications(Some(tag_specifications(
                &[ResourceType::LaunchTemplate],
                tags,
            )))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = AwsError::from_sdk("CreateLaunchTemplate", e);
                if error.code == "InvalidLaunchTemplateName.AlreadyExistsException" {
                    Ok(())
                } else {
                    Err(error)
                }
            }
        }
    }

    /// Names of launch templates carrying `tag_key=tag_value`.
    pub async fn launch_templates(
        &self,
        tag_key: &str,
        tag_value: &str,
    ) -> Result<Vec<String>, AwsError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_launch_templates()
                .filters(
                    Filter::builder()
                        .name(format!("tag:{tag_key}"))
                        .values(tag_value)
                        .build(),
                )
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeLaunchTemplates", e))?;
            out.extend(
                page.launch_templates()
                    .iter()
                    .filter_map(|lt| lt.launch_template_name().map(str::to_owned)),
            );
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Deletes a launch template; not found is success.
    pub async fn delete_launch_template(&self, name: &str) -> Result<(), AwsError> {
        match self
            .client
            .delete_launch_template()
            .launch_template_name(name)
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = AwsError::from_sdk("DeleteLaunchTemplate", e);
                if error.is_not_found() {
                    Ok(())
                } else {
                    Err(error)
                }
            }
        }
    }

    /// One instant fleet of `capacity` instances. `templates` maps each override's
    /// [`template_key`](crate::selection::FleetOverride::template_key) → launch template name.
    pub async fn create_fleet(
        &self,
        plan: &FleetPlan,
        templates: &BTreeMap<String, String>,
        capacity: i32,
        client_token: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<FleetOutcome, AwsError> {
        let mut configs: BTreeMap<&str, FleetLaunchTemplateConfigRequest> = BTreeMap::new();
        for (priority, o) in plan.overrides.iter().enumerate() {
            let Some(template) = templates.get(&o.template_key()) else {
                continue;
            };
            let config = configs.remove(template.as_str()).unwrap_or_else(|| {
                FleetLaunchTemplateConfigRequest::builder()
                    .launch_template_specification(
                        FleetLaunchTemplateSpecificationRequest::builder()
                            .launch_template_name(template)
                            .version("$Latest")
                            .build(),
                    )
                    .build()
            });
            let mut overrides = config.overrides().to_vec();
            overrides.push(
                FleetLaunchTemplateOverridesRequest::builder()
                    .instance_type(o.instance_type.as_str().into())
                    .subnet_id(&o.subnet_id)
                    .availability_zone(&o.zone)
                    .priority(priority as f64)
                    .build(),
            );
            let config = FleetLaunchTemplateConfigRequest::builder()
                .set_launch_template_specification(config.launch_template_specification().cloned())
                .set_overrides(Some(overrides))
                .build();
            configs.insert(template.as_str(), config);
        }
        let block = plan.overrides.iter().any(|o| {
            o.reservation
                .as_ref()
                .is_some_and(|r| r.kind == ReservationKind::CapacityBlock)
        });
        let target = match plan.capacity_type {
            CapacityType::Spot => DefaultTargetCapacityType::Spot,
            CapacityType::Reserved if block => DefaultTargetCapacityType::CapacityBlock,
            // ODCRs: an on-demand fleet whose templates target the reservations.
            _ => DefaultTargetCapacityType::OnDemand,
        };
        let mut call = self
            .client
            .create_fleet()
            .r#type(FleetType::Instant)
            .client_token(client_token)
            .target_capacity_specification(
                TargetCapacitySpecificationRequest::builder()
                    .total_target_capacity(capacity)
                    .default_target_capacity_type(target)
                    .build(),
            )
            .set_launch_template_configs(Some(configs.into_values().collect()))
            .set_tag_specifications(Some(tag_specifications(
                &[
                    ResourceType::Instance,
                    ResourceType::Volume,
                    ResourceType::Fleet,
                ],
                tags,
            )));
        call = match (plan.capacity_type, plan.prioritized) {
            (CapacityType::Spot, prioritized) => call.spot_options(
                SpotOptionsRequest::builder()
                    .allocation_strategy(if prioritized {
                        SpotAllocationStrategy::CapacityOptimizedPrioritized
                    } else {
                        SpotAllocationStrategy::PriceCapacityOptimized
                    })
                    .build(),
            ),
            (_, prioritized) => call.on_demand_options(
                OnDemandOptionsRequest::builder()
                    .allocation_strategy(if prioritized {
                        FleetOnDemandAllocationStrategy::Prioritized
                    } else {
                        FleetOnDemandAllocationStrategy::LowestPrice
                    })
                    .build(),
            ),
        };
        let out = call
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("CreateFleet", e))?;
        // The type and zone an answer's override names (the zone through its subnet when EC2
        // leaves it out).
        let type_and_zone = |overrides: Option<&FleetLaunchTemplateOverrides>| {
            let instance_type = overrides
                .and_then(|o| o.instance_type())
                .map(|t| t.as_str().to_owned())
                .unwrap_or_default();
            let zone = overrides
                .and_then(|o| o.availability_zone())
                .map(str::to_owned)
                .or_else(|| {
                    let subnet = overrides.and_then(|o| o.subnet_id())?;
                    plan.overrides
                        .iter()
                        .find(|p| p.subnet_id == subnet)
                        .map(|p| p.zone.clone())
                })
                .unwrap_or_default();
            (instance_type, zone)
        };
        let launched = out
            .instances()
            .iter()
            .flat_map(|i| {
                let (from_override, zone) = type_and_zone(
                    i.launch_template_and_overrides()
                        .and_then(|l| l.overrides()),
                );
                let instance_type = i
                    .instance_type()
                    .map(|t| t.as_str().to_owned())
                    .unwrap_or(from_override);
                i.instance_ids()
                    .iter()
                    .map(move |id| (id.clone(), instance_type.clone(), zone.clone()))
            })
            .collect();
        let errors = out
            .errors()
            .iter()
            .map(|e| {
                let (instance_type, zone) = type_and_zone(
                    e.launch_template_and_overrides()
                        .and_then(|l| l.overrides()),
                );
                (
                    instance_type,
                    zone,
                    e.error_code().unwrap_or("Unknown").to_owned(),
                    e.error_message().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        Ok(FleetOutcome { launched, errors })
    }

    /// Adds tags to an instance.
    pub async fn create_tags(
        &self,
        id: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<(), AwsError> {
        let mut call = self.client.create_tags().resources(id);
        for (k, v) in tags {
            call = call.tags(Tag::builder().key(k).value(v).build());
        }
        call.send()
            .await
            .map_err(|e| AwsError::from_sdk("CreateTags", e))?;
        Ok(())
    }

    /// Instances by id (missing ids are simply absent from the answer).
    pub async fn instances_by_id(&self, ids: &[String]) -> Result<Vec<InstanceInfo>, AwsError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        // DescribeInstances fails the whole call when one id is unknown; ask by filter instead.
        self.describe_instances(vec![
            Filter::builder()
                .name("instance-id")
                .set_values(Some(ids.to_vec()))
                .build(),
        ])
        .await
    }

    /// Instances carrying every tag given (any state).
    pub async fn instances_tagged(
        &self,
        tags: &BTreeMap<String, String>,
    ) -> Result<Vec<InstanceInfo>, AwsError> {
        self.describe_instances(tag_filters(tags)).await
    }

    /// Running (or pending) instances tagged `cluster_tag=owned` for any of `nodeclaims`.
    pub async fn running_instances_of(
        &self,
        cluster_tag: &str,
        nodeclaims: &[String],
    ) -> Result<Vec<InstanceInfo>, AwsError> {
        if nodeclaims.is_empty() {
            return Ok(Vec::new());
        }
        let found = self
            .describe_instances(vec![
                Filter::builder()
                    .name(format!("tag:{cluster_tag}"))
                    .values("owned")
                    .build(),
                Filter::builder()
                    .name("tag:karpenter.sh/nodeclaim")
                    .set_values(Some(nodeclaims.to_vec()))
                    .build(),
                Filter::builder()
                    .name("instance-state-name")
                    .values("pending")
                    .values("running")
                    .build(),
            ])
            .await?;
        Ok(found
            .into_iter()
            .filter(|i| i.state == InstanceState::Running)
            .collect())
    }

    async fn describe_instances(
        &self,
        filters: Vec<Filter>,
    ) -> Result<Vec<InstanceInfo>, AwsError> {
        let mut out = Vec::new();
        let mut token = None;
        loop {
            let page = self
                .client
                .describe_instances()
                .set_filters(Some(filters.clone()))
                .set_next_token(token.take())
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DescribeInstances", e))?;
            for r in page.reservations() {
                for i in r.instances() {
                    let Some(id) = i.instance_id() else { continue };
                    let state = match i.state().and_then(|s| s.name()) {
                        Some(InstanceStateName::Terminated) => InstanceState::Terminated,
                        Some(InstanceStateName::ShuttingDown)
                        | Some(InstanceStateName::Stopping)
                        | Some(InstanceStateName::Stopped) => InstanceState::ShuttingDown,
                        _ => InstanceState::Running,
                    };
                    out.push(InstanceInfo {
                        id: id.to_owned(),
                        instance_type: i
                            .instance_type()
                            .map(|t| t.as_str().to_owned())
                            .unwrap_or_default(),
                        zone: i
                            .placement()
                            .and_then(|p| p.availability_zone())
                            .unwrap_or_default()
                            .to_owned(),
                        capacity_type: match i.instance_lifecycle() {
                            Some(InstanceLifecycleType::Spot) => CapacityType::Spot,
                            _ => CapacityType::OnDemand,
                        },
                        image_id: i.image_id().unwrap_or_default().to_owned(),
                        state,
                        launched_at_ms: i.launch_time().and_then(|t| t.to_millis().ok()),
                        tags: tags_of(i.tags()),
                        subnet_id: i.subnet_id().map(str::to_owned),
                        security_groups: i
                            .security_groups()
                            .iter()
                            .filter_map(|g| g.group_id().map(str::to_owned))
                            .collect(),
                        capacity_reservation: i.capacity_reservation_id().map(|id| {
                            (
                                id.to_owned(),
                                i.instance_lifecycle()
                                    == Some(&InstanceLifecycleType::CapacityBlock),
                            )
                        }),
                    });
                }
            }
            token = page.next_token().map(str::to_owned);
            if token.is_none() {
                break;
            }
        }
        Ok(out)
    }

    /// Terminates instances; ids that do not exist are reported back, not an error.
    pub async fn terminate(&self, ids: &[String]) -> Result<(), AwsError> {
        if ids.is_empty() {
            return Ok(());
        }
        match self
            .client
            .terminate_instances()
            .set_instance_ids(Some(ids.to_vec()))
            .send()
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => {
                let error = AwsError::from_sdk("TerminateInstances", e);
                if error.is_not_found() && ids.len() > 1 {
                    // One unknown id fails the whole batch: retry one by one so the others
                    // still go.
                    for id in ids {
                        Box::pin(self.terminate(std::slice::from_ref(id))).await?;
                    }
                    Ok(())
                } else if error.is_not_found() {
                    Ok(())
                } else {
                    Err(error)
                }
            }
        }
    }
}

fn lower(s: Option<&str>) -> String {
    s.unwrap_or_default().to_ascii_lowercase()
}

/// An SDK instance type as the catalog models it.
fn instance_type_info(i: &aws_sdk_ec2::types::InstanceTypeInfo) -> Option<InstanceTypeInfo> {
    let name = i.instance_type()?.as_str().to_owned();
    let archs = i.processor_info()?.supported_architectures();
    let arch = if archs.contains(&ArchitectureType::X8664) {
        "amd64"
    } else if archs.contains(&ArchitectureType::Arm64) {
        "arm64"
    } else {
        return None;
    };
    let processor = i.processor_info();
    let gpu = i.gpu_info().and_then(|g| g.gpus().first());
    let neuron = i.neuron_info().and_then(|n| n.neuron_devices().first());
    let inference = i
        .inference_accelerator_info()
        .and_then(|a| a.accelerators().first());
    let network = i.network_info();
    let usage = i.supported_usage_classes();
    Some(InstanceTypeInfo {
        vcpus: i64::from(i.v_cpu_info()?.default_v_cpus()?),
        memory_mib: i.memory_info()?.size_in_mib()?,
        arch,
        cpu_manufacturer: lower(processor.and_then(|p| p.manufacturer()))
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_owned(),
        clock_mhz: processor
            .and_then(|p| p.sustained_clock_speed_in_ghz())
            .map(|g| (g * 1000.0).round() as i64),
        gpu_count: gpu.and_then(|g| g.count()).map_or(0, i64::from),
        gpu_name: lower(gpu.and_then(|g| g.name())),
        gpu_manufacturer: lower(gpu.and_then(|g| g.manufacturer())),
        gpu_memory_mib: i
            .gpu_info()
            .and_then(|g| g.total_gpu_memory_in_mib())
            .map_or(0, i64::from),
        accelerator_count: neuron
            .and_then(|n| n.count())
            .or_else(|| inference.and_then(|a| a.count()))
            .map_or(0, i64::from),
        accelerator_name: lower(
            neuron
                .and_then(|n| n.name())
                .or_else(|| inference.and_then(|a| a.name())),
        ),
        accelerator_manufacturer: if neuron.is_some() {
            "aws".to_owned()
        } else {
            lower(inference.and_then(|a| a.manufacturer()))
        },
        local_nvme_gb: i
            .instance_storage_info()
            .and_then(|s| s.total_size_in_gb())
            .unwrap_or(0),
        max_enis: network
            .and_then(|n| n.maximum_network_interfaces())
            .map_or(1, i64::from),
        ipv4_per_eni: network
            .and_then(|n| n.ipv4_addresses_per_interface())
            .map_or(2, i64::from),
        network_mbps: network
            .and_then(|n| n.network_cards().first())
            .and_then(|c| c.baseline_bandwidth_in_gbps())
            .map(|g| (g * 1000.0).round() as i64),
        efa: network.and_then(|n| n.efa_supported()).unwrap_or(false),
        hypervisor: i
            .hypervisor()
            .map(|h| h.as_str().to_owned())
            .unwrap_or_default(),
        bare_metal: i.bare_metal().unwrap_or(false),
        current_generation: i.current_generation().unwrap_or(false),
        spot: usage.contains(&UsageClassType::Spot),
        on_demand: usage.contains(&UsageClassType::OnDemand),
        ebs_mbps: i
            .ebs_info()
            .and_then(|e| e.ebs_optimized_info())
            .and_then(|e| e.baseline_bandwidth_in_mbps())
            .map(i64::from),
        branch_enis: 0,
        name,
    })
}
