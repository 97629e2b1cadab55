//! The Deployment and ReplicaSet controllers' part a scale test needs
//! ([`crate::Controllers::workloads`]): each pass gives every Deployment one ReplicaSet for
//! its current template (named by the template's hash, `pod-template-hash` label, owned by
//! the Deployment) and keeps `spec.replicas` live pods of it (owned by the ReplicaSet,
//! `generateName` from its name). Surplus pods go as the ReplicaSet controller ranks them:
//! unbound first, then not ready, then those sharing a node with more of their siblings,
//! then the newest. ReplicaSets of an older template are scaled to zero at once (no surge
//! or unavailability pacing). The Deployment's status counts its pods: `replicas`,
//! `updatedReplicas`, `readyReplicas`, `availableReplicas` (ready ones; no
//! `minReadySeconds`), `observedGeneration`. Pods deleted, evicted or gone with their node
//! are replaced in the next pass. StatefulSets, DaemonSets and Jobs are not run.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::PODS;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::store::{DeleteRequest, RequestOptions, Store};

/// A short, stable hash of a pod template (FNV-1a, as ten hex digits).
fn template_hash(template: &Value) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in template.to_string().bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:010x}", hash & 0xff_ffff_ffff)
}

fn owned_by(object: &Value, uid: &str) -> bool {
    object["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|o| o.iter().any(|o| o["uid"] == uid))
}

fn owner(kind: &str, of: &Value) -> Value {
    json!([{
        "apiVersion": "apps/v1", "kind": kind,
        "name": of["metadata"]["name"], "uid": of["metadata"]["uid"],
        "controller": true, "blockOwnerDeletion": true,
    }])
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn live(pod: &Value) -> bool {
    pod["metadata"].get("deletionTimestamp").is_none()
        && !matches!(
            pod["status"]["phase"].as_str(),
            Some("Succeeded" | "Failed")
        )
}

/// One pass over every Deployment. Returns how many pods it created and deleted.
pub fn pass(store: &mut Store) -> (usize, usize) {
    let (Some(deployments), Some(replicasets)) = (
        store.find("apps", "v1", "deployments"),
        store.find("apps", "v1", "replicasets"),
    ) else {
        return (0, 0);
    };
    let everything = (LabelSelector::default(), FieldSelector::default());
    let list = |store: &Store, t: usize| -> Vec<Value> {
        store
            .list(t, None, &everything.0, &everything.1, None)
            .into_iter()
            .map(|(_, v)| v)
            .collect()
    };
    let all_pods = list(store, PODS);
    let all_sets = list(store, replicasets);
    let (mut created, mut deleted) = (0, 0);
    for deployment in list(store, deployments) {
        if deployment["metadata"].get("deletionTimestamp").is_some() {
            continue;
        }
        let ctx = Deployment::read(&deployment);
        let sets: Vec<&Value> = all_sets.iter().filter(|s| owned_by(s, &ctx.uid)).collect();
        // Older templates' pods go.
        for old in sets
            .iter()
            .filter(|s| s["metadata"]["name"] != ctx.set_name.as_str())
        {
            let uid = old["metadata"]["uid"].as_str().unwrap_or("");
            for pod in all_pods.iter().filter(|p| owned_by(p, uid) && live(p)) {
                deleted += usize::from(delete_pod(store, pod));
            }
        }
        let set = match sets
            .iter()
            .find(|s| s["metadata"]["name"] == ctx.set_name.as_str())
        {
            Some(set) => (*set).clone(),
            None => match ctx.create_set(store, replicasets, &deployment) {
                Some(set) => set,
                None => continue,
            },
        };
        let set_uid = set["metadata"]["uid"].as_str().unwrap_or("").to_owned();
        let mut pods: Vec<&Value> = all_pods
            .iter()
            .filter(|p| owned_by(p, &set_uid) && live(p))
            .collect();
        if pods.len() < ctx.replicas {
            for _ in pods.len()..ctx.replicas {
                created += usize::from(ctx.create_pod(store, &set));
            }
        } else if pods.len() > ctx.replicas {
            rank_for_deletion(&mut pods);
            for pod in pods.iter().take(pods.len() - ctx.replicas) {
                deleted += usize::from(delete_pod(store, pod));
            }
            pods.truncate(ctx.replicas);
        }
        ctx.write_status(store, deployments, &deployment, &pods);
    }
    (created, deleted)
}

/// What a pass reads of a Deployment.
struct Deployment {
    uid: String,
    namespace: String,
    replicas: usize,
    template: Value,
    hash: String,
    set_name: String,
}

impl Deployment {
    fn read(deployment: &Value) -> Deployment {
        let template = deployment["spec"]["template"].clone();
        let hash = template_hash(&template);
        let name = deployment["metadata"]["name"].as_str().unwrap_or("");
        Deployment {
            uid: deployment["metadata"]["uid"]
                .as_str()
                .unwrap_or("")
                .to_owned(),
            namespace: deployment["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_owned(),
            replicas: deployment["spec"]["replicas"].as_u64().unwrap_or(1) as usize,
            set_name: format!("{name}-{hash}"),
            hash,
            template,
        }
    }

    fn labels(&self) -> Value {
        let mut labels = self.template["metadata"]["labels"].clone();
        if !labels.is_object() {
            labels = json!({});
        }
        labels["pod-template-hash"] = json!(self.hash);
        labels
    }

    fn create_set(
        &self,
        store: &mut Store,
        replicasets: usize,
        deployment: &Value,
    ) -> Option<Value> {
        let mut template = self.template.clone();
        template["metadata"]["labels"] = self.labels();
        let set = json!({
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {
                "name": self.set_name, "namespace": self.namespace,
                "labels": self.labels(),
                "ownerReferences": owner("Deployment", deployment),
            },
            "spec": {
                "replicas": self.replicas,
                "selector": {"matchLabels": self.labels()},
                "template": template,
            },
        });
        match store.create(replicasets, &self.namespace, set) {
            Ok(set) => Some(set),
            Err(error) => {
                tracing::debug!(replicaset = %self.set_name, %error, "workload stand-in: creating the ReplicaSet failed");
                None
            }
        }
    }

    fn create_pod(&self, store: &mut Store, set: &Value) -> bool {
        let mut metadata = self.template["metadata"].clone();
        if !metadata.is_object() {
            metadata = json!({});
        }
        metadata["generateName"] = json!(format!("{}-", self.set_name));
        metadata["namespace"] = json!(self.namespace);
        metadata["labels"] = self.labels();
        metadata["ownerReferences"] = owner("ReplicaSet", set);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": metadata,
            "spec": self.template["spec"],
        });
        match store.create_with(PODS, &self.namespace, pod, RequestOptions::default()) {
            Ok(_) => true,
            Err(error) => {
                tracing::debug!(replicaset = %self.set_name, %error, "workload stand-in: creating a pod failed");
                false
            }
        }
    }

    fn write_status(
        &self,
        store: &mut Store,
        deployments: usize,
        deployment: &Value,
        pods: &[&Value],
    ) {
        let ready = pods.iter().filter(|p| pod_ready(p)).count();
        let status = json!({
            "observedGeneration": deployment["metadata"]["generation"],
            "replicas": pods.len(), "updatedReplicas": pods.len(),
            "readyReplicas": ready, "availableReplicas": ready,
            "unavailableReplicas": pods.len().saturating_sub(ready),
        });
        if deployment["status"] == status {
            return;
        }
        let mut updated = deployment.clone();
        updated["status"] = status;
        let name = deployment["metadata"]["name"].as_str().unwrap_or("");
        if let Err(error) = store.replace(
            deployments,
            &self.namespace,
            name,
            updated,
            true,
            RequestOptions::default(),
        ) {
            tracing::debug!(deployment = %name, %error, "workload stand-in: writing the status failed");
        }
    }
}

/// Orders pods as the ReplicaSet controller deletes them, first to go first.
fn rank_for_deletion(pods: &mut [&Value]) {
    let mut on_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods.iter() {
        if let Some(node) = pod["spec"]["nodeName"].as_str() {
            *on_node.entry(node.to_owned()).or_default() += 1;
        }
    }
    pods.sort_by_key(|pod| {
        let node = pod["spec"]["nodeName"].as_str().filter(|n| !n.is_empty());
        let created = pod["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        (
            node.is_some(),
            pod_ready(pod),
            std::cmp::Reverse(node.map_or(0, |n| on_node[n])),
            std::cmp::Reverse(created),
            pod["metadata"]["name"].as_str().unwrap_or("").to_owned(),
        )
    });
}

fn delete_pod(store: &mut Store, pod: &Value) -> bool {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    match store.delete(PODS, namespace, name, &DeleteRequest::default()) {
        Ok(_) => true,
        Err(error) => {
            tracing::debug!(pod = %name, %error, "workload stand-in: deleting a pod failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn surplus_pods_go_unbound_first_then_from_crowded_nodes_then_newest() {
        let pod = |name: &str, node: Option<&str>, ready: bool, created: &str| {
            let mut p =
                json!({"metadata": {"name": name, "creationTimestamp": created}, "spec": {}});
            if let Some(n) = node {
                p["spec"]["nodeName"] = json!(n);
            }
            if ready {
                p["status"] = json!({"conditions": [{"type": "Ready", "status": "True"}]});
            }
            p
        };
        let pods = [
            pod("a", Some("n1"), true, "2026-01-01T00:00:00Z"),
            pod("b", Some("n2"), true, "2026-01-01T00:00:01Z"),
            pod("c", Some("n2"), true, "2026-01-01T00:00:02Z"),
            pod("d", None, false, "2026-01-01T00:00:00Z"),
            pod("e", Some("n1"), false, "2026-01-01T00:00:00Z"),
        ];
        let mut ranked: Vec<&Value> = pods.iter().collect();
        rank_for_deletion(&mut ranked);
        let names: Vec<&str> = ranked
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["d", "e", "c", "b", "a"]);
    }

    #[test]
    fn the_template_hash_follows_the_template() {
        let a = json!({"spec": {"containers": [{"name": "a"}]}});
        let b = json!({"spec": {"containers": [{"name": "b"}]}});
        assert_eq!(template_hash(&a), template_hash(&a.clone()));
        assert_ne!(template_hash(&a), template_hash(&b));
        assert_eq!(template_hash(&a).len(), 10);
    }
}
