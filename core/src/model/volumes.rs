//! Volume topology: where a pod's persistent volumes let it run, read from its
//! PersistentVolumeClaims, their PersistentVolumes and StorageClasses as kube-scheduler's
//! volume binding does. Pure: the caller hands over the objects it has.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod as KubePod, Volume};
use k8s_openapi::api::storage::v1::StorageClass;

use super::requirements::{Requirement, Requirements};
use crate::vocab::labels;

/// At most this many combinations of volume alternatives are kept; more would only come
/// from many volumes each allowing many topologies, and the first ones suffice to place.
const MAX_ALTERNATIVES: usize = 64;

/// The storage objects a pod's volumes refer to, by name (claims by namespace and name).
#[derive(Debug, Clone, Default)]
pub struct StorageView {
    /// PersistentVolumeClaims by (namespace, name).
    pub claims: BTreeMap<(String, String), PersistentVolumeClaim>,
    /// PersistentVolumes by name.
    pub volumes: BTreeMap<String, PersistentVolume>,
    /// StorageClasses by name.
    pub classes: BTreeMap<String, StorageClass>,
}

/// Why a pod's volumes keep it off every node until something changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VolumeError {
    /// The claim does not exist (yet).
    #[error("persistentvolumeclaim {claim} not found; create it or fix the pod's volume")]
    ClaimNotFound {
        /// `namespace/name`.
        claim: String,
    },
    /// The claim is being deleted.
    #[error("persistentvolumeclaim {claim} is being deleted")]
    ClaimDeleting {
        /// `namespace/name`.
        claim: String,
    },
    /// The claim's volume is gone.
    #[error(
        "persistentvolumeclaim {claim} is Lost: its persistentvolume {volume} no longer exists"
    )]
    ClaimLost {
        /// `namespace/name`.
        claim: String,
        /// PersistentVolume name.
        volume: String,
    },
    /// The claim names a volume that does not exist or is being deleted.
    #[error("persistentvolumeclaim {claim} is bound to persistentvolume {volume}, which {why}")]
    VolumeUnusable {
        /// `namespace/name`.
        claim: String,
        /// PersistentVolume name.
        volume: String,
        /// "does not exist" or "is being deleted".
        why: &'static str,
    },
    /// An unbound claim without a StorageClass cannot be provisioned for a new node.
    #[error(
        "persistentvolumeclaim {claim} is unbound and names no storageClassName; set one or bind it to a volume"
    )]
    UnboundWithoutClass {
        /// `namespace/name`.
        claim: String,
    },
    /// The claim's StorageClass does not exist.
    #[error("persistentvolumeclaim {claim}: storageclass {class} not found")]
    ClassNotFound {
        /// `namespace/name`.
        claim: String,
        /// StorageClass name.
        class: String,
    },
    /// An Immediate-binding claim is bound by the volume controller, not at scheduling.
    #[error(
        "persistentvolumeclaim {claim} uses storageclass {class} with volumeBindingMode Immediate and is not bound yet; the pod waits for the volume"
    )]
    ImmediateUnbound {
        /// `namespace/name`.
        claim: String,
        /// StorageClass name.
        class: String,
    },
    /// No node could satisfy every volume's topology at once.
    #[error("the topologies of the pod's volumes exclude each other ({volumes})")]
    Conflicting {
        /// The volumes, comma-separated.
        volumes: String,
    },
}

/// A volume a pod needs attached to its node through a CSI driver: what per-node attach
/// limits (CSINode `allocatable.count`) count.
#[derive(
    Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct VolumeAttachment {
    /// CSI driver name, e.g. `ebs.csi.aws.com`.
    pub driver: String,
    /// The volume: its PersistentVolume's handle or name, or for a claim not bound yet the
    /// claim (`namespace/name`), so pods sharing a volume count it once.
    pub volume: String,
}

/// The in-tree EBS plugin's volumes are served by the EBS CSI driver (CSI migration).
const EBS_CSI_DRIVER: &str = "ebs.csi.aws.com";

