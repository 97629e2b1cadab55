//! The objects, their resource versions and the watch history.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use karpenter_actors::model::time::format_rfc3339;

use crate::ApiError;
use crate::patch::{self, Owners};
use crate::resources::{self, ResourceType, StatusOnCreate, TYPES};
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
}

/// How a patch request's body is to be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Json,
    Apply { force: bool },
}

pub struct Store {
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

fn now() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    format_rfc3339(ms)
}

/// Characters the real server draws `generateName` suffixes from.
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

impl Store {
    pub fn new(
        history_limit: usize,
        events: tokio::sync::broadcast::Sender<Arc<WatchEvent>>,
    ) -> Self {
        let mut store = Store {
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
        store
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
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
        let t = &TYPES[key.type_index];
        let mut out = object.clone();
        if let Value::Object(m) = &mut out {
            m.insert("apiVersion".into(), Value::String(t.api_version()));
            m.insert("kind".into(), Value::String(t.kind.to_owned()));
        }
        out
    }

    fn key_of(type_index: usize, namespace: &str, name: &str) -> Key {
        let namespaced = TYPES[type_index].namespaced;
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
        let key = Self::key_of(type_index, namespace, name);
        self.objects
            .get(&key)
            .map(|s| self.stamped(&s.value, &key))
            .ok_or_else(|| ApiError::not_found(TYPES[type_index].plural, name))
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
        self.create_owned(type_index, namespace, object, Owners::new())
    }

    /// Creates an object whose fields `owners` own (server-side apply of a new object).
    fn create_owned(
        &mut self,
        type_index: usize,
        namespace: &str,
        mut object: Value,
        owners: Owners,
    ) -> Result<Value, ApiError> {
        let t = &TYPES[type_index];
        Self::check_kind(t, &object)?;
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
                .contains_key(&Self::key_of(resources::NAMESPACES, "", namespace))
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
                        .contains_key(&Self::key_of(type_index, namespace, &candidate))
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
        let key = Self::key_of(type_index, namespace, &name);
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(t.plural, &name));
        }
        self.uids += 1;
        let uid = format!("00000000-0000-4000-8000-{:012x}", self.uids);
        {
            let m = metadata_mut(&mut object);
            m.insert("name".into(), Value::String(name.clone()));
            if t.namespaced {
                m.insert("namespace".into(), Value::String(namespace.to_owned()));
            } else {
                m.remove("namespace");
            }
            m.insert("uid".into(), Value::String(uid));
            m.insert("creationTimestamp".into(), Value::String(now()));
            m.insert("generation".into(), json!(1));
            m.remove("deletionTimestamp");
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
            match t.status_on_create {
                StatusOnCreate::Keep => {}
                StatusOnCreate::Drop => {
                    fields.remove("status");
                }
                StatusOnCreate::Pending => {
                    fields.insert("status".into(), json!({"phase": "Pending"}));
                }
            }
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
        Ok(stamped)
    }

