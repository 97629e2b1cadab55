//! Taints and tolerations with kube-scheduler's matching rules.

use crate::vocab::labels::EPHEMERAL_TAINT_KEYS;

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl Taint {
    /// A taint `key=value:effect`.
    pub fn new(key: &str, value: &str, effect: &str) -> Self {
        Taint {
            key: key.to_owned(),
            value: value.to_owned(),
            effect: effect.to_owned(),
        }
    }

    /// Whether it keeps pods that do not tolerate it off the node (PreferNoSchedule does not).
    pub fn blocks_scheduling(&self) -> bool {
        self.effect == "NoSchedule" || self.effect == "NoExecute"
    }

    /// Taints that go away by themselves while a node starts; scheduling ignores them.
    pub fn is_ephemeral(&self) -> bool {
        EPHEMERAL_TAINT_KEYS.contains(&self.key.as_str())
            || self.key.starts_with("readiness.k8s.io/")
    }
}

impl From<&k8s_openapi::api::core::v1::Taint> for Taint {
    fn from(t: &k8s_openapi::api::core::v1::Taint) -> Self {
        Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        }
    }
}

impl std::fmt::Display for Taint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.value.is_empty() {
            write!(f, "{}:{}", self.key, self.effect)
        } else {
            write!(f, "{}={}:{}", self.key, self.value, self.effect)
        }
    }
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Toleration {
    /// Key; empty with `exists` tolerates every taint.
    pub key: String,
    /// `operator: Exists` (else `Equal`).
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; empty matches every effect.
    pub effect: String,
}

impl Toleration {
    /// Whether this toleration matches `taint`.
    pub fn tolerates(&self, taint: &Taint) -> bool {
        let effect_ok = self.effect.is_empty() || self.effect == taint.effect;
        let key_ok = if self.key.is_empty() {
            self.exists
        } else {
            self.key == taint.key && (self.exists || self.value == taint.value)
        };
        effect_ok && key_ok
    }
}

/// The first blocking, non-ephemeral taint no toleration matches.
pub fn untolerated<'a>(taints: &'a [Taint], tolerations: &[Toleration]) -> Option<&'a Taint> {
    untolerated_avoiding(taints, tolerations, false)
}

/// Like [`untolerated`], counting `PreferNoSchedule` taints as blocking when
/// `avoid_preferred` (a scheduler honours them until it must not).
pub fn untolerated_avoiding<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    avoid_preferred: bool,
) -> Option<&'a Taint> {
    taints.iter().find(|taint| {
        (taint.blocks_scheduling() || (avoid_preferred && taint.effect == "PreferNoSchedule"))
            && !taint.is_ephemeral()
            && !tolerations.iter().any(|t| t.tolerates(taint))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tol(key: &str, exists: bool, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: key.into(),
            exists,
            value: value.into(),
            effect: effect.into(),
        }
    }

    #[test]
    fn matching_rules() {
        let gpu = Taint::new("nvidia.com/gpu", "true", "NoSchedule");
        assert!(tol("nvidia.com/gpu", true, "", "").tolerates(&gpu));
        assert!(tol("nvidia.com/gpu", false, "true", "NoSchedule").tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", false, "false", "").tolerates(&gpu));
        assert!(!tol("nvidia.com/gpu", true, "", "NoExecute").tolerates(&gpu));
        assert!(tol("", true, "", "").tolerates(&gpu));
        assert!(!tol("", false, "", "").tolerates(&gpu));
    }

    #[test]
    fn soft_and_ephemeral_taints_do_not_block() {
        let taints = [
            Taint::new("soft", "", "PreferNoSchedule"),
            Taint::new("node.kubernetes.io/not-ready", "", "NoSchedule"),
            Taint::new("karpenter.sh/unregistered", "", "NoExecute"),
        ];
        assert_eq!(untolerated(&taints, &[]), None);
        let hard = [Taint::new("team", "a", "NoSchedule")];
        assert_eq!(
            untolerated(&hard, &[]).map(ToString::to_string),
            Some("team=a:NoSchedule".into())
        );
    }
}