/// The volumes a pod needs attached, by driver; claims that cannot be resolved are left out
/// ([`volume_requirements`] reports them).
pub fn volume_attachments(pod: &KubePod, storage: &StorageView) -> Vec<VolumeAttachment> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let provisioner = |class: &str| {
        storage
            .classes
            .get(class)
            .map(|c| c.provisioner.clone())
            .filter(|p| !p.is_empty())
    };
    let mut out: Vec<VolumeAttachment> = pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|volume| {
            let (claim_name, template_class) = claim_of(pod_name, volume)?;
            let template_class = template_class.flatten();
            let key = format!("{namespace}/{claim_name}");
            let Some(claim) = storage.claims.get(&(namespace.to_owned(), claim_name)) else {
                return template_class.and_then(|class| {
                    provisioner(&class).map(|driver| VolumeAttachment {
                        driver,
                        volume: key,
                    })
                });
            };
            let spec = claim.spec.as_ref()?;
            match spec.volume_name.as_deref().filter(|v| !v.is_empty()) {
                Some(name) => {
                    let pv = storage.volumes.get(name)?.spec.as_ref()?;
                    if let Some(csi) = &pv.csi {
                        Some(VolumeAttachment {
                            driver: csi.driver.clone(),
                            volume: csi.volume_handle.clone(),
                        })
                    } else {
                        pv.aws_elastic_block_store
                            .as_ref()
                            .map(|ebs| VolumeAttachment {
                                driver: EBS_CSI_DRIVER.to_owned(),
                                volume: ebs.volume_id.clone(),
                            })
                    }
                }
                None => spec
                    .storage_class_name
                    .as_deref()
                    .and_then(provisioner)
                    .map(|driver| VolumeAttachment {
                        driver,
                        volume: key,
                    }),
            }
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Whether a node with per-driver attach `limits`, which has `attached` already, can take
/// a pod needing `wanted` attached: volumes it has already count once.
pub fn attachments_fit(
    limits: &BTreeMap<String, i64>,
    attached: &[VolumeAttachment],
    wanted: &[VolumeAttachment],
) -> bool {
    limits.iter().all(|(driver, limit)| {
        let new = wanted
            .iter()
            .filter(|w| &w.driver == driver && !attached.contains(w))
            .count() as i64;
        new == 0 || attached.iter().filter(|a| &a.driver == driver).count() as i64 + new <= *limit
    })
}

/// The node requirements a pod's volumes add, as alternatives (any one will do); empty when
/// its volumes place no constraint. Bound claims follow their PersistentVolume's node
/// affinity (hostname terms of local and hostPath volumes dropped, as upstream does, since a
/// new node can never be that host); unbound claims of a `WaitForFirstConsumer` class
/// follow its `allowedTopologies`. Every term counts as an alternative, where upstream reads
/// only the first.
pub fn volume_requirements(
    pod: &KubePod,
    storage: &StorageView,
) -> Result<Vec<Requirements>, VolumeError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    let mut combined: Vec<Requirements> = vec![Requirements::new()];
    let mut constrained_by: Vec<String> = Vec::new();
    for volume in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let Some(alternatives) = volume_alternatives(namespace, pod_name, volume, storage)? else {
            continue;
        };
        constrained_by.push(volume.name.clone());
        let mut next = Vec::new();
        for have in &combined {
            for add in &alternatives {
                if have.compatible(add).is_ok() && next.len() < MAX_ALTERNATIVES {
                    let mut both = have.clone();
                    both.intersect_with(add);
                    next.push(both);
                }
            }
        }
        if next.is_empty() {
            return Err(VolumeError::Conflicting {
                volumes: constrained_by.join(", "),
            });
        }
        combined = next;
    }
    if constrained_by.is_empty() {
        return Ok(Vec::new());
    }
    Ok(combined)
}

/// The claim a volume uses, and for an ephemeral volume its template's storage class (until
/// the claim exists, it says where the volume could be provisioned); `None` for volumes
/// without a claim (emptyDir, configMap, …).
fn claim_of(pod_name: &str, volume: &Volume) -> Option<(String, Option<Option<String>>)> {
    if let Some(claim) = &volume.persistent_volume_claim {
        return Some((claim.claim_name.clone(), None));
    }
    let ephemeral = volume.ephemeral.as_ref()?;
    // The ephemeral volume controller names the claim `<pod>-<volume>`.
    let class = ephemeral
        .volume_claim_template
        .as_ref()
        .and_then(|t| t.spec.storage_class_name.clone());
    Some((format!("{pod_name}-{}", volume.name), Some(class)))
}

