//! What a request's URL addresses: a type, a namespace, a name and a subresource.

use crate::ApiError;
use crate::store::Store;

/// What a URL addresses.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    pub(crate) type_index: usize,
    /// From the URL; `None` for a collection across namespaces or a cluster-scoped type.
    pub(crate) namespace: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) subresource: Option<String>,
}

pub(crate) fn parse_target(store: &Store, path: &str) -> Result<Option<Target>, ApiError> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["api", version, rest @ ..] => ("", *version, rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Ok(None),
    };
    if rest.is_empty() {
        return Ok(None);
    }
    let find = |plural: &str| store.find(group, version, plural);
    let unknown = |plural: &str| {
        ApiError::not_found(
            "resource",
            &format!(
                "{plural} in {}",
                if group.is_empty() {
                    version.to_owned()
                } else {
                    format!("{group}/{version}")
                }
            ),
        )
    };
    let types = store.types();
    let target = match rest {
        ["namespaces", namespace, plural, more @ ..] if find(plural).is_some() => {
            let type_index = find(plural).ok_or_else(|| unknown(plural))?;
            if !types[type_index].namespaced {
                return Err(unknown(plural));
            }
            Target {
                type_index,
                namespace: Some((*namespace).to_owned()),
                name: more.first().map(|s| (*s).to_owned()),
                subresource: more.get(1).map(|s| (*s).to_owned()),
            }
        }
        [plural, more @ ..] => {
            let type_index = find(plural).ok_or_else(|| unknown(plural))?;
            if types[type_index].namespaced && !more.is_empty() {
                return Err(unknown(plural));
            }
            Target {
                type_index,
                namespace: None,
                name: more.first().map(|s| (*s).to_owned()),
                subresource: more.get(1).map(|s| (*s).to_owned()),
            }
        }
        [] => return Ok(None),
    };
    Ok(Some(target))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::resources;

    #[test]
    fn urls_address_collections_items_and_subresources() {
        let mut store = Store::new(100, tokio::sync::broadcast::channel(16).0);
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/crds/karpenter.sh_nodeclaims.yaml"
        );
        let claims_crd: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        // Custom resources are served once their CRD is created.
        assert!(parse_target(&store, "/apis/karpenter.sh/v1/nodeclaims/x").is_err());
        store
            .create(resources::CUSTOMRESOURCEDEFINITIONS, "", claims_crd)
            .unwrap();
        let claims = store.find("karpenter.sh", "v1", "nodeclaims").unwrap();
        let (pods, nodes, namespaces) = (resources::PODS, resources::NODES, resources::NAMESPACES);
        let t = |p: &str| parse_target(&store, p).unwrap().unwrap();
        assert_eq!(t("/api/v1/pods").type_index, pods);
        let item = t("/api/v1/namespaces/default/pods/web/eviction");
        assert_eq!(
            (
                item.type_index,
                item.namespace.as_deref(),
                item.name.as_deref(),
                item.subresource.as_deref()
            ),
            (pods, Some("default"), Some("web"), Some("eviction"))
        );
        assert_eq!(
            t("/api/v1/nodes/n1/status").subresource.as_deref(),
            Some("status")
        );
        assert_eq!(t("/api/v1/nodes/n1").type_index, nodes);
        let ns = t("/api/v1/namespaces/default");
        assert_eq!(
            (ns.type_index, ns.name.as_deref()),
            (namespaces, Some("default"))
        );
        assert_eq!(
            t("/api/v1/namespaces/default/status")
                .subresource
                .as_deref(),
            Some("status")
        );
        assert_eq!(t("/apis/karpenter.sh/v1/nodeclaims/x").type_index, claims);
        assert!(parse_target(&store, "/apis/karpenter.sh/v1/widgets").is_err());
        assert!(parse_target(&store, "/api/v1/pods/web").is_err());
    }
}
