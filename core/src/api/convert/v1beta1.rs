//! `karpenter.sh/v1beta1` and `karpenter.k8s.aws/v1beta1` (Karpenter v0.32–v0.37) to v1.

use serde_json::{Value, json};

use super::kubelet::Source;
use super::{Doc, Notes, alias_family, convert_node_class_ref, take};

/// A NodePool: consolidation policy renamed, `expireAfter` into the template, `nodeClassRef`
/// completed, template `resources` dropped. Its kubelet settings (or none) for its class.
pub(super) fn nodepool(doc: &mut Doc, notes: &mut Notes) -> Option<Source> {
    let label = doc.label();
    let name = doc.name().to_owned();
    doc.value["apiVersion"] = json!("karpenter.sh/v1");
    notes.changed(&label, "apiVersion: karpenter.sh/v1beta1 → karpenter.sh/v1");
    let spec = &mut doc.value["spec"];
    if spec["disruption"]["consolidationPolicy"] == json!("WhenUnderutilized") {
        spec["disruption"]["consolidationPolicy"] = json!("WhenEmptyOrUnderutilized");
        notes.changed(
            &label,
            "spec.disruption.consolidationPolicy: WhenUnderutilized → WhenEmptyOrUnderutilized",
        );
    }
    let expire = spec
        .get_mut("disruption")
        .and_then(|d| take(d, "expireAfter"));
    if let Some(expire) = expire {
        notes.changed(
            &label,
            format!("spec.disruption.expireAfter ({expire}) → spec.template.spec.expireAfter"),
        );
        spec["template"]["spec"]["expireAfter"] = expire;
    }
    if let Some(disruption) = spec.get_mut("disruption").and_then(Value::as_object_mut)
        && !disruption.contains_key("consolidateAfter")
    {
        // v1 requires it once `disruption` is given; unset meant at once.
        disruption.insert("consolidateAfter".into(), json!("0s"));
        notes.changed(
            &label,
            "spec.disruption.consolidateAfter: unset → \"0s\" (required in v1; v1beta1 consolidated at once when it was unset)",
        );
    }
    let template = spec
        .get_mut("template")
        .and_then(|t| t.get_mut("spec"))
        .filter(|t| t.is_object())?;
    convert_node_class_ref(template, &label, notes);
    if let Some(resources) = take(template, "resources") {
        notes.changed(
            &label,
            format!(
                "spec.template.spec.resources ({resources}) removed: v1 has no template resources"
            ),
        );
    }
    let kubelet = take(template, "kubelet");
    let class = template["nodeClassRef"]["name"].as_str()?.to_owned();
    if kubelet.is_some() {
        notes.changed(
            &label,
            format!("spec.template.spec.kubelet → the spec.kubelet of the EC2NodeClass it uses ({class}, or a copy of it if its other pools differ)"),
        );
    }
    Some(Source::new(&name, &class, kubelet))
}

/// A NodeClaim: `nodeClassRef` completed, kubelet settings dropped (they live on the class).
pub(super) fn nodeclaim(doc: &mut Doc, notes: &mut Notes) {
    let label = doc.label();
    doc.value["apiVersion"] = json!("karpenter.sh/v1");
    notes.changed(&label, "apiVersion: karpenter.sh/v1beta1 → karpenter.sh/v1");
    let spec = &mut doc.value["spec"];
    convert_node_class_ref(spec, &label, notes);
    if take(spec, "kubelet").is_some() {
        notes.changed(
            &label,
            "spec.kubelet removed: in v1 kubelet settings live on the EC2NodeClass",
        );
    }
}

/// An EC2NodeClass: `amiFamily` alone becomes an `amiSelectorTerms` alias.
pub(super) fn nodeclass(doc: &mut Doc, notes: &mut Notes) {
    let label = doc.label();
    doc.value["apiVersion"] = json!("karpenter.k8s.aws/v1");
    notes.changed(
        &label,
        "apiVersion: karpenter.k8s.aws/v1beta1 → karpenter.k8s.aws/v1",
    );
    let spec = &mut doc.value["spec"];
    let has_terms = spec["amiSelectorTerms"]
        .as_array()
        .is_some_and(|t| !t.is_empty());
    let family = spec["amiFamily"].as_str().map(str::to_owned);
    match (has_terms, family.as_deref()) {
        (false, Some(family)) => match alias_family(family) {
            Some(alias) => {
                take(spec, "amiFamily");
                spec["amiSelectorTerms"] = json!([{ "alias": format!("{alias}@latest") }]);
                notes.changed(
                    &label,
                    format!(
                        "spec.amiFamily: {family} → spec.amiSelectorTerms: [{{alias: {alias}@latest}}] (pin a version instead of @latest for controlled rollouts)"
                    ),
                );
            }
            None => notes.manual(
                &label,
                format!(
                    "spec.amiFamily {family} needs amiSelectorTerms in v1; add terms that select your AMIs"
                ),
            ),
        },
        (false, None) => {
            spec["amiSelectorTerms"] = json!([{ "alias": "al2@latest" }]);
            notes.changed(
                &label,
                "spec.amiSelectorTerms: [{alias: al2@latest}] added (v1beta1 defaulted amiFamily to AL2)",
            );
        }
        (true, _) => {}
    }
}
