//! The objects, their resource versions and the watch history.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_admission::object::{Admission, FieldValidation};
use kube_admission::{self as apiserver, crd};
use serde_json::{Map, Value, json};

use crate::ApiError;
use crate::patch::{self, Owners};
use crate::resources::{self, ResourceType, StatusOnCreate};
use crate::selectors::{FieldSelector, LabelSelector};

/// What a watch event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// Created.
    Added,
    /// Changed (including being marked for deletion).
    Modified,
    /// Gone.
    Deleted,
}

/// One change, as watches see it.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub rv: u64,
    pub type_index: usize,
    pub namespace: String,
    pub kind: EventKind,
    pub object: Value,
    /// The object before a modification: a watch with selectors needs both to tell whether
    /// the object entered or left its view.
    pub previous: Option<Value>,
}

/// Where an object lives: its type, namespace (empty when cluster-scoped) and name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    pub type_index: usize,
    pub namespace: String,
    pub name: String,
}

struct Stored {
    value: Value,
    owners: Owners,
}

/// A patch: how to read its body, the body, who sends it and whether it is for `/status`.
#[derive(Debug, Clone, Copy)]
pub struct PatchRequest<'a> {
    pub kind: PatchKind,
    pub body: &'a Value,
    pub manager: Option<&'a str>,
    pub status: bool,
    pub options: RequestOptions,
}

/// What a write request asks beyond its body: how unknown fields are treated and whether it is
/// a dry run (checked and answered, not stored).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestOptions {
    pub field_validation: FieldValidation,
    pub dry_run: bool,
}

/// A delete request's options.
#[derive(Debug, Clone, Default)]
pub struct DeleteRequest {
    /// `preconditions` (`uid`, `resourceVersion`).
    pub preconditions: Value,
    /// `gracePeriodSeconds`, when given.
    pub grace_period: Option<i64>,
}

/// How long a pod has to stop when nobody says otherwise.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

/// How a patch request's body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Apply { force: bool },
}

pub struct Store {
    /// Served types: the built-in ones, then those CRDs added (never removed, so indices in the
    /// history stay valid; a type whose CRD went is no longer served).
    types: Vec<Arc<ResourceType>>,
    /// Warnings for the current request's response (`Warning` headers).
    warnings: Vec<String>,
    rv: u64,
    objects: BTreeMap<Key, Stored>,
    history: VecDeque<Arc<WatchEvent>>,
    history_limit: usize,
    /// The newest resource version whose event is no longer in `history`.
    compacted_through: u64,
    uids: u64,
    names: u64,
    events: tokio::sync::broadcast::Sender<Arc<WatchEvent>>,
}

fn meta<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object["metadata"].get(field).and_then(Value::as_str)
}

fn metadata_mut(object: &mut Value) -> &mut Map<String, Value> {
    if !object.is_object() {
        *object = Value::Object(Map::new());
    }
    let Value::Object(fields) = object else {
        unreachable!("made an object above")
    };
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !metadata.is_object() {
        *metadata = Value::Object(Map::new());
    }
    let Value::Object(m) = metadata else {
        unreachable!("made an object above")
    };
    m
}

fn finalizers(object: &Value) -> Vec<String> {
    object["metadata"]["finalizers"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Everything but metadata and status: what bumps `generation`.
fn spec_part(object: &Value) -> Value {
    let mut copy = object.clone();
    if let Value::Object(m) = &mut copy {
        m.remove("metadata");
        m.remove("status");
    }
    copy
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// RFC 3339 in whole seconds, as metav1.Time serialises.
fn format_rfc3339(ms: i64) -> String {
    jiff::Timestamp::from_second(ms.div_euclid(1000))
        .map_or_else(|_| "1970-01-01T00:00:00Z".to_owned(), |t| t.to_string())
}

fn now() -> String {
    format_rfc3339(now_ms())
}

/// A `422 Invalid` for `errors` on object `name` of type `t`.
fn invalid(t: &ResourceType, name: &str, errors: &[apiserver::FieldError]) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: apiserver::invalid_message(&t.qualified_kind(), name, errors),
        details: Some(json!({
            "name": name,
            "group": t.group,
            "kind": t.kind,
            "causes": apiserver::causes(errors),
        })),
    }
}

/// How long a pod being deleted gets: none when it is not bound to a node (no kubelet runs it)
/// or has finished; otherwise what the request asks, else what the pod asks, else 30 s.
fn pod_grace_period(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod["status"]["phase"].as_str(),
        Some("Succeeded" | "Failed")
    );
    if !bound || finished {
        return 0;
    }
    requested
        .or_else(|| pod["spec"]["terminationGracePeriodSeconds"].as_i64())
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        .max(0)
}

