//! `--log-format json`: one object per line in upstream Karpenter's layout (zap's JSON as
//! its controller-runtime manager writes it), so the log queries and alerts a team runs on
//! upstream's lines keep working:
//!
//! - `level` (`INFO`, `WARN`, …), `time` (UTC, milliseconds), `logger` (`controller`),
//!   `message`, `commit`, then `controller` (and for controllers of one kind
//!   `controllerGroup`, `controllerKind`, `namespace`, `name`) from the module that logged;
//! - the objects a line is about as upstream logs them, `NodeClaim`, `NodePool`, `Node`,
//!   `EC2NodeClass`, `NodeOverlay` as `{"name": …}`, `Pod` and `CapacityBuffer` with their
//!   `namespace`;
//! - every other field of the event and of the spans it is in (round, pass, the actor as
//!   `actor` and `actor-id`) once, kebab-cased as upstream names them (`provider-id`,
//!   `instance-type`); `requests` and `allocatable` as objects;
//! - the lines upstream's queries look for carry upstream's message: "created nodeclaim"
//!   and "launched nodeclaim" (the text format keeps karpenter-rs's own wording).
//!
//! Each key appears once: an inner span's field replaces an outer one's, the event's
//! replaces both.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// The build's commit (`KARPENTER_COMMIT` at build time, as the Dockerfile sets it), short.
pub fn commit() -> &'static str {
    let full = option_env!("KARPENTER_COMMIT").unwrap_or("unknown");
    full.get(..7).unwrap_or(full)
}

/// Our messages that upstream logs in words its users query for.
const MESSAGES: [(&str, &str); 2] = [
    ("Creating NodeClaim.", "created nodeclaim"),
    ("Launched.", "launched nodeclaim"),
];

/// A module path, upstream's controller for it, and the group and kind of a controller of
/// one kind.
type Controller = (
    &'static str,
    &'static str,
    Option<(&'static str, &'static str)>,
);

/// Upstream's controllers by module path; the longest matching prefix wins.
const CONTROLLERS: [Controller; 8] = [
    ("karpenter_actors::actor::scheduler", "provisioner", None),
    ("karpenter_actors::actor::nodepool", "provisioner", None),
    (
        "karpenter_actors::actor::nodeclaim",
        "nodeclaim.lifecycle",
        Some(("karpenter.sh", "NodeClaim")),
    ),
    (
        "karpenter_actors::actor::gc",
        "nodeclaim.garbagecollection",
        Some(("karpenter.sh", "NodeClaim")),
    ),
    ("karpenter_actors::actor::disruption", "disruption", None),
    (
        "karpenter_actors::actor::disruption::repair",
        "node.health",
        Some(("", "Node")),
    ),
    (
        "karpenter_actors::actor::interruption",
        "interruption",
        None,
    ),
    (
        "karpenter_rs::kube::takeover",
        "nodeclaim.lifecycle",
        Some(("karpenter.sh", "NodeClaim")),
    ),
];

/// Our field names of the objects upstream logs as `{"name": …}` (or with `namespace`).
const OBJECTS: [(&str, &str); 8] = [
    ("nodeclaim", "NodeClaim"),
    ("nodepool", "NodePool"),
    ("node", "Node"),
    ("ec2nodeclass", "EC2NodeClass"),
    ("nodeoverlay", "NodeOverlay"),
    ("pod", "Pod"),
    ("capacitybuffer", "CapacityBuffer"),
    ("nodeclass", "EC2NodeClass"),
];

/// Fields whose text is a JSON object upstream logs as one.
const OBJECT_VALUED: [&str; 3] = ["requests", "allocatable", "capacity"];

/// What one line is made of, before it is laid out.
#[derive(Debug, Clone, PartialEq)]
pub struct Line<'a> {
    /// `INFO`, `WARN`, …
    pub level: &'a str,
    /// RFC 3339, UTC.
    pub time: String,
    /// The module that logged (`karpenter_actors::actor::nodeclaim`).
    pub target: &'a str,
    /// The spans' fields (outermost first, each replacing what came before) and then the
    /// event's, `message` among them.
    pub fields: Map<String, Value>,
}