    /// Writes `new` over the stored object under update rules: `resourceVersion` must match
    /// when given; identity and deletion metadata are kept; `status` changes only through the
    /// status subresource and everything else only through the main resource; no finalizer
    /// may be added once the object is being deleted; an object being deleted whose last
    /// finalizer goes is removed.
    fn write(
        &mut self,
        key: &Key,
        mut new: Value,
        status: bool,
        owners: Option<Owners>,
    ) -> Result<Value, ApiError> {
        let t = &TYPES[key.type_index];
        Self::check_kind(t, &new)?;
        let Some(stored) = self.objects.get(key) else {
            return Err(ApiError::not_found(t.plural, &key.name));
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
        if let Value::Object(fields) = &mut new {
            fields.remove("apiVersion");
            fields.remove("kind");
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
        let generation = old["metadata"]["generation"].as_i64().unwrap_or(1);
        let spec_changed = spec_part(&old) != spec_part(&new);
        {
            let m = metadata_mut(&mut new);
            for field in [
                "uid",
                "creationTimestamp",
                "namespace",
                "name",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
            ] {
                match old["metadata"].get(field) {
                    Some(v) => m.insert(field.into(), v.clone()),
                    None => m.remove(field),
                };
            }
            m.insert(
                "generation".into(),
                json!(if spec_changed {
                    generation + 1
                } else {
                    generation
                }),
            );
        }
        let owners = owners.unwrap_or_else(|| self.objects[key].owners.clone());
        let without_managed = |v: &Value| {
            let mut v = v.clone();
            metadata_mut(&mut v).remove("managedFields");
            v
        };
        if without_managed(&new) == without_managed(&old) && owners == self.objects[key].owners {
            // A no-op write does not bump the resource version, as on the real server.
            return Ok(self.stamped(&old, key));
        }
        if owners.is_empty() {
            metadata_mut(&mut new).remove("managedFields");
        } else {
            let managed = patch::managed_fields(&owners, &t.api_version(), &now());
            metadata_mut(&mut new).insert("managedFields".into(), managed);
        }
        self.bump(&mut new);
        if deleting.is_some() && finalizers(&new).is_empty() {
            self.objects.remove(key);
            let stamped = self.stamped(&new, key);
            self.record(key, EventKind::Deleted, stamped.clone(), None);
            self.collect_dependents(&new);
            return Ok(stamped);
        }
        let stamped = self.stamped(&new, key);
        if let Some(stored) = self.objects.get_mut(key) {
            stored.value = new;
            stored.owners = owners;
        }
        let previous = self.stamped(&old, key);
        self.record(key, EventKind::Modified, stamped.clone(), Some(previous));
        Ok(stamped)
    }

    pub fn replace(
        &mut self,
        type_index: usize,
        namespace: &str,
        name: &str,
        object: Value,
        status: bool,
    ) -> Result<Value, ApiError> {
        let key = Self::key_of(type_index, namespace, name);
        self.write(&key, object, status, None)
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
        } = *request;
        let t = &TYPES[type_index];
        let key = Self::key_of(type_index, namespace, name);
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
                return self.create_owned(type_index, namespace, object, owners);
            }
            return Err(ApiError::not_found(t.plural, name));
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
        self.write(&key, patched, status, Some(owners))
    }

    /// Deletes an object: with finalizers it is only marked (`deletionTimestamp`), otherwise
    /// removed and its dependents collected.
    pub fn delete(
        &mut self,
        type_index: usize,
        namespace: &str,
        name: &str,
        preconditions: &Value,
    ) -> Result<Value, ApiError> {
        let t = &TYPES[type_index];
        let key = Self::key_of(type_index, namespace, name);
        let Some(stored) = self.objects.get(&key) else {
            return Err(ApiError::not_found(t.plural, name));
        };
        let current = stored.value.clone();
        for field in ["uid", "resourceVersion"] {
            if let Some(wanted) = preconditions.get(field).and_then(Value::as_str)
                && meta(&current, field) != Some(wanted)
            {
                return Err(ApiError::conflict(format!(
                    "Precondition failed: {field} in precondition: {wanted}, {field} in object meta: {}",
                    meta(&current, field).unwrap_or("")
                )));
            }
        }
        if !finalizers(&current).is_empty() {
            if current["metadata"].get("deletionTimestamp").is_some() {
                return Ok(self.stamped(&current, &key));
            }
            let mut marked = current;
            {
                let m = metadata_mut(&mut marked);
                m.insert("deletionTimestamp".into(), Value::String(now()));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
            }
            let previous = self.stamped(&marked, &key);
            self.bump(&mut marked);
            let stamped = self.stamped(&marked, &key);
            if let Some(stored) = self.objects.get_mut(&key) {
                stored.value = marked;
            }
            self.record(&key, EventKind::Modified, stamped.clone(), Some(previous));
            return Ok(stamped);
        }
        let mut gone = current;
        self.objects.remove(&key);
        self.bump(&mut gone);
        let stamped = self.stamped(&gone, &key);
        self.record(&key, EventKind::Deleted, stamped.clone(), None);
        self.collect_dependents(&gone);
        Ok(stamped)
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
            let _ = self.delete(key.type_index, &key.namespace, &key.name, &Value::Null);
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
