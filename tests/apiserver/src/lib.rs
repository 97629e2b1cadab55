//! An in-memory Kubernetes API server for tests, on 127.0.0.1.
//!
//! No Kubernetes API server can be installed on the machines this project is tested on, and
//! the in-memory fakes published for Rust either lack watches or target an older kube, so the
//! tests run the Kubernetes adapter against this one. It serves real HTTP, so `kube::Client`
//! reaches it through an ordinary kubeconfig (see [`ApiServer::kubeconfig`]) and `kubectl`
//! can be pointed at it while debugging.
//!
//! Implemented, faithfully to the real server for the subset the adapter uses:
//! - discovery (`/api`, `/apis`, per group-version resource lists, `/version`), including the
//!   custom resources CRDs add;
//! - CustomResourceDefinitions: a CRD is validated as kube-apiserver validates it (names, the
//!   structural-schema rules, CEL rules compiled against the schema, their estimated cost per
//!   rule and in total; `kube_admission::crd`), refused with `422 Invalid`
//!   and the server's messages, and once accepted it is `Established` and its versions are
//!   served until it is deleted (its objects go with it);
//! - custom resources are admitted as the real server admits them
//!   (`kube_admission::object`) on create, update, patch and apply: unknown
//!   fields pruned, refused under `fieldValidation=Strict` (`400`) or reported as `Warning`
//!   headers (the default), `null`s dropped, defaults applied, the structural schema checked and
//!   the CEL rules evaluated, transition rules against the stored object, unchanged parts
//!   ratcheted; refusals are `422 Invalid` with the server's message and causes;
//! - `dryRun=All` on create, update and patch: admitted and answered, not stored;
//! - list with `resourceVersion`, label and field selectors, `limit`/`continue`;
//! - watch from a resource version, with bookmarks, `timeoutSeconds`, and `410 Gone` (an
//!   `ERROR` event with an `Expired` status) once the history it needs was compacted; a
//!   watch with selectors sees an object modified into them as `ADDED` and out of them as
//!   `DELETED`;
//! - get, create (`generateName`, namespaces must exist), replace (optimistic concurrency on
//!   `resourceVersion`), delete (preconditions; finalizers and `deletionTimestamp`; no new
//!   finalizers once deleting; owner-reference garbage collection of dependents);
//! - graceful pod deletion: deleting (or evicting) a pod bound to a node sets its
//!   `deletionTimestamp` its grace period ahead (`gracePeriodSeconds`, else the pod's
//!   `terminationGracePeriodSeconds`, else 30 s); the pod stays until whoever plays its
//!   kubelet deletes it with no grace period; unbound and finished pods go at once;
//! - the `status` subresource (the main resource leaves status alone and bumps
//!   `generation` on spec changes);
//! - JSON merge patch, JSON patch (with `test`), strategic merge patch (as a merge patch),
//!   and server-side apply (field ownership per manager, conflicts and `force`, removal of
//!   fields a manager stops applying; lists are atomic);
//! - the `scale` subresource of custom resources whose CRD declares one (`kubectl scale`;
//!   `scale`);
//! - pod `binding` and `eviction`, the latter honouring PodDisruptionBudgets (`429` when a
//!   budget allows no disruption);
//! - the `Priority` admission plugin and its two system PriorityClasses (`priority`).
//!
//! - the node lifecycle controller's part a heartbeat needs (`nodelifecycle`): a Node whose
//!   Lease stops being renewed turns `Unknown` and `unreachable` after the monitor grace
//!   period ([`Options::node_monitor_grace_period`], 40 s);
//! - stand-ins for kube-scheduler (`scheduler`) and the Deployment and ReplicaSet
//!   controllers (`workloads`), when [`Options::controllers`] asks for them;
//! - `/metrics` with `apiserver_request_total` by verb, resource and code
//!   ([`ApiServer::requests`]);
//! - the failures of a real control plane, injected at a seeded rate
//!   ([`ApiServer::inject_faults`]: `429` and `503` with `Retry-After`, `500`, `409`, `410 Gone`
//!   on watches, connections reset mid-list and mid-watch, late answers) or on demand
//!   ([`ApiServer::restart`], [`ApiServer::compact`], [`ApiServer::disconnect_watches`]).
//!
//! Not implemented (the gap to a real server): authentication and authorization; admission
//! of built-in kinds other than pod priority (no defaulting or validation of pods, deployments, …) and webhooks;
//! CEL runtime cost limits (the static estimate is checked when a CRD is created, the cost of
//! an evaluation is not metered); multi-version CRDs with conversion; protobuf and CBOR
//! bodies (kubectl's typed creates of built-in kinds get `415`; `kubectl apply
//! --validate=false` works); OpenAPI documents and aggregated discovery; lists served from a
//! snapshot at the continue token's version (pages read current state), `resourceVersionMatch`
//! and streaming lists (`sendInitialEvents`); strategic merge keys and server-side apply's
//! `map`/`set` list merging (lists replace); ownership of fields written by non-apply requests;
//! namespace termination; and the controllers: no disruption or
//! garbage-collector-with-foreground-deletion controller runs, the scheduler and workload
//! stand-ins only when asked (with the limits their module docs list), of the node
//! lifecycle controller only its heartbeat check, without taint-based evictions, and
//! no kubelet (tests, or `karpenter controller --cloud sim`'s simulated kubelets, act them
//! out), so eviction counts a budget's healthy pods itself rather than reading the budget's
//! status (and counts as expected every pod the budget selects, terminating ones included,
//! where the disruption controller asks the pods' controllers for their scale: a budget
//! given as `maxUnavailable` or a percentage is stricter here while replacements start).