/// The line's keys and values in upstream's order, each key once.
pub fn layout(line: Line<'_>) -> Vec<(String, Value)> {
    let mut fields = line.fields;
    let message = match fields.remove("message") {
        Some(Value::String(m)) => m,
        Some(other) => other.to_string(),
        None => String::new(),
    };
    let message = MESSAGES
        .iter()
        .find(|(ours, _)| *ours == message)
        .map_or(message.clone(), |(_, theirs)| (*theirs).to_owned());
    let mut out: Vec<(String, Value)> = vec![
        ("level".into(), line.level.into()),
        ("time".into(), line.time.into()),
        ("logger".into(), "controller".into()),
        ("message".into(), message.into()),
        ("commit".into(), commit().into()),
    ];
    let controller = CONTROLLERS
        .iter()
        .filter(|(prefix, ..)| module_within(line.target, prefix))
        .max_by_key(|(prefix, ..)| prefix.len());
    let mut objects: Vec<(String, Value)> = Vec::new();
    for (ours, kind) in OBJECTS {
        if let Some(value) = fields.remove(ours) {
            objects.push((kind.to_owned(), identity(&value)));
        }
    }
    if let Some((_, name, kind)) = controller {
        out.push(("controller".into(), (*name).into()));
        if let Some((group, kind)) = kind {
            out.push(("controllerGroup".into(), (*group).into()));
            out.push(("controllerKind".into(), (*kind).into()));
            out.extend(objects.iter().cloned());
            let object = objects.iter().find(|(k, _)| k == kind).map(|(_, v)| v);
            let part = |key: &str| {
                object
                    .and_then(|o| o.get(key))
                    .cloned()
                    .unwrap_or_else(|| "".into())
            };
            out.push(("namespace".into(), part("namespace")));
            out.push(("name".into(), part("name")));
        } else {
            out.push(("namespace".into(), "".into()));
            out.push(("name".into(), "".into()));
            out.extend(objects.iter().cloned());
        }
    } else {
        out.extend(objects.iter().cloned());
    }
    let laid_out = out.len();
    for (key, value) in fields {
        // The actor spans' `name` and `id` (ractor's) are the actor, not the object.
        let key = match key.as_str() {
            "name" => "actor".to_owned(),
            "id" => "actor-id".to_owned(),
            other => kebab(other),
        };
        // A field named as one of the layout's keys keeps its value beside it.
        let key = if out[..laid_out].iter().any(|(k, _)| *k == key) {
            format!("{key}-field")
        } else {
            key
        };
        let value = match value {
            Value::String(text) if OBJECT_VALUED.contains(&key.as_str()) => {
                match serde_json::from_str::<Value>(&text) {
                    Ok(object @ Value::Object(_)) => object,
                    _ => Value::String(text),
                }
            }
            other => other,
        };
        push_unique(&mut out, key, value);
    }
    out
}

/// `target` is `module` or one of its submodules.
fn module_within(target: &str, module: &str) -> bool {
    target
        .strip_prefix(module)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
}

/// `{"name": …}`, with `namespace` for `NAMESPACE/NAME`.
fn identity(value: &Value) -> Value {
    let text = match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.split_once('/') {
        Some((namespace, name)) => serde_json::json!({"name": name, "namespace": namespace}),
        None => serde_json::json!({ "name": text }),
    }
}

/// `instance.id` and `provider_id` as upstream writes its keys: `instance-id`, `provider-id`.
fn kebab(key: &str) -> String {
    key.replace(['_', '.'], "-")
}

fn push_unique(out: &mut Vec<(String, Value)>, key: String, value: Value) {
    match out.iter_mut().find(|(k, _)| *k == key) {
        Some(slot) => slot.1 = value,
        None => out.push((key, value)),
    }
}

/// The line as JSON text, keys in the order given.
pub fn to_json(pairs: &[(String, Value)]) -> String {
    let mut text = String::from("{");
    for (i, (key, value)) in pairs.iter().enumerate() {
        if i > 0 {
            text.push(',');
        }
        text.push_str(&Value::String(key.clone()).to_string());
        text.push(':');
        text.push_str(&value.to_string());
    }
    text.push('}');
    text
}

/// The event formatter (span fields stored by `JsonFields`).
#[derive(Debug, Clone, Copy, Default)]
pub struct UpstreamJson;

impl<S, N> FormatEvent<S, N> for UpstreamJson
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = Map::new();
        if let Some(scope) = ctx.event_scope() {
            for span in scope.from_root() {
                let extensions = span.extensions();
                if let Some(stored) = extensions.get::<FormattedFields<N>>()
                    && let Ok(Value::Object(map)) = serde_json::from_str(stored.as_str())
                {
                    fields.extend(map);
                }
            }
        }
        event.record(&mut Collect(&mut fields));
        let metadata = event.metadata();
        let level = metadata.level().as_str();
        let time = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%S%.3fZ")
            .to_string();
        let line = Line {
            level,
            time,
            target: metadata.target(),
            fields,
        };
        writeln!(writer, "{}", to_json(&layout(line)))
    }
}