/// One volume's alternatives; `None` when it places no constraint (not a claim, or a claim
/// free to be provisioned anywhere).
fn volume_alternatives(
    namespace: &str,
    pod_name: &str,
    volume: &Volume,
    storage: &StorageView,
) -> Result<Option<Vec<Requirements>>, VolumeError> {
    let Some((claim_name, template_class)) = claim_of(pod_name, volume) else {
        return Ok(None);
    };
    let key = format!("{namespace}/{claim_name}");
    let Some(claim) = storage
        .claims
        .get(&(namespace.to_owned(), claim_name.clone()))
    else {
        return match template_class {
            Some(Some(class)) => class_alternatives(&key, &class, storage),
            Some(None) => Err(VolumeError::UnboundWithoutClass { claim: key }),
            None => Err(VolumeError::ClaimNotFound { claim: key }),
        };
    };
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(VolumeError::ClaimDeleting { claim: key });
    }
    let bound_to = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.clone())
        .filter(|v| !v.is_empty());
    if claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
        return Err(VolumeError::ClaimLost {
            claim: key,
            volume: bound_to.unwrap_or_default(),
        });
    }
    if let Some(volume_name) = bound_to {
        let Some(pv) = storage.volumes.get(&volume_name) else {
            return Err(VolumeError::VolumeUnusable {
                claim: key,
                volume: volume_name,
                why: "does not exist",
            });
        };
        if pv.metadata.deletion_timestamp.is_some() {
            return Err(VolumeError::VolumeUnusable {
                claim: key,
                volume: volume_name,
                why: "is being deleted",
            });
        }
        return Ok(volume_affinity(pv));
    }
    match claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .filter(|c| !c.is_empty())
    {
        Some(class) => class_alternatives(&key, &class, storage),
        None => Err(VolumeError::UnboundWithoutClass { claim: key }),
    }
}

/// Where a class provisions an unbound claim's volume.
fn class_alternatives(
    claim: &str,
    class_name: &str,
    storage: &StorageView,
) -> Result<Option<Vec<Requirements>>, VolumeError> {
    let Some(class) = storage.classes.get(class_name) else {
        return Err(VolumeError::ClassNotFound {
            claim: claim.to_owned(),
            class: class_name.to_owned(),
        });
    };
    if class.volume_binding_mode.as_deref() != Some("WaitForFirstConsumer") {
        return Err(VolumeError::ImmediateUnbound {
            claim: claim.to_owned(),
            class: class_name.to_owned(),
        });
    }
    let terms: Vec<Requirements> = class
        .allowed_topologies
        .iter()
        .flatten()
        .map(|term| {
            let mut reqs = Requirements::new();
            for expr in term.match_label_expressions.iter().flatten() {
                reqs.add(
                    labels::normalize_label(&expr.key),
                    Requirement::is_in(expr.values.iter().cloned()),
                );
            }
            reqs
        })
        .filter(|reqs| reqs.iter().next().is_some())
        .collect();
    Ok((!terms.is_empty()).then_some(terms))
}