mod faults;
mod http;
mod nodelifecycle;
mod patch;
mod priority;
mod requests;
pub mod resources;
mod scale;
mod scheduler;
mod selectors;
mod store;
mod target;
mod workloads;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::watch;

/// An error the server answers with, as a `Status` object.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{code} {reason}: {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// `Status.reason` (`NotFound`, `Conflict`, …).
    pub reason: &'static str,
    /// `Status.message`.
    pub message: String,
    /// `Status.details`, when the real server gives some.
    pub details: Option<Value>,
}

impl ApiError {
    pub(crate) fn new(code: u16, reason: &'static str, message: String) -> Self {
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    pub(crate) fn bad_request(message: String) -> Self {
        Self::new(400, "BadRequest", message)
    }

    pub(crate) fn forbidden(message: String) -> Self {
        Self::new(403, "Forbidden", message)
    }

    pub(crate) fn not_found(kind: &str, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{kind} {name:?} not found"))
    }

    pub(crate) fn already_exists(kind: &str, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{kind} {name:?} already exists"),
        )
    }

    pub(crate) fn conflict(message: String) -> Self {
        Self::new(409, "Conflict", message)
    }

    pub(crate) fn conflict_with_reason(message: String, reason: &'static str) -> Self {
        Self::new(409, reason, message)
    }

    pub(crate) fn unprocessable(message: String) -> Self {
        Self::new(422, "Invalid", message)
    }

    pub(crate) fn gone(message: String) -> Self {
        Self::new(410, "Expired", message)
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(details) = &self.details {
            status["details"] = details.clone();
        }
        status
    }
}

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct Options {
    /// How often watches that asked for bookmarks get one.
    pub bookmark_interval: Duration,
    /// Watch events kept for watches to resume from; older ones are compacted away (a watch
    /// from before them gets `410 Gone`).
    pub history: usize,
    /// The node lifecycle stand-in's grace for a Node's Lease (kube-controller-manager's
    /// `--node-monitor-grace-period`); `None` runs no stand-in.
    pub node_monitor_grace_period: Option<Duration>,
    /// Which stand-ins for kube-scheduler and the workload controllers run (none by default:
    /// tests play them).
    pub controllers: Controllers,
}

