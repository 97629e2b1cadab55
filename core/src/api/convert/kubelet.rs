//! Kubelet settings move from the pools (v1alpha5 `kubeletConfiguration`, v1beta1
//! `spec.template.spec.kubelet`) to the v1 EC2NodeClass they use. Pools sharing a class
//! but not their kubelet settings would lose them, so the class is split: the pools whose
//! settings match the class's keep it, each other set gets a copy of the class.

use serde_json::Value;

use super::Notes;

/// A converted pool and the kubelet settings it had (`None`: none).
pub(super) struct Source {
    /// `NodePool/name`.
    pub pool: String,
    /// The pool's name, for naming a copy of its class.
    pub pool_name: String,
    /// The class it references.
    pub class: String,
    /// Its kubelet settings.
    pub kubelet: Option<Value>,
    /// Where the pool's document is in the output, set by [`Kubelets::add`].
    position: usize,
}

impl Source {
    /// A pool's kubelet settings (or none) for `class`.
    pub fn new(pool_name: &str, class: &str, kubelet: Option<Value>) -> Self {
        Source {
            pool: format!("NodePool/{pool_name}"),
            pool_name: pool_name.to_owned(),
            class: class.to_owned(),
            kubelet,
            position: 0,
        }
    }
}

/// Every converted pool's kubelet settings.
#[derive(Default)]
pub(super) struct Kubelets(Vec<Source>);

impl Kubelets {
    /// `source`'s pool is the next document written to the output (`written` so far).
    pub fn add(&mut self, mut source: Source, written: usize) {
        source.position = written;
        self.0.push(source);
    }

    /// Writes the settings into the classes in `out`, splitting a class whose pools differ.
    pub fn apply(self, out: &mut Vec<Value>, notes: &mut Notes) {
        let mut classes: Vec<&str> = Vec::new();
        for source in &self.0 {
            if !classes.contains(&source.class.as_str()) {
                classes.push(&source.class);
            }
        }
        let mut copies: Vec<(usize, Value)> = Vec::new();
        for class in classes {
            let sources: Vec<&Source> = self.0.iter().filter(|s| s.class == class).collect();
            if sources.iter().all(|s| s.kubelet.is_none()) {
                continue;
            }
            let Some(at) = out.iter().position(|v| is_class(v, class)) else {
                for source in sources.iter().filter(|s| s.kubelet.is_some()) {
                    let kubelet = source
                        .kubelet
                        .as_ref()
                        .map(Value::to_string)
                        .unwrap_or_default();
                    notes.manual(
                        &source.pool,
                        format!("kubelet {kubelet} must be added to EC2NodeClass/{class} spec.kubelet, which is not in this input; convert both together or add it by hand"),
                    );
                }
                continue;
            };
            let existing = out[at]["spec"].get("kubelet").cloned();
            let (groups, keeper) = group(&sources, existing.as_ref());
            let mut taken: Vec<String> = out
                .iter()
                .filter_map(|v| v["metadata"]["name"].as_str().map(str::to_owned))
                .collect();
            for (i, (kubelet, members)) in groups.iter().enumerate() {
                let names: Vec<&str> = members.iter().map(|s| s.pool.as_str()).collect();
                if keeper == Some(i) {
                    if let Some(kubelet) = kubelet
                        && existing.as_ref() != Some(*kubelet)
                    {
                        out[at]["spec"]["kubelet"] = (*kubelet).clone();
                        notes.changed(
                            &format!("EC2NodeClass/{class}"),
                            format!("spec.kubelet set from {}", names.join(", ")),
                        );
                    }
                    continue;
                }
                let copy_name = unique(&format!("{class}-{}", members[0].pool_name), &taken);
                taken.push(copy_name.clone());
                let mut copy = out[at].clone();
                copy["metadata"] = serde_json::json!({ "name": copy_name });
                if let Some(spec) = copy["spec"].as_object_mut() {
                    match kubelet {
                        Some(kubelet) => {
                            spec.insert("kubelet".into(), (*kubelet).clone());
                        }
                        None => {
                            spec.remove("kubelet");
                        }
                    }
                }
                notes.changed(
                    &format!("EC2NodeClass/{copy_name}"),
                    format!("new: a copy of EC2NodeClass/{class} for {} (their kubelet settings differ from the other pools of that class; v1 keeps kubelet settings on the class)", names.join(", ")),
                );
                for member in members {
                    out[member.position]["spec"]["template"]["spec"]["nodeClassRef"]["name"] =
                        Value::String(copy_name.clone());
                    notes.changed(
                        &member.pool,
                        format!("spec.template.spec.nodeClassRef.name: {class} → {copy_name}"),
                    );
                }
                copies.push((at, copy));
            }
        }
        // Each copy right after its class; later positions first, so earlier ones hold.
        copies.sort_by_key(|(at, _)| std::cmp::Reverse(*at));
        for (at, copy) in copies {
            out.insert(at + 1, copy);
        }
    }
}

/// The sources of one class grouped by their settings, in order of appearance, and the
/// group that keeps the class: the one with the class's own settings, or when the class has
/// none, the one without any or else the first. `None` when the class has settings no pool
/// shares (every group gets a copy, and the class stays as it is for whoever else uses it).
#[allow(clippy::type_complexity)]
fn group<'a>(
    sources: &[&'a Source],
    existing: Option<&Value>,
) -> (Vec<(Option<&'a Value>, Vec<&'a Source>)>, Option<usize>) {
    let mut groups: Vec<(Option<&Value>, Vec<&Source>)> = Vec::new();
    for source in sources {
        let kubelet = source.kubelet.as_ref();
        match groups.iter_mut().find(|(k, _)| *k == kubelet) {
            Some((_, members)) => members.push(source),
            None => groups.push((kubelet, vec![source])),
        }
    }
    let keeper = match groups.iter().position(|(k, _)| *k == existing) {
        Some(i) => Some(i),
        None if existing.is_none() => Some(0),
        None => None,
    };
    (groups, keeper)
}

fn is_class(value: &Value, name: &str) -> bool {
    value["apiVersion"] == "karpenter.k8s.aws/v1"
        && value["kind"] == "EC2NodeClass"
        && value["metadata"]["name"] == name
}

fn unique(wanted: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == wanted) {
        return wanted.to_owned();
    }
    (2..)
        .map(|n| format!("{wanted}-{n}"))
        .find(|candidate| !taken.iter().any(|t| t == candidate))
        .unwrap_or_else(|| wanted.to_owned())
}