/// A PersistentVolume's required node affinity as alternatives.
fn volume_affinity(pv: &PersistentVolume) -> Option<Vec<Requirements>> {
    let spec = pv.spec.as_ref()?;
    let node_local = spec.local.is_some() || spec.host_path.is_some();
    let terms: Vec<Requirements> = spec
        .node_affinity
        .as_ref()?
        .required
        .as_ref()?
        .node_selector_terms
        .iter()
        .map(|term| {
            let mut reqs = Requirements::new();
            for expr in term.match_expressions.iter().flatten() {
                let key = labels::normalize_label(&expr.key);
                if node_local && key == labels::HOSTNAME {
                    continue;
                }
                if let Some(op) = crate::vocab::Operator::from_node_selector(&expr.operator) {
                    reqs.add(
                        key,
                        Requirement::new(op, expr.values.as_deref().unwrap_or_default()),
                    );
                }
            }
            reqs
        })
        .collect();
    // A term left empty (only a hostname, dropped) allows every node.
    if terms.is_empty() || terms.iter().any(|t| t.iter().next().is_none()) {
        return None;
    }
    Some(terms)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn storage(yaml: &str) -> StorageView {
        let mut view = StorageView::default();
        for doc in yaml.split("\n---\n") {
            let value: serde_json::Value = serde_yaml_ng::from_str(doc).unwrap();
            match value["kind"].as_str().unwrap() {
                "PersistentVolumeClaim" => {
                    let pvc: PersistentVolumeClaim = serde_json::from_value(value).unwrap();
                    let key = (
                        pvc.metadata.namespace.clone().unwrap(),
                        pvc.metadata.name.clone().unwrap(),
                    );
                    view.claims.insert(key, pvc);
                }
                "PersistentVolume" => {
                    let pv: PersistentVolume = serde_json::from_value(value).unwrap();
                    view.volumes.insert(pv.metadata.name.clone().unwrap(), pv);
                }
                "StorageClass" => {
                    let sc: StorageClass = serde_json::from_value(value).unwrap();
                    view.classes.insert(sc.metadata.name.clone().unwrap(), sc);
                }
                other => panic!("unexpected kind {other}"),
            }
        }
        view
    }

    const OBJECTS: &str = r#"
kind: StorageClass
apiVersion: storage.k8s.io/v1
metadata: {name: gp3}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
allowedTopologies:
  - matchLabelExpressions: [{key: topology.ebs.csi.aws.com/zone, values: [us-east-1a]}]
  - matchLabelExpressions: [{key: topology.kubernetes.io/zone, values: [us-east-1c]}]
---
kind: StorageClass
apiVersion: storage.k8s.io/v1
metadata: {name: anywhere}
provisioner: ebs.csi.aws.com
volumeBindingMode: WaitForFirstConsumer
---
kind: StorageClass
apiVersion: storage.k8s.io/v1
metadata: {name: immediate}
provisioner: ebs.csi.aws.com
---
kind: PersistentVolume
apiVersion: v1
metadata: {name: pv-b}
spec:
  csi: {driver: ebs.csi.aws.com, volumeHandle: vol-0b}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions: [{key: topology.kubernetes.io/zone, operator: In, values: [us-east-1b]}]
---
kind: PersistentVolume
apiVersion: v1
metadata: {name: pv-local}
spec:
  local: {path: /mnt/disk}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/hostname, operator: In, values: [ip-10-0-0-1]}
            - {key: topology.kubernetes.io/zone, operator: In, values: [us-east-1a]}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: bound-b, namespace: db}
