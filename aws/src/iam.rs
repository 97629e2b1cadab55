//! Instance profiles for node classes that name a `role`: one profile per (cluster, region,
//! role), created and tagged on first use and kept pointing at the role, as upstream manages
//! them.

use std::collections::HashMap;
use std::time::Duration;

use aws_sdk_iam::Client;
use aws_sdk_iam::types::Tag;
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::AwsError;

/// How long a checked profile is trusted before it is checked again (upstream: 15 min).
pub const PROFILE_CACHE_TTL: Duration = Duration::from_secs(900);

/// The role name of `role`, which may be a name, a path-qualified name or an ARN.
pub fn role_name(role: &str) -> &str {
    role.rsplit('/').next().unwrap_or(role)
}

/// The profile name for a role: `<cluster>_<hash>`, stable per cluster, region and role.
pub fn profile_name(cluster: &str, region: &str, role: &str) -> String {
    let hash = karpenter_core::model::Fnv1a::default()
        .write(region.as_bytes())
        .write(b"/")
        .write(role_name(role).as_bytes())
        .finish();
    format!("{cluster}_{hash:016x}")
}

/// Creates and caches instance profiles.
#[derive(Debug)]
pub struct InstanceProfiles {
    client: Client,
    cluster: String,
    region: String,
    checked: Mutex<HashMap<String, Instant>>,
}

impl InstanceProfiles {
    /// For a cluster in a region.
    pub fn new(client: Client, cluster: &str, region: &str) -> Self {
        InstanceProfiles {
            client,
            cluster: cluster.to_owned(),
            region: region.to_owned(),
            checked: Mutex::new(HashMap::new()),
        }
    }

    /// The profile for `role`, created (and its role set) if needed.
    pub async fn ensure(&self, role: &str, node_class: &str) -> Result<String, AwsError> {
        let name = profile_name(&self.cluster, &self.region, role);
        let role = role_name(role);
        let mut checked = self.checked.lock().await;
        if checked
            .get(&name)
            .is_some_and(|at| at.elapsed() < PROFILE_CACHE_TTL)
        {
            return Ok(name);
        }
        let current_roles: Vec<String> = match self
            .client
            .get_instance_profile()
            .instance_profile_name(&name)
            .send()
            .await
        {
            Ok(out) => out
                .instance_profile()
                .map(|p| p.roles().iter().map(|r| r.role_name().to_owned()).collect())
                .unwrap_or_default(),
            Err(e) => {
                let error = AwsError::from_sdk("GetInstanceProfile", e);
                if !error.is_not_found() {
                    return Err(error);
                }
                let tags = [
                    (
                        format!("kubernetes.io/cluster/{}", self.cluster),
                        "owned".to_owned(),
                    ),
                    (
                        "karpenter.k8s.aws/ec2nodeclass".to_owned(),
                        node_class.to_owned(),
                    ),
                    (
                        "topology.kubernetes.io/region".to_owned(),
                        self.region.clone(),
                    ),
                    ("eks:eks-cluster-name".to_owned(), self.cluster.clone()),
                ];
                let mut create = self
                    .client
                    .create_instance_profile()
                    .instance_profile_name(&name)
                    .path(format!("/karpenter/{}/{}/", self.region, self.cluster));
                for (k, v) in tags {
                    create = create.tags(Tag::builder().key(k).value(v).build().map_err(|e| {
                        AwsError::new("CreateInstanceProfile", "InvalidTag", &e.to_string())
                    })?);
                }
                if let Err(e) = create.send().await {
                    let error = AwsError::from_sdk("CreateInstanceProfile", e);
                    if error.code != "EntityAlreadyExists" {
                        return Err(error);
                    }
                }
                Vec::new()
            }
        };
        if !current_roles.iter().any(|r| r == role) {
            for other in &current_roles {
                self.client
                    .remove_role_from_instance_profile()
                    .instance_profile_name(&name)
                    .role_name(other)
                    .send()
                    .await
                    .map_err(|e| AwsError::from_sdk("RemoveRoleFromInstanceProfile", e))?;
            }
            self.client
                .add_role_to_instance_profile()
                .instance_profile_name(&name)
                .role_name(role)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("AddRoleToInstanceProfile", e))?;
        }
        checked.insert(name.clone(), Instant::now());
        Ok(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_stable_per_cluster_region_and_role() {
        let a = profile_name("prod", "us-west-2", "KarpenterNodeRole");
        assert!(a.starts_with("prod_"));
        assert_eq!(
            a,
            profile_name(
                "prod",
                "us-west-2",
                "arn:aws:iam::123456789012:role/KarpenterNodeRole"
            )
        );
        assert_ne!(a, profile_name("prod", "eu-west-1", "KarpenterNodeRole"));
        assert_eq!(role_name("arn:aws:iam::1:role/path/Name"), "Name");
    }
}