/// The status the server gives a CRD it accepted: names accepted, established, the storage
/// version stored.
fn crd_status(crd: &Value) -> Value {
    let time = now();
    let condition = |kind: &str, reason: &str, message: &str| json!({"type": kind, "status": "True", "reason": reason, "message": message, "lastTransitionTime": time});
    let stored: Vec<Value> = crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["storage"] == json!(true))
        .map(|v| v["name"].clone())
        .collect();
    json!({
        "conditions": [
            condition("NamesAccepted", "NoConflicts", "no conflicts found"),
            condition("Established", "InitialNamesAccepted", "the initial names have been accepted"),
        ],
        "acceptedNames": crd["spec"]["names"],
        "storedVersions": stored,
    })
}

/// Characters the real server draws `generateName` suffixes from.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Store {
    pub fn new(
        history_limit: usize,
        events: tokio::sync::broadcast::Sender<Arc<WatchEvent>>,
    ) -> Self {
        let mut store = Store {
            types: resources::builtin(),
            warnings: Vec::new(),
            rv: 0,
            objects: BTreeMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            compacted_through: 0,
            uids: 0,
            names: 0,
            events,
        };
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let namespace = json!({"metadata": {"name": name}, "status": {"phase": "Active"}});
            // The built-in namespaces cannot clash with anything in an empty store.
            let _ = store.create(resources::NAMESPACES, "", namespace);
        }
        for class in crate::priority::system_classes() {
            let _ = store.create(resources::PRIORITYCLASSES, "", class);
        }
        store
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    /// Every type, served or not, by index.
    pub fn types(&self) -> &[Arc<ResourceType>] {
        &self.types
    }

    /// The type at `index`.
    pub fn type_at(&self, index: usize) -> Arc<ResourceType> {
        self.types[index].clone()
    }

    /// The served type at `group`/`version` under `plural` (or a short name), with its index.
    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<usize> {
        self.types.iter().position(|t| {
            t.served
                && t.group == group
                && t.version == version
                && (t.plural == plural || t.short_names.iter().any(|s| s == plural))
        })
    }

    /// The warnings the last request produced, for its response.
    pub fn take_warnings(&mut self) -> Vec<String> {
        std::mem::take(&mut self.warnings)
    }

    /// Forgets the watch history and expires every resource version handed out so far (the
    /// version moves on by one, as revisions of other kinds would have, so the next list
    /// returns one a watch can start from).
    pub fn compact(&mut self) {
        self.history.clear();
        self.rv += 1;
        self.compacted_through = self.rv;
    }

    /// `410 Gone` when the history after `rv` was compacted away.
    pub fn still_current(&self, rv: u64) -> Result<(), ApiError> {
        if rv < self.compacted_through {
            return Err(ApiError::gone(format!(
                "too old resource version: {rv} ({})",
                self.compacted_through + 1
            )));
        }
        Ok(())
    }

    /// Events after `rv` of one type (and namespace, when given), or `410` when compacted.
    pub fn events_since(
        &self,
        rv: u64,
        type_index: usize,
        namespace: Option<&str>,
    ) -> Result<Vec<Arc<WatchEvent>>, ApiError> {
        self.still_current(rv)?;
        Ok(self
            .history
            .iter()
            .filter(|e| {
                e.rv > rv
                    && e.type_index == type_index
                    && namespace.is_none_or(|n| n == e.namespace)
            })
            .cloned()
            .collect())
    }

    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Arc<WatchEvent>> {
        self.events.subscribe()
    }

    fn record(&mut self, key: &Key, kind: EventKind, object: Value, previous: Option<Value>) {
        let event = Arc::new(WatchEvent {
            rv: self.rv,
            type_index: key.type_index,
            namespace: key.namespace.clone(),
            kind,
            object,
            previous,
        });
        self.history.push_back(event.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.compacted_through = old.rv;
            }
        }
        // No receiver is fine: nobody is watching.
        let _ = self.events.send(event);
    }

    fn bump(&mut self, object: &mut Value) {
        self.rv += 1;
        metadata_mut(object).insert("resourceVersion".into(), Value::String(self.rv.to_string()));
    }

    fn stamped(&self, object: &Value, key: &Key) -> Value {
        let t = &self.types[key.type_index];
        let mut out = object.clone();
        if let Value::Object(m) = &mut out {
            m.insert("apiVersion".into(), Value::String(t.api_version()));
            m.insert("kind".into(), Value::String(t.kind.to_owned()));
        }
        out
    }

    fn key_of(&self, type_index: usize, namespace: &str, name: &str) -> Key {
        let namespaced = self.types[type_index].namespaced;
        Key {
            type_index,
            namespace: if namespaced {
                namespace.to_owned()
            } else {
                String::new()
            },
            name: name.to_owned(),
        }
    }

    pub fn get(&self, type_index: usize, namespace: &str, name: &str) -> Result<Value, ApiError> {
        let key = self.key_of(type_index, namespace, name);
        self.objects
            .get(&key)
            .map(|s| self.stamped(&s.value, &key))
            .ok_or_else(|| ApiError::not_found(&self.types[type_index].plural, name))
    }

    /// Objects of a type, optionally in one namespace, that match the selectors, ordered by
    /// namespace and name, starting after `after`.
    pub fn list(
        &self,
        type_index: usize,
        namespace: Option<&str>,
        labels: &LabelSelector,
        fields: &FieldSelector,
        after: Option<&(String, String)>,
    ) -> Vec<(Key, Value)> {
        self.objects
            .iter()
            .filter(|(k, _)| {
                k.type_index == type_index
                    && namespace.is_none_or(|n| n == k.namespace)
                    && after.is_none_or(|(ns, name)| (&k.namespace, &k.name) > (ns, name))
            })
            .map(|(k, s)| (k.clone(), self.stamped(&s.value, k)))
            .filter(|(_, v)| labels.matches(v) && fields.matches(v))
            .collect()
    }

    fn check_kind(t: &ResourceType, object: &Value) -> Result<(), ApiError> {
        let api_version = object.get("apiVersion").and_then(Value::as_str);
        let kind = object.get("kind").and_then(Value::as_str);
        if api_version.is_some_and(|v| v != t.api_version()) || kind.is_some_and(|k| k != t.kind) {
            return Err(ApiError::bad_request(format!(
                "the object is a {}/{}, but this endpoint serves {}/{}",
                api_version.unwrap_or("?"),
                kind.unwrap_or("?"),
                t.api_version(),
                t.kind
            )));
        }
        Ok(())
    }

    pub fn create(
        &mut self,
        type_index: usize,
        namespace: &str,
        object: Value,
    ) -> Result<Value, ApiError> {
        self.create_with(type_index, namespace, object, RequestOptions::default())
    }

    /// Creates an object under `options` (field validation, dry run).
    pub fn create_with(
        &mut self,
        type_index: usize,
        namespace: &str,
        object: Value,
        options: RequestOptions,
    ) -> Result<Value, ApiError> {
        self.create_owned(type_index, namespace, object, Owners::new(), options)
    }

    /// The admission plugins of built-in kinds on create: pod priority, PriorityClass
    /// validation ([`crate::priority`]).
    fn admit_builtin(
        &self,
        type_index: usize,
        object: &mut Value,
        name: &str,
    ) -> Result<(), ApiError> {
        let classes = || {
            self.objects
                .iter()
                .filter(|(k, _)| k.type_index == resources::PRIORITYCLASSES)
                .map(|(_, stored)| &stored.value)
        };
        let default = || {
            classes()
                .find(|c| c.get("globalDefault").and_then(Value::as_bool) == Some(true))
                .cloned()
        };
        match type_index {
            resources::PODS => crate::priority::admit_pod(
                object,
                name,
                |class| self.get(resources::PRIORITYCLASSES, "", class).ok(),
                default(),
            ),
            resources::PRIORITYCLASSES => {
                let other = default();
                let other = other
                    .as_ref()
                    .and_then(|c| c.pointer("/metadata/name"))
                    .and_then(Value::as_str);
                crate::priority::validate_class(object, other)
            }
            _ => Ok(()),
        }
    }

    /// What the server's admission makes of `object` (with `apiVersion` and `kind`), replacing
    /// `old` when given: a CRD is validated as one (names, structural schema, CEL rules and
    /// their cost), a custom resource against its CRD's schema and rules (pruned, defaulted,
    /// validated; unknown fields refused under strict field validation, warned about by
    /// default). Returns the object to store.
    fn admit(
        &mut self,
        t: &ResourceType,
        object: Value,
        old: Option<&Value>,
        options: RequestOptions,
    ) -> Result<Value, ApiError> {
        let name = meta(&object, "name")
            .or(meta(&object, "generateName"))
            .unwrap_or("")
            .to_owned();
        if t.group == "apiextensions.k8s.io" && t.kind == "CustomResourceDefinition" {
            let definition: CustomResourceDefinition = serde_json::from_value(object.clone())
                .map_err(|e| {
                    ApiError::bad_request(format!(
                        "CustomResourceDefinition in version \"v1\" cannot be handled as a CustomResourceDefinition: {e}"
                    ))
                })?;
            let mut errors = crd::validate(&definition).errors;
            if let Some(old) = old {
                for (field, path) in [("group", "/spec/group"), ("plural", "/spec/names/plural")] {
                    if object.pointer(path) != old.pointer(path) {
                        errors.push(apiserver::FieldError::invalid(
                            format!(
                                "spec.{}",
                                if field == "group" {
                                    "group"
                                } else {
                                    "names.plural"
                                }
                            ),
                            apiserver::BadValue::json(object.pointer(path).unwrap_or(&Value::Null)),
                            "field is immutable",
                        ));
                    }
                }
            }
            if !errors.is_empty() {
                return Err(invalid(t, &name, &errors));
            }
            return Ok(object);
        }
        let Some(admission) = &t.admission else {
            return Ok(object);
        };
        let checked = admission.check(object, old);
        if options.field_validation == FieldValidation::Strict && !checked.unknown.is_empty() {
            let fields: Vec<String> = checked
                .unknown
                .iter()
                .map(|f| format!("unknown field {f:?}"))
                .collect();
            return Err(ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: strict decoding error: {}",
                fields.join(", "),
                kind = t.kind,
                version = t.version,
            )));
        }
        if !checked.errors.is_empty() {
            return Err(invalid(t, &name, &checked.errors));
        }
        if options.field_validation == FieldValidation::Warn {
            self.warnings.extend(
                checked
                    .unknown
                    .iter()
                    .map(|f| format!("unknown field {f:?}")),
            );
        }
        Ok(checked.object)
    }

    /// Creates an object whose fields `owners` own (server-side apply of a new object).
    fn create_owned(
        &mut self,
        type_index: usize,
        namespace: &str,
        mut object: Value,
        owners: Owners,
        options: RequestOptions,
    ) -> Result<Value, ApiError> {
        let t = self.types[type_index].clone();
        Self::check_kind(&t, &object)?;
        if !object.is_object() {
            return Err(ApiError::bad_request(
                "the body must be a JSON object".into(),
            ));
        }
        let in_body = meta(&object, "namespace").map(str::to_owned);
        if t.namespaced {
            if let Some(ns) = in_body.as_deref().filter(|ns| *ns != namespace) {
                return Err(ApiError::bad_request(format!(
                    "the namespace of the object ({ns}) does not match the namespace on the request ({namespace})"
                )));
            }
            if !self
                .objects
                .contains_key(&self.key_of(resources::NAMESPACES, "", namespace))
            {
                return Err(ApiError::not_found("namespaces", namespace));
            }
        }
        let name = match (meta(&object, "name"), meta(&object, "generateName")) {
            (Some(name), _) if !name.is_empty() => name.to_owned(),
            (_, Some(prefix)) if !prefix.is_empty() => {
                let prefix = prefix.to_owned();
                loop {
                    self.names += 1;
                    let mut n = self.names.wrapping_mul(2_654_435_761) ^ 0x5bd1_e995;
                    let suffix: String = (0..5)
                        .map(|_| {
                            let c = NAME_ALPHABET[(n % NAME_ALPHABET.len() as u64) as usize];
                            n /= NAME_ALPHABET.len() as u64;
                            c as char
                        })
                        .collect();
                    let candidate = format!("{prefix}{suffix}");
                    if !self
                        .objects
                        .contains_key(&self.key_of(type_index, namespace, &candidate))
                    {
                        break candidate;
                    }
                }
            }
            _ => {
                return Err(ApiError::unprocessable(
                    "metadata.name: Required value: name or generateName is required".into(),
                ));
            }
        };
        let key = self.key_of(type_index, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&t.plural, &name));
        }
        if let Value::Object(fields) = &mut object {
            match t.status_on_create {
                StatusOnCreate::Keep => {}
                StatusOnCreate::Drop => {
                    fields.remove("status");
                }
                StatusOnCreate::Pending => {
                    fields.insert("status".into(), json!({"phase": "Pending"}));
                }
            }
            fields.insert("apiVersion".into(), Value::String(t.api_version()));
            fields.insert("kind".into(), Value::String(t.kind.clone()));
        }
        metadata_mut(&mut object).insert("name".into(), Value::String(name.clone()));
        self.admit_builtin(type_index, &mut object, &name)?;
        let mut object = self.admit(&t, object, None, options)?;
        self.uids += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uids);
        {
            let m = metadata_mut(&mut object);
            if t.namespaced {
                m.insert("namespace".into(), Value::String(namespace.to_owned()));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), Value::String(uid));
            m.insert("creationTimestamp".into(), Value::String(now()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
            m.remove("resourceVersion");
            if owners.is_empty() {
                m.remove("managedFields");
            } else {
                let managed = patch::managed_fields(&owners, &t.api_version(), &now());
                m.insert("managedFields".into(), managed);
            }
        }
        if let Value::Object(fields) = &mut object {
            fields.remove("apiVersion");
            fields.remove("kind");
        }
        if options.dry_run {
            return Ok(self.stamped(&object, &key));
        }
        if type_index == resources::CUSTOMRESOURCEDEFINITIONS {
            object["status"] = crd_status(&object);
        }
        self.bump(&mut object);
        let stamped = self.stamped(&object, &key);
        self.objects.insert(
            key.clone(),
            Stored {
                value: object,
                owners,
            },
        );
        self.record(&key, EventKind::Added, stamped.clone(), None);
        if type_index == resources::CUSTOMRESOURCEDEFINITIONS {
            self.register(&stamped);
        }
        Ok(stamped)
    }

    /// Serves the versions a CRD defines (or updates the schemas they are admitted with).
    fn register(&mut self, crd: &Value) {
        let Ok(definition) = serde_json::from_value::<CustomResourceDefinition>(crd.clone()) else {
            return;
        };
        let spec = &definition.spec;
        for version in spec.versions.iter().filter(|v| v.served) {
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.clone())
                .unwrap_or_default();
            let subresources = version.subresources.as_ref();
            let has_status = subresources.is_some_and(|s| s.status.is_some());
            let served = ResourceType {
                group: spec.group.clone(),
                version: version.name.clone(),
                kind: spec.names.kind.clone(),
                plural: spec.names.plural.clone(),
                short_names: spec.names.short_names.clone().unwrap_or_default(),
                categories: spec.names.categories.clone().unwrap_or_default(),
                namespaced: spec.scope == "Namespaced",
                status: has_status,
                status_on_create: if has_status {
                    StatusOnCreate::Drop
                } else {
                    StatusOnCreate::Keep
                },
                scale: subresources.and_then(|s| s.scale.as_ref()).map(|s| {
                    crate::scale::ScalePaths {
                        spec_replicas: s.spec_replicas_path.clone(),
                        status_replicas: s.status_replicas_path.clone(),
                        label_selector: s.label_selector_path.clone(),
                    }
                }),
                admission: Some(Arc::new(Admission::new(schema))),
                served: true,
            };
            let existing = self.types.iter().position(|t| {
                t.group == served.group && t.version == served.version && t.plural == served.plural
            });
            match existing {
                Some(i) => self.types[i] = Arc::new(served),
                None => self.types.push(Arc::new(served)),
            }
        }
    }

    /// Stops serving a deleted CRD's versions; its objects go with it.
    fn unregister(&mut self, crd: &Value) {
        let group = crd["spec"]["group"].as_str().unwrap_or_default().to_owned();
        let plural = crd["spec"]["names"]["plural"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let indices: Vec<usize> = (0..self.types.len())
            .filter(|&i| self.types[i].group == group && self.types[i].plural == plural)
            .collect();
        for i in &indices {
            let mut unserved = (*self.types[*i]).clone();
            unserved.served = false;
            self.types[*i] = Arc::new(unserved);
        }
        let doomed: Vec<Key> = self
            .objects
            .keys()
            .filter(|k| indices.contains(&k.type_index))
            .cloned()
            .collect();
        for key in doomed {
            if let Some(stored) = self.objects.remove(&key) {
                let mut gone = stored.value;
                self.bump(&mut gone);
                let stamped = self.stamped(&gone, &key);
                self.record(&key, EventKind::Deleted, stamped, None);
            }
        }
    }

    /// Writes `new` over the stored object under update rules: `resourceVersion` must match
    /// when given; identity and deletion metadata are kept; `status` changes only through the
    /// status subresource and everything else only through the main resource; no finalizer
    /// may be added once the object is being deleted; the result is admitted (a custom
    /// resource against its CRD, with the stored object for transition rules); an object being
    /// deleted whose last finalizer goes, and that waits for no grace period, is removed.
    fn write(
        &mut self,
        key: &Key,
        mut new: Value,
        status: bool,
        owners: Option<Owners>,
        options: RequestOptions,
    ) -> Result<Value, ApiError> {
        let t = self.types[key.type_index].clone();
        Self::check_kind(&t, &new)?;
        let Some(stored) = self.objects.get(key) else {
            return Err(ApiError::not_found(&t.plural, &key.name));
        };
        let old = stored.value.clone();
        if let Some(rv) = meta(&new, "resourceVersion").filter(|rv| !rv.is_empty())
            && Some(rv) != meta(&old, "resourceVersion")
        {
            return Err(ApiError::conflict(format!(
                "Operation cannot be fulfilled on {} {:?}: the object has been modified; \
                 please apply your changes to the latest version and try again",
                t.plural, key.name
            )));
        }
        if let Some(name) = meta(&new, "name").filter(|n| *n != key.name) {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                key.name
            )));
        }
        if t.status {
            if status {
                // The status subresource changes status only.
                let new_status = new.get("status").cloned();
                new = old.clone();
                if let Value::Object(fields) = &mut new {
                    match new_status {
                        Some(s) => fields.insert("status".into(), s),
                        None => fields.remove("status"),
                    };
                }
            } else if let Value::Object(fields) = &mut new {
                match old.get("status") {
                    Some(s) => fields.insert("status".into(), s.clone()),
                    None => fields.remove("status"),
                };
            }
        }
        let deleting = old["metadata"].get("deletionTimestamp").cloned();
        if deleting.is_some() {
            let before = finalizers(&old);
            if let Some(added) = finalizers(&new).into_iter().find(|f| !before.contains(f)) {
                return Err(ApiError::unprocessable(format!(
                    "metadata.finalizers: Forbidden: no new finalizers can be added if the \
                     object is being deleted, found new finalizers [{added:?}]"
                )));
            }
        }
        {
            let m = metadata_mut(&mut new);
            for field in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
            ] {
                match old["metadata"].get(field) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
        }
        if let Value::Object(fields) = &mut new {
            fields.insert("apiVersion".into(), Value::String(t.api_version()));
            fields.insert("kind".into(), Value::String(t.kind.clone()));
        }
        let old_stamped = self.stamped(&old, key);
        let mut new = self.admit(&t, new, Some(&old_stamped), options)?;
        if let Value::Object(fields) = &mut new {
            fields.remove("apiVersion");
            fields.remove("kind");
        }
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_changed = spec_part(&old) != spec_part(&new);
        metadata_mut(&mut new).insert(
            "generation".into(),
            json!(if spec_changed {
                generation + 1
            } else {
                generation
            }),
        );
        let owners = owners.unwrap_or_else(|| self.objects[key].owners.clone());
        let without_managed = |v: &Value| {
            let mut v = v.clone();
            metadata_mut(&mut v).remove("managedFields");
            metadata_mut(&mut v).remove("resourceVersion");
            v
        };
        if without_managed(&new) == without_managed(&old) && owners == self.objects[key].owners {
            // A no-op write does not bump the resource version, as on the real server.
            return Ok(old_stamped);
        }
        if owners.is_empty() {
            metadata_mut(&mut new).remove("managedFields");
        } else {
            let managed = patch::managed_fields(&owners, &t.api_version(), &now());
            metadata_mut(&mut new).insert("managedFields".into(), managed);
        }
        if options.dry_run {
            metadata_mut(&mut new).insert(
                "resourceVersion".into(),
                old["metadata"]["resourceVersion"].clone(),
            );
            return Ok(self.stamped(&new, key));
        }
        self.bump(&mut new);
        let waits_for_grace = old["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .is_some_and(|g| g > 0);
        if deleting.is_some() && finalizers(&new).is_empty() && !waits_for_grace {
            return Ok(self.remove(key, new));
        }
        let stamped = self.stamped(&new, key);
        if let Some(stored) = self.objects.get_mut(key) {
            stored.value = new;
            stored.owners = owners;
        }
        self.record(key, EventKind::Modified, stamped.clone(), Some(old_stamped));
        if key.type_index == resources::CUSTOMRESOURCEDEFINITIONS && !status {
            self.register(&stamped);
        }
        Ok(stamped)
    }

    /// Removes an object (its final version `gone`), collecting what depended on it.
    fn remove(&mut self, key: &Key, gone: Value) -> Value {
        self.objects.remove(key);
        let stamped = self.stamped(&gone, key);
        self.record(key, EventKind::Deleted, stamped.clone(), None);
        if key.type_index == resources::CUSTOMRESOURCEDEFINITIONS {
            self.unregister(&stamped);
        }
        self.collect_dependents(&gone);
        stamped
    }

    pub fn replace(
        &mut self,
        type_index: usize,
        namespace: &str,
        name: &str,
        object: Value,
        status: bool,
        options: RequestOptions,
    ) -> Result<Value, ApiError> {
        let key = self.key_of(type_index, namespace, name);
        self.write(&key, object, status, None, options)
    }

    pub fn patch(
        &mut self,
        type_index: usize,
        namespace: &str,
        name: &str,
        request: &PatchRequest<'_>,
    ) -> Result<Value, ApiError> {
        let PatchRequest {
            kind,
            body,
            manager,
            status,
            options,
        } = *request;
        let t = self.types[type_index].clone();
        let key = self.key_of(type_index, namespace, name);
        let Some(stored) = self.objects.get(&key) else {
            if let PatchKind::Apply { .. } = kind {
                // Apply creates what does not exist yet.
                let manager = manager.ok_or_else(|| {
                    ApiError::bad_request("fieldManager is required for apply patch".into())
                })?;
                let mut owners = Owners::new();
                let mut object = patch::apply(&json!({}), body, manager, true, &mut owners, &[])?;
                if let Value::Object(m) = &mut object
                    && let Some(status) = body.get("status").filter(|_| !t.status)
                {
                    m.insert("status".into(), status.clone());
                }
                metadata_mut(&mut object).insert("name".into(), Value::String(name.to_owned()));
                return self.create_owned(type_index, namespace, object, owners, options);
            }
            return Err(ApiError::not_found(&t.plural, name));
        };
        let live = self.stamped(&stored.value, &key);
        let mut owners = stored.owners.clone();
        let patched = match kind {
            PatchKind::Merge => {
                let mut out = live.clone();
                patch::merge(&mut out, body);
                out
            }
            PatchKind::Json => patch::json_patch(&live, body)?,
            PatchKind::Apply { force } => {
                let manager = manager.ok_or_else(|| {
                    ApiError::bad_request("fieldManager is required for apply patch".into())
                })?;
                let scope: Vec<String> = if status && t.status {
                    vec!["status".into()]
                } else {
                    Vec::new()
                };
                let mut out = patch::apply(&live, body, manager, force, &mut owners, &scope)?;
                if !t.status {
                    // Without a status subresource, status is an ordinary field.
                    if let Some(s) = body.get("status") {
                        out["status"] = s.clone();
                    }
                }
                out
            }
        };
        // A patch carries a resourceVersion only as a precondition; otherwise write to
        // the current one.
        let mut patched = patched;
        let precondition = match kind {
            PatchKind::Json => None,
            _ => body["metadata"].get("resourceVersion").cloned(),
        };
        let live_rv = live["metadata"]["resourceVersion"].clone();
        metadata_mut(&mut patched)
            .insert("resourceVersion".into(), precondition.unwrap_or(live_rv));
        self.write(&key, patched, status, Some(owners), options)
    }

    /// Deletes an object. A pod bound to a node is deleted gracefully: it gets a
    /// `deletionTimestamp` its grace period ahead (the request's `gracePeriodSeconds`, else the
    /// pod's `terminationGracePeriodSeconds`, else 30 s) and stays until whoever plays its
    /// kubelet deletes it again with no grace period. Any other object with finalizers is
    /// only marked; the rest are removed and their dependents collected.
    pub fn delete(
        &mut self,
        type_index: usize,
        namespace: &str,
        name: &str,
        request: &DeleteRequest,
    ) -> Result<Value, ApiError> {
        let t = self.types[type_index].clone();
        let key = self.key_of(type_index, namespace, name);
        let Some(stored) = self.objects.get(&key) else {
            return Err(ApiError::not_found(&t.plural, name));
        };
        let current = stored.value.clone();
        for field in ["uid", "resourceVersion"] {
            if let Some(wanted) = request.preconditions.get(field).and_then(Value::as_str)
                && meta(&current, field) != Some(wanted)
            {
                return Err(ApiError::conflict(format!(
                    "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                    meta(&current, field).unwrap_or("")
                )));
            }
        }
        let grace = if type_index == resources::PODS {
            pod_grace_period(&current, request.grace_period)
        } else {
            0
        };
        let terminating = current["metadata"].get("deletionTimestamp").is_some();
        let remaining = current["metadata"]["deletionGracePeriodSeconds"]
            .as_i64()
            .unwrap_or(0);
        if grace > 0 && (!terminating || grace < remaining) {
            // Graceful: mark (or shorten the wait), the kubelet finishes it.
            let mut marked = current;
            {
                let m = metadata_mut(&mut marked);
                m.insert(
                    "deletionTimestamp".into(),
                    Value::String(format_rfc3339(now_ms() + grace * 1000)),
                );
                m.insert("deletionGracePeriodSeconds".into(), json!(grace));
            }
            return Ok(self.mark(&key, marked));
        }
        if !finalizers(&current).is_empty() {
            if terminating && remaining == 0 {
                return Ok(self.stamped(&current, &key));
            }
            let mut marked = current;
            {
                let m = metadata_mut(&mut marked);
                if !terminating {
                    m.insert("deletionTimestamp".into(), Value::String(now()));
                }
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            return Ok(self.mark(&key, marked));
        }
        let mut gone = current;
        self.bump(&mut gone);
        Ok(self.remove(&key, gone))
    }

    /// Stores `marked` (a version of the object at `key` with deletion metadata) as a change.
    fn mark(&mut self, key: &Key, mut marked: Value) -> Value {
        let previous = self.objects.get(key).map(|s| self.stamped(&s.value, key));
        self.bump(&mut marked);
        let stamped = self.stamped(&marked, key);
        if let Some(stored) = self.objects.get_mut(key) {
            stored.value = marked;
        }
        self.record(key, EventKind::Modified, stamped.clone(), previous);
        stamped
    }

    /// Background garbage collection: objects owned by one that is gone are deleted too.
    fn collect_dependents(&mut self, gone: &Value) {
        let Some(uid) = meta(gone, "uid").map(str::to_owned) else {
            return;
        };
        let dependents: Vec<Key> = self
            .objects
            .iter()
            .filter(|(_, s)| {
                s.value["metadata"]["ownerReferences"]
                    .as_array()
                    .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(&uid)))
            })
            .map(|(k, _)| k.clone())
            .collect();
        for key in dependents {
            // Already gone (collected through another owner) is fine.
            let _ = self.delete(
                key.type_index,
                &key.namespace,
                &key.name,
                &DeleteRequest::default(),
            );
        }
    }

    /// The objects of a type in a namespace.
    pub fn in_namespace(&self, type_index: usize, namespace: &str) -> Vec<Value> {
        self.objects
            .iter()
            .filter(|(k, _)| k.type_index == type_index && k.namespace == namespace)
            .map(|(k, s)| self.stamped(&s.value, k))
            .collect()
    }
}