/// Stand-ins for the control plane's other components, each a pass over the store every
/// [`CONTROLLER_EVERY`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Controllers {
    /// kube-scheduler (`scheduler`): pending pods bound where its default profile would put
    /// them, the rest marked `Unschedulable`.
    pub scheduler: bool,
    /// The Deployment and ReplicaSet controllers (`workloads`): Deployments kept at their
    /// replicas.
    pub workloads: bool,
}

/// How often the scheduler and workload stand-ins pass over the store.
pub const CONTROLLER_EVERY: Duration = Duration::from_millis(200);

impl Default for Options {
    fn default() -> Self {
        Options {
            bookmark_interval: Duration::from_secs(1),
            history: 10_000,
            node_monitor_grace_period: Some(Duration::from_secs(40)),
            controllers: Controllers::default(),
        }
    }
}

/// Runs the node lifecycle, scheduler and workload stand-ins the options ask for.
fn run_controllers(shared: &Arc<Shared>) -> Option<tokio::task::JoinHandle<()>> {
    let grace = shared.options.node_monitor_grace_period;
    let wanted = shared.options.controllers;
    if grace.is_none() && wanted == Controllers::default() {
        return None;
    }
    let watched = shared.clone();
    Some(tokio::spawn(async move {
        let mut every = tokio::time::interval(CONTROLLER_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lifecycle_at = tokio::time::Instant::now();
        loop {
            every.tick().await;
            if let Some(grace) = grace
                && lifecycle_at.elapsed() >= Duration::from_secs(1)
            {
                lifecycle_at = tokio::time::Instant::now();
                nodelifecycle::check(&mut watched.store(), jiff::Timestamp::now(), grace);
            }
            if wanted.workloads {
                workloads::pass(&mut watched.store());
            }
            if wanted.scheduler {
                scheduler::pass(&mut watched.store());
            }
        }
    }))
}

/// How long [`ApiServer::stop`] lets open requests finish.
const STOP_GRACE: Duration = Duration::from_millis(500);

/// A running server; stopped when dropped or by [`ApiServer::stop`].
pub struct ApiServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// The controller stand-ins (node lifecycle).
    controllers: Option<tokio::task::JoinHandle<()>>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

/// State shared by the request handlers.
pub(crate) struct Shared {
    pub(crate) store: Mutex<store::Store>,
    /// Bumped to end every open watch (a dropped connection, as clients see it).
    pub(crate) disconnects: watch::Sender<u64>,
    pub(crate) options: Options,
    pub(crate) addr: SocketAddr,
    pub(crate) faults: Mutex<faults::Faults>,
    /// Requests answered: (verb, resource, code) → how many.
    pub(crate) requests: Mutex<Requests>,
}

/// Requests answered, by (verb, resource, HTTP code), as `apiserver_request_total` counts them.
pub type Requests = std::collections::BTreeMap<(&'static str, String, u16), u64>;

impl Shared {
    pub(crate) fn store(&self) -> std::sync::MutexGuard<'_, store::Store> {
        // A handler that panicked mid-update leaves the store as a test would want to see it.
        self.store
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn faults(&self) -> std::sync::MutexGuard<'_, faults::Faults> {
        self.faults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn count_request(&self, verb: &'static str, resource: String, code: u16) {
        *self
            .requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((verb, resource, code))
            .or_default() += 1;
    }

    pub(crate) fn requests(&self) -> Requests {
        self.requests
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

impl ApiServer {
    /// Starts a server on an ephemeral port of 127.0.0.1 with default options.
    pub async fn start() -> std::io::Result<ApiServer> {
        Self::start_with(Options::default()).await
    }

    /// Starts a server on an ephemeral port of 127.0.0.1.
    pub async fn start_with(options: Options) -> std::io::Result<ApiServer> {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let (events, _) = tokio::sync::broadcast::channel(4096);
        let shared = Arc::new(Shared {
            store: Mutex::new(store::Store::new(options.history, events)),
            disconnects: watch::channel(0).0,
            options,
            addr,
            faults: Mutex::default(),
            requests: Mutex::default(),
        });
        let controllers = run_controllers(&shared);
        let mut server = ApiServer {
            addr,
            shared,
            task: None,
            controllers,
            shutdown: None,
        };
        server.serve(listener);
        Ok(server)
    }

    /// Serves the store on `listener`.
    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let app = http::router(self.shared.clone());
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let served = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(error) = served.await {
                tracing::warn!(%error, "test API server stopped");
            }
        });
        self.task = Some(task);
        self.shutdown = Some(shutdown);
    }

    /// Stops serving (open requests get a moment, then connections are cut).
    async fn unserve(&mut self) {
        self.disconnect_watches();
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(STOP_GRACE, &mut task).await.is_err()
        {
            task.abort();
            let _ = task.await;
        }
    }

    /// Restarts the server as a control-plane upgrade would: every connection is cut, the
    /// port refuses connections for `down`, then the same store (etcd outlives the
    /// apiserver) is served on the same address again. Watches resume or relist.
    pub async fn restart(&mut self, down: Duration) -> std::io::Result<()> {
        self.unserve().await;
        tokio::time::sleep(down).await;
        // The port was just released; a moment may pass before it can be bound again.
        let mut attempt = 0;
        let listener = loop {
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(listener) => break listener,
                Err(error) if attempt < 50 => {
                    attempt += 1;
                    tracing::debug!(%error, "rebinding the test API server's port");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error),
            }
        };
        self.serve(listener);
        Ok(())
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A kubeconfig pointing at the server (no credentials: it does not authenticate).
    pub fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {}\n\
             contexts:\n- name: test\n  context:\n    cluster: test\n    user: test\n\
             current-context: test\nusers:\n- name: test\n  user: {{}}\n",
            self.url()
        )
    }

    /// Drops the watch history, as an etcd compaction would while clients were away: a
    /// watch or a continued list from any version handed out so far gets `410 Gone`.
    pub fn compact(&self) {
        self.shared.store().compact();
    }

    /// Ends every open watch stream, as a dropped connection would.
    pub fn disconnect_watches(&self) {
        self.shared.disconnects.send_modify(|n| *n += 1);
    }

    /// From now on, each request gets a fault with probability `rate` (a watch with four
    /// times that; seeded by `seed`): a watch is turned away with `429`, has its connection
    /// dropped within 3 s or, when it resumes from a resource version, is told that version
    /// expired (`410 Gone`); a replace or a patch may be refused with `409 Conflict`; any
    /// request may be answered 0.1 to 1.5 s late, with `429` or `503` and `Retry-After: 1`,
    /// or with `500`; a list may reset halfway through its body. A rate of 0 stops injecting.
    pub fn inject_faults(&self, rate: f64, seed: u64) {
        self.shared.faults().set(rate, seed);
    }

    /// How many faults of each kind were injected.
    pub fn faults_injected(&self) -> std::collections::BTreeMap<&'static str, usize> {
        self.shared.faults().injected()
    }

    /// The current resource version.
    pub fn resource_version(&self) -> u64 {
        self.shared.store().resource_version()
    }

    /// Requests answered so far, by (verb, resource, HTTP code); also served as
    /// `apiserver_request_total` on `/metrics`.
    pub fn requests(&self) -> Requests {
        self.shared.requests()
    }

    /// Stops serving: open requests get a moment to finish, then connections are cut (a
    /// client's idle keep-alive connection would otherwise hold a graceful shutdown open).
    pub async fn stop(mut self) {
        if let Some(controllers) = self.controllers.take() {
            controllers.abort();
        }
        self.unserve().await;
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        if let Some(controllers) = self.controllers.take() {
            controllers.abort();
        }
        self.shared.disconnects.send_modify(|n| *n += 1);
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