spec: {volumeName: pv-b}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: local, namespace: db}
spec: {volumeName: pv-local}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: new-gp3, namespace: db}
spec: {storageClassName: gp3}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: new-anywhere, namespace: db}
spec: {storageClassName: anywhere}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: new-immediate, namespace: db}
spec: {storageClassName: immediate}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: lost, namespace: db}
spec: {volumeName: pv-gone}
status: {phase: Lost}
---
kind: PersistentVolumeClaim
apiVersion: v1
metadata: {name: dangling, namespace: db}
spec: {volumeName: pv-gone}
"#;

    fn pod_with(volumes: &str) -> KubePod {
        serde_yaml_ng::from_str(&format!(
            "metadata: {{name: web-0, namespace: db}}\nspec:\n  containers: [{{name: c}}]\n  volumes: {volumes}\n"
        ))
        .unwrap()
    }

    fn zones(alternatives: &[Requirements]) -> Vec<String> {
        alternatives
            .iter()
            .map(|alt| {
                alt.iter()
                    .map(|(k, r)| format!("{k} {r}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect()
    }

    fn claim(name: &str) -> String {
        format!("{{name: {name}, persistentVolumeClaim: {{claimName: {name}}}}}")
    }

    #[test]
    fn bound_claims_follow_their_volume_and_unbound_ones_their_class() {
        let view = storage(OBJECTS);
        let of = |volumes: &str| volume_requirements(&pod_with(volumes), &view);
        assert_eq!(
            zones(&of(&format!("[{}]", claim("bound-b"))).unwrap()),
            vec!["topology.kubernetes.io/zone In [us-east-1b]"]
        );
        // Every allowedTopologies term is an alternative; the EBS zone key is normalised.
        assert_eq!(
            zones(&of(&format!("[{}]", claim("new-gp3"))).unwrap()),
            vec![
                "topology.kubernetes.io/zone In [us-east-1a]",
                "topology.kubernetes.io/zone In [us-east-1c]"
            ]
        );
        // A class without allowedTopologies, emptyDir and configMap volumes: no constraint.
        assert!(
            of(&format!(
                "[{}, {{name: scratch, emptyDir: {{}}}}, {{name: cfg, configMap: {{name: c}}}}]",
                claim("new-anywhere")
            ))
            .unwrap()
            .is_empty()
        );
        // A local volume's hostname is dropped (a new node is never that host), its zone kept.
        assert_eq!(
            zones(&of(&format!("[{}]", claim("local"))).unwrap()),
            vec!["topology.kubernetes.io/zone In [us-east-1a]"]
        );
        // Volumes combine: the gp3 claim's zone a alternative matches the local volume's.
        assert_eq!(
            zones(&of(&format!("[{}, {}]", claim("local"), claim("new-gp3"))).unwrap()),
            vec!["topology.kubernetes.io/zone In [us-east-1a]"]
        );
        // An ephemeral volume whose claim does not exist yet follows its template's class.
        let ephemeral = "[{name: data, ephemeral: {volumeClaimTemplate: {spec: {storageClassName: gp3, accessModes: [ReadWriteOnce]}}}}]";
        assert_eq!(of(ephemeral).unwrap().len(), 2);
    }

    #[test]
    fn unusable_volumes_block_the_pod_with_the_fix_named() {
        let view = storage(OBJECTS);
        let error = |volumes: &str| {
            volume_requirements(&pod_with(volumes), &view)
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            error(&format!("[{}, {}]", claim("bound-b"), claim("new-gp3"))),
            "the topologies of the pod's volumes exclude each other (bound-b, new-gp3)"
        );
        assert!(error(&format!("[{}]", claim("missing"))).contains("db/missing not found"));
        assert!(error(&format!("[{}]", claim("new-immediate"))).contains("Immediate"));
        assert!(error(&format!("[{}]", claim("lost"))).contains("is Lost"));
        assert!(
            error(&format!("[{}]", claim("dangling"))).contains("pv-gone, which does not exist")
        );
        let no_class = "[{name: data, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce]}}}}]";
        assert!(error(no_class).contains("names no storageClassName"));
        // A pod whose node selector excludes its volume's zone is blocked, with that said.
        let mut pod = pod_with(&format!("[{}]", claim("bound-b")));
        if let Some(spec) = pod.spec.as_mut() {
            spec.node_selector = Some(
                [(
                    "topology.kubernetes.io/zone".to_owned(),
                    "us-east-1a".to_owned(),
                )]
                .into(),
            );
        }
        let converted = crate::model::Pod::try_from(&pod)
            .unwrap()
            .with_volume_topology(&pod, &view);
        assert!(
            converted
                .blocked
                .as_deref()
                .is_some_and(|b| b.contains("exclude every topology its volumes allow")),
            "{:?}",
            converted.blocked
        );
    }

    #[test]
    fn attachments_count_each_volume_once_per_driver() {
        let view = storage(OBJECTS);
        let pod = pod_with(&format!(
            "[{}, {}, {}, {{name: scratch, emptyDir: {{}}}}]",
            claim("bound-b"),
            claim("new-gp3"),
            claim("new-gp3")
        ));
        let ebs = |volume: &str| VolumeAttachment {
            driver: "ebs.csi.aws.com".into(),
            volume: volume.into(),
        };
        assert_eq!(
            volume_attachments(&pod, &view),
            vec![ebs("db/new-gp3"), ebs("vol-0b")]
        );
        let limits: BTreeMap<String, i64> = [("ebs.csi.aws.com".to_owned(), 2)].into();
        assert!(attachments_fit(&limits, &[ebs("vol-0b")], &[ebs("vol-1")]));
        assert!(!attachments_fit(
            &limits,
            &[ebs("vol-0b"), ebs("vol-1")],
            &[ebs("vol-2")]
        ));
        // A volume already attached needs no new slot; other drivers are not limited here.
        assert!(attachments_fit(
            &limits,
            &[ebs("vol-0b"), ebs("vol-1")],
            &[ebs("vol-1")]
        ));
        let efs = VolumeAttachment {
            driver: "efs.csi.aws.com".into(),
            volume: "fs-1".into(),
        };
        assert!(attachments_fit(
            &limits,
            &[ebs("vol-0b"), ebs("vol-1")],
            &[efs]
        ));
    }
}