/// An event's fields as JSON values.
struct Collect<'a>(&'a mut Map<String, Value>);

impl Visit for Collect<'_> {
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.0.insert(field.name().into(), value.to_string().into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(target: &'static str, fields: Value) -> Vec<(String, Value)> {
        let Value::Object(fields) = fields else {
            panic!("an object")
        };
        layout(Line {
            level: "INFO",
            time: "2026-12-06T10:00:00.000Z".into(),
            target,
            fields,
        })
    }

    fn keys(pairs: &[(String, Value)]) -> Vec<&str> {
        pairs.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn a_created_nodeclaim_is_laid_out_as_upstream_logs_it() {
        let pairs = line(
            "karpenter_actors::actor::nodepool",
            serde_json::json!({
                "round": 3, "pods": 2,
                "message": "Creating NodeClaim.", "nodepool": "default",
                "nodeclaim": "default-abcde",
                "requests": "{\"cpu\":\"1100m\",\"pods\":\"5\"}",
                "instance_types": "c5.large, m5.large",
            }),
        );
        assert_eq!(
            keys(&pairs)[..10],
            [
                "level",
                "time",
                "logger",
                "message",
                "commit",
                "controller",
                "namespace",
                "name",
                "NodeClaim",
                "NodePool",
            ]
        );
        let mut rest = keys(&pairs)[10..].to_vec();
        rest.sort_unstable();
        assert_eq!(rest, ["instance-types", "pods", "requests", "round"]);
        let object: Map<String, Value> = pairs.into_iter().collect();
        assert_eq!(object["message"], "created nodeclaim");
        assert_eq!(object["controller"], "provisioner");
        assert_eq!(
            object["NodeClaim"],
            serde_json::json!({"name": "default-abcde"})
        );
        assert_eq!(object["requests"]["cpu"], "1100m");
    }

    #[test]
    fn a_controller_of_one_kind_names_its_object_and_keys_are_kebab_cased() {
        let pairs = line(
            "karpenter_actors::actor::nodeclaim",
            serde_json::json!({
                "message": "Launched.", "nodeclaim": "default-abcde",
                "provider_id": "aws:///us-west-2a/i-1", "instance.id": "i-1",
                "name": "sim/nodeclaim/default-abcde", "id": "0.7", "commit": "mine",
            }),
        );
        let object: Map<String, Value> = pairs.clone().into_iter().collect();
        assert_eq!(object.len(), pairs.len(), "each key once");
        assert_eq!(object["message"], "launched nodeclaim");
        assert_eq!(object["controller"], "nodeclaim.lifecycle");
        assert_eq!(object["controllerGroup"], "karpenter.sh");
        assert_eq!(object["controllerKind"], "NodeClaim");
        assert_eq!(object["name"], "default-abcde");
        assert_eq!(object["namespace"], "");
        assert_eq!(object["provider-id"], "aws:///us-west-2a/i-1");
        assert_eq!(object["instance-id"], "i-1");
        assert_eq!(object["actor"], "sim/nodeclaim/default-abcde");
        assert_eq!(object["actor-id"], "0.7");
        assert_eq!(object["commit"], commit());
        assert_eq!(object["commit-field"], "mine");
        // The longest module prefix wins; a pod keeps its namespace.
        let repair = line(
            "karpenter_actors::actor::disruption::repair",
            serde_json::json!({"message": "x", "node": "ip-1", "pod": "kube-system/dns"}),
        );
        let repair: Map<String, Value> = repair.into_iter().collect();
        assert_eq!(repair["controller"], "node.health");
        assert_eq!(repair["name"], "ip-1");
        assert_eq!(
            repair["Pod"],
            serde_json::json!({"name": "dns", "namespace": "kube-system"})
        );
        // Outside a controller: no controller keys; other messages verbatim.
        let other = line(
            "karpenter_rs::kube::watch",
            serde_json::json!({"message": "Caches synced."}),
        );
        assert_eq!(
            keys(&other),
            ["level", "time", "logger", "message", "commit"]
        );
        assert_eq!(other[3].1, "Caches synced.");
        assert!(!module_within(
            "karpenter_actors::actor::nodeclaims",
            "karpenter_actors::actor::nodeclaim"
        ));
    }

    #[test]
    fn the_json_text_keeps_the_order_and_escapes() {
        let text = to_json(&[
            ("message".into(), "a \"quoted\" word".into()),
            ("n".into(), 1.into()),
        ]);
        assert_eq!(text, r#"{"message":"a \"quoted\" word","n":1}"#);
    }
}
