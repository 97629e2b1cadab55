//! `karpenter bench cluster`: upstream Karpenter's performance suite against an API server.
//! It installs the CRDs, an EC2NodeClass and upstream's performance NodePool
//! (`karpenter.k8s.aws/instance-cpu Lt 32`, `WhenEmptyOrUnderutilized`, `consolidateAfter:
//! 30s`, a 100 % budget), starts `karpenter controller --cloud sim --sim-kubelets external`
//! and `karpenter sim-nodes` as processes of their own (so the controller's memory and CPU
//! are its own, as with upstream's KWOK nodes), and runs the case's steps ([`cases`]): each
//! creates or scales Deployments (or drifts the NodePool), then waits as upstream's report
//! functions wait — until the pods run (scale-out), until they run and no node has drained
//! for the quiet window (consolidation; the window counts in its time, as in `report.go`),
//! or until every node from before has been replaced and none drained for the drift window.
//!
//! Per phase it prints the time, the nodes, their $/h, their reserved CPU and memory
//! utilisation, the pods evicted (from the API server's `apiserver_request_total`), the
//! controller's P95 resident memory and average CPU (sampled from `/proc` every second),
//! and the API requests by verb and resource (every client's, from the API server) beside
//! the controller's own by method; upstream's bounds stand beside them. It needs an API
//! server with kube-scheduler and the Deployment controller (a real control plane, or the
//! test API server with its stand-ins: `cargo run -p karpenter-test-apiserver --example
//! serve -- --controllers`), and the Deployments' pods must be the only ones in namespace
//! [`NAMESPACE`]. At the end the Deployments and the NodePool are deleted and the nodes
//! given a minute to go; the processes are stopped either way.

pub mod cases;
pub mod observe;
pub mod plan;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::json;

use cases::{Action, Case, PhaseKind, Step, Workload, scaled};
use observe::{Figures, Prices, counters, figures, p95};

/// The namespace the Deployments run in.
pub const NAMESPACE: &str = "karpenter-bench";
/// The label every bench pod carries.
const BENCH_LABEL: &str = "karpenter-rs/bench";
/// The NodePool and EC2NodeClass.
const POOL: &str = "bench";
/// The NodePool's `consolidateAfter` (upstream's performance NodePool's).
pub const CONSOLIDATE_AFTER: Duration = Duration::from_secs(30);
/// How often the cluster is read.
const POLL: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, Clone)]
pub struct ClusterBench {
    /// The case.
    pub case: Case,
    /// The API server's kubeconfig (else the usual places).
    pub kubeconfig: Option<PathBuf>,
    /// Replica counts multiplied by this.
    pub scale: f64,
    /// How long no node may drain before a consolidation phase ends (upstream: 3 minutes).
    pub quiet: Duration,
    /// The same for drift (upstream: 2 minutes).
    pub drift_quiet: Duration,
    /// How long a simulated instance takes to register its Node.
    pub boot_delay: Duration,
    /// The catalog's region.
    pub region: String,
    /// The `karpenter` binary to start.
    pub binary: PathBuf,
    /// Where the processes' logs and the controller's journal go.
    pub work_dir: PathBuf,
    /// More flags for the controller.
    pub controller_args: Vec<String>,
}

/// One phase's figures.
#[derive(Debug, Clone)]
pub struct Phase {
    /// The step's name.
    pub name: &'static str,
    /// Whether it settled within its timeout.
    pub settled: bool,
    /// How long it took.
    pub time: Duration,
    /// The cluster at its end.
    pub figures: Figures,
    /// Pods the API server evicted during it.
    pub evicted: u64,
    /// The controller's 95th-percentile resident memory, bytes.
    pub rss_p95: u64,
    /// The controller's average CPU, cores.
    pub cpu_cores: f64,
    /// API requests during it, by (verb, resource): every client's.
    pub requests: BTreeMap<(String, String), u64>,
    /// The controller's own requests, by method.
    pub controller_requests: BTreeMap<String, u64>,
    /// Upstream's bounds on it.
    pub bounds: cases::Bounds,
    /// Pods expected at its end.
    pub pods: u32,
}

/// A process the bench started, stopped when dropped.
struct Process {
    name: &'static str,
    child: Child,
}

impl Process {
    fn start(
        name: &'static str,
        binary: &Path,
        args: &[String],
        log: &Path,
    ) -> anyhow::Result<Process> {
        let out = std::fs::File::create(log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("cannot start {} {name}", binary.display()))?;
        Ok(Process { name, child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Still running, or how it ended.
    fn check(&mut self) -> anyhow::Result<()> {
        match self.child.try_wait()? {
            None => Ok(()),
            Some(status) => bail!("{} exited early ({status})", self.name),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // SIGTERM first (the controller stops cleanly on it), then SIGKILL after 10 s.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        for _ in 0..100 {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A free port on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A plain HTTP GET on 127.0.0.1 (the controller's /metrics).
async fn http_get(port: u16, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&answer);
    Some(text.split_once("\r\n\r\n")?.1.to_owned())
}

/// Counter snapshots a phase is measured between.
#[derive(Debug, Default, Clone)]
struct Counters {
    apiserver: BTreeMap<Vec<String>, f64>,
    controller: BTreeMap<Vec<String>, f64>,
}

async fn snapshot(client: &kube::Client, metrics_port: u16) -> Counters {
    let request = http::Request::get("/metrics").body(Vec::new());
    let apiserver = match request {
        Ok(request) => client.request_text(request).await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let controller = http_get(metrics_port, "/metrics").await.unwrap_or_default();
    Counters {
        apiserver: counters(
            &apiserver,
            "apiserver_request_total",
            &["verb", "resource", "subresource", "code"],
        ),
        controller: counters(&controller, "rest_client_requests_total", &["method"]),
    }
}

/// The controller's samples: (phase index, resident bytes, CPU seconds).
type Samples = Arc<Mutex<Vec<(usize, u64, f64)>>>;

/// Runs the case; the phases' figures, or why it could not run.
pub async fn run(bench: &ClusterBench) -> anyhow::Result<Vec<Phase>> {
    let client =
        crate::kube::controller::connect(bench.kubeconfig.as_deref(), None, Default::default())
            .await?;
    install(&client).await?;
    std::fs::create_dir_all(&bench.work_dir)
        .with_context(|| format!("cannot create {}", bench.work_dir.display()))?;
    let kubeconfig_args: Vec<String> = bench
        .kubeconfig
        .iter()
        .flat_map(|k| ["--kubeconfig".to_owned(), k.display().to_string()])
        .collect();
    let metrics_port = free_port()?;
    let mut sim_args = kubeconfig_args.clone();
    sim_args.extend([
        "--region".into(),
        bench.region.clone(),
        "--boot-delay".into(),
        format!("{}s", bench.boot_delay.as_secs()),
    ]);
    let mut sim = Process::start(
        "sim-nodes",
        &bench.binary,
        &prefixed("sim-nodes", sim_args),
        &bench.work_dir.join("sim-nodes.log"),
    )?;
    let mut controller_args = kubeconfig_args;
    controller_args.extend(
        [
            "--cloud",
            "sim",
            "--sim-kubelets",
            "external",
            "--disable-leader-election",
            "--aws-region",
            &bench.region,
        ]
        .map(str::to_owned),
    );
    controller_args.extend([
        "--journal".into(),
        bench.work_dir.join("journal").display().to_string(),
        "--metrics-port".into(),
        metrics_port.to_string(),
        "--health-probe-port".into(),
        free_port()?.to_string(),
    ]);
    controller_args.extend(bench.controller_args.iter().cloned());
    let mut controller = Process::start(
        "controller",
        &bench.binary,
        &prefixed("controller", controller_args),
        &bench.work_dir.join("controller.log"),
    )?;
    let samples: Samples = Arc::default();
    let phase_index = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (samples, phase_index, pid) = (samples.clone(), phase_index.clone(), controller.pid());
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(1));
            loop {
                every.tick().await;
                let Some((rss, cpu)) = crate::system::host::process_sample(pid) else {
                    return;
                };
                let phase = phase_index.load(std::sync::atomic::Ordering::SeqCst);
                if let Ok(mut s) = samples.lock() {
                    s.push((phase, rss, cpu));
                }
            }
        })
    };
    let prices = prices(&bench.region)?;
    let mut phases = Vec::new();
    let mut outcome = Ok(());
    let mut ctx = PhaseContext {
        client: &client,
        bench,
        prices: &prices,
        metrics_port,
        replicas: BTreeMap::new(),
    };
    for (index, step) in bench.case.steps().into_iter().enumerate() {
        phase_index.store(index, std::sync::atomic::Ordering::SeqCst);
        let result = ctx
            .phase(&step, &mut || {
                sim.check()?;
                controller.check()
            })
            .await;
        match result {
            Ok(mut phase) => {
                measure_process(&samples, index, &mut phase);
                let settled = phase.settled;
                phases.push(phase);
                if !settled {
                    break;
                }
            }
            Err(error) => {
                outcome = Err(error);
                break;
            }
        }
    }
    sampler.abort();
    cleanup(&client).await;
    drop(controller);
    drop(sim);
    outcome.map(|()| phases)
}

fn prefixed(command: &str, args: Vec<String>) -> Vec<String> {
    std::iter::once(command.to_owned()).chain(args).collect()
}

/// The phase's P95 resident memory and average CPU from the samples taken during it.
fn measure_process(samples: &Samples, index: usize, phase: &mut Phase) {
    let Ok(samples) = samples.lock() else {
        return;
    };
    let during: Vec<&(usize, u64, f64)> = samples.iter().filter(|s| s.0 == index).collect();
    phase.rss_p95 = p95(&during.iter().map(|s| s.1).collect::<Vec<_>>());
    if let (Some(first), Some(last)) = (during.first(), during.last())
        && during.len() > 1
    {
        phase.cpu_cores = (last.2 - first.2) / (during.len() - 1) as f64;
    }
}

/// Instance prices of the region's catalog.
fn prices(region: &str) -> anyhow::Result<Prices> {
    let mut out = Prices::new();
    for t in crate::system::catalog_instance_types(region)? {
        for o in &t.offerings {
            out.insert(
                (
                    t.name.clone(),
                    o.zone.clone(),
                    o.capacity_type.as_str().to_owned(),
                ),
                o.price,
            );
        }
    }
    Ok(out)
}

/// The CRDs, the namespace, the EC2NodeClass and the NodePool.
async fn install(client: &kube::Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in karpenter_core::api::crds::all().context("cannot build the CRDs")? {
        match crds.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(error) => return Err(error).context("cannot create the CRDs"),
        }
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?;
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(error) => return Err(error).context("cannot create the bench's namespace"),
    }
    let class = json!({"apiVersion": "karpenter.k8s.aws/v1", "kind": "EC2NodeClass",
    "metadata": {"name": POOL},
    "spec": {
        "role": "KarpenterNodeRole-bench",
        "amiSelectorTerms": [{"alias": "al2023@latest"}],
        "subnetSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
        "securityGroupSelectorTerms": [{"tags": {"karpenter.sh/discovery": "bench"}}],
    }});
    let pool = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodePool",
    "metadata": {"name": POOL},
    "spec": {
        "template": {"spec": {
            "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": POOL},
            "requirements": [{"key": "karpenter.k8s.aws/instance-cpu", "operator": "Lt", "values": ["32"]}],
        }},
        "disruption": {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": format!("{}s", CONSOLIDATE_AFTER.as_secs()),
            "budgets": [{"nodes": "100%"}],
        },
    }});
    // A real server serves a new CRD's kind a moment after accepting it.
    for (group, kind, object) in [
        ("karpenter.k8s.aws", "EC2NodeClass", class),
        ("karpenter.sh", "NodePool", pool),
    ] {
        let api = dynamic(client, group, kind);
        let object: DynamicObject = serde_json::from_value(object)?;
        let mut attempt = 0;
        loop {
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => break,
                Err(kube::Error::Api(s)) if s.code == 409 => break,
                Err(_) if attempt < 30 => {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                Err(error) => {
                    return Err(error).with_context(|| format!("cannot create the {kind} {POOL}"));
                }
            }
        }
    }
    Ok(())
}

fn dynamic(client: &kube::Client, group: &str, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, "v1", kind);
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

/// A Deployment of `workload` with `replicas`.
fn deployment(workload: &Workload, replicas: u32) -> serde_json::Value {
    let selector = json!({"matchLabels": {"app": workload.name}});
    let mut constraints = Vec::new();
    for (on, key) in [
        (workload.hostname_spread, "kubernetes.io/hostname"),
        (workload.zone_spread, "topology.kubernetes.io/zone"),
    ] {
        if on {
            constraints.push(json!({"maxSkew": 1, "topologyKey": key,
                "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}));
        }
    }
    let mut spec = json!({
        "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10",
            "resources": {"requests": {"cpu": workload.cpu, "memory": workload.memory}}}],
        "terminationGracePeriodSeconds": 0,
    });
    if !constraints.is_empty() {
        spec["topologySpreadConstraints"] = json!(constraints);
    }
    if workload.anti_affinity {
        spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": selector}
        ]}});
    }
    let mut annotations = json!({});
    if workload.do_not_disrupt {
        annotations["karpenter.sh/do-not-disrupt"] = json!("true");
    }
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": workload.name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "selector": selector,
            "template": {
                "metadata": {"labels": {"app": workload.name, BENCH_LABEL: "true"}, "annotations": annotations},
                "spec": spec,
            },
        },
    })
}

/// What the phases share.
struct PhaseContext<'a> {
    client: &'a kube::Client,
    bench: &'a ClusterBench,
    prices: &'a Prices,
    metrics_port: u16,
    /// Each Deployment's replicas now (scaled).
    replicas: BTreeMap<String, u32>,
}

impl PhaseContext<'_> {
    async fn act(&mut self, action: &Action) -> anyhow::Result<()> {
        if let Action::All(actions) = action {
            for a in actions {
                Box::pin(self.act(a)).await?;
            }
            return Ok(());
        }
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), NAMESPACE);
        match action {
            Action::Create(workloads) => {
                for w in workloads {
                    let replicas = scaled(w.replicas, self.bench.scale);
                    let object: Deployment = serde_json::from_value(deployment(w, replicas))?;
                    deployments
                        .create(&PostParams::default(), &object)
                        .await
                        .with_context(|| format!("cannot create the Deployment {}", w.name))?;
                    self.replicas.insert(w.name.clone(), replicas);
                }
            }
            Action::Scale(changes) => {
                for (name, replicas) in changes {
                    let replicas = scaled(*replicas, self.bench.scale);
                    let patch = json!({"spec": {"replicas": replicas}});
                    deployments
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .with_context(|| format!("cannot scale the Deployment {name}"))?;
                    self.replicas.insert(name.clone(), replicas);
                }
            }
            Action::Drift => {
                let patch = json!({"spec": {"template": {"metadata": {"annotations": {
                    "test-drift-trigger": format!("drift-{}", jiff::Timestamp::now().as_second())
                }}}}});
                dynamic(self.client, "karpenter.sh", "NodePool")
                    .patch(POOL, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .context("cannot change the NodePool's template")?;
            }
            Action::All(_) => {}
        }
        Ok(())
    }

    async fn read(&self) -> anyhow::Result<(Vec<Node>, Vec<Pod>)> {
        let nodes = Api::<Node>::all(self.client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        let pods = Api::<Pod>::namespaced(self.client.clone(), NAMESPACE)
            .list(&ListParams::default().labels(&format!("{BENCH_LABEL}=true")))
            .await?
            .items;
        Ok((nodes, pods))
    }

    /// Runs a step and measures its phase; `alive` fails when a process exited.
    async fn phase(
        &mut self,
        step: &Step,
        alive: &mut dyn FnMut() -> anyhow::Result<()>,
    ) -> anyhow::Result<Phase> {
        let before = snapshot(self.client, self.metrics_port).await;
        let (nodes_before, _) = self.read().await?;
        let old_nodes: Vec<String> = nodes_before
            .iter()
            .filter(|n| {
                n.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.contains_key(karpenter_core::vocab::labels::NODEPOOL))
            })
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        let started = Instant::now();
        self.act(&step.action).await?;
        let expected = self.replicas.values().sum::<u32>() as usize;
        let timeout = step.timeout.mul_f64(self.bench.scale.clamp(0.2, 1.0));
        let timeout = timeout.max(Duration::from_secs(120));
        let mut last_drain = Instant::now();
        let mut settled_at = None;
        let mut end = Figures::default();
        while started.elapsed() < timeout {
            alive()?;
            let (nodes, pods) = match self.read().await {
                Ok(read) => read,
                Err(error) => {
                    tracing::debug!(%error, "reading the cluster failed; trying again");
                    tokio::time::sleep(POLL).await;
                    continue;
                }
            };
            end = figures(&nodes, &pods, self.prices);
            if end.draining > 0 {
                last_drain = Instant::now();
            }
            // Every live pod ready, and as many as the Deployments want.
            let live = pods
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            let running = end.ready_pods == expected && live == expected;
            let done = match step.kind {
                PhaseKind::ScaleOut => running,
                PhaseKind::Consolidation => running && last_drain.elapsed() >= self.bench.quiet,
                PhaseKind::Drift => {
                    let replaced = nodes.iter().all(|n| {
                        n.metadata
                            .name
                            .as_ref()
                            .is_none_or(|name| !old_nodes.contains(name))
                    });
                    running && replaced && last_drain.elapsed() >= self.bench.drift_quiet
                }
            };
            if done {
                settled_at = Some(started.elapsed());
                break;
            }
            tokio::time::sleep(POLL).await;
        }
        let after = snapshot(self.client, self.metrics_port).await;
        Ok(Phase {
            name: step.name,
            settled: settled_at.is_some(),
            time: settled_at.unwrap_or_else(|| started.elapsed()),
            figures: end,
            evicted: delta(&before.apiserver, &after.apiserver, |k| {
                k[0] == "create" && k[1] == "pods" && k[2] == "eviction" && k[3].starts_with('2')
            }),
            rss_p95: 0,
            cpu_cores: 0.0,
            requests: by_verb_and_resource(&before.apiserver, &after.apiserver),
            controller_requests: after
                .controller
                .iter()
                .map(|(k, v)| {
                    let was = before.controller.get(k).copied().unwrap_or(0.0);
                    (k[0].clone(), (v - was).max(0.0) as u64)
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
            bounds: step.bounds,
            pods: expected as u32,
        })
    }
}

fn delta(
    before: &BTreeMap<Vec<String>, f64>,
    after: &BTreeMap<Vec<String>, f64>,
    wanted: impl Fn(&[String]) -> bool,
) -> u64 {
    after
        .iter()
        .filter(|(k, _)| wanted(k))
        .map(|(k, v)| (v - before.get(k).copied().unwrap_or(0.0)).max(0.0))
        .sum::<f64>() as u64
}

fn by_verb_and_resource(
    before: &BTreeMap<Vec<String>, f64>,
    after: &BTreeMap<Vec<String>, f64>,
) -> BTreeMap<(String, String), u64> {
    let mut out = BTreeMap::new();
    for (k, v) in after {
        let n = (v - before.get(k).copied().unwrap_or(0.0)).max(0.0) as u64;
        if n == 0 {
            continue;
        }
        let resource = if k[2].is_empty() {
            k[1].clone()
        } else {
            format!("{}/{}", k[1], k[2])
        };
        *out.entry((k[0].clone(), resource)).or_default() += n;
    }
    out
}

/// Deletes the Deployments and the NodePool and gives the nodes a minute to go.
async fn cleanup(client: &kube::Client) {
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    if let Ok(list) = deployments.list(&ListParams::default()).await {
        for d in list.items {
            if let Some(name) = d.metadata.name {
                let _ = deployments.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
    let _ = dynamic(client, "karpenter.sh", "NodePool")
        .delete(POOL, &DeleteParams::default())
        .await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let nodes = Api::<Node>::all(client.clone())
            .list(&ListParams::default().labels(karpenter_core::vocab::labels::NODEPOOL))
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if nodes == 0 {
            break;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn check(value: bool) -> &'static str {
    if value { "ok" } else { "OVER" }
}

/// The report: a table of the phases, then each phase's requests.
pub fn report(case: Case, scale: f64, phases: &[Phase]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "bench cluster --case {} --scale {scale}",
        clap::ValueEnum::to_possible_value(&case)
            .map_or_else(String::new, |v| v.get_name().to_owned())
    );
    let _ = writeln!(
        out,
        "{:<14} {:>6} {:>9} {:>6} {:>10} {:>6} {:>6} {:>8} {:>9} {:>6}",
        "phase", "pods", "time s", "nodes", "$/h", "cpu %", "mem %", "evicted", "P95 MB", "cores"
    );
    for p in phases {
        let _ = writeln!(
            out,
            "{:<14} {:>6} {:>9.1} {:>6} {:>10.2} {:>6.1} {:>6.1} {:>8} {:>9.1} {:>6.3}{}",
            p.name,
            p.pods,
            p.time.as_secs_f64(),
            p.figures.nodes,
            p.figures.cost,
            p.figures.cpu * 100.0,
            p.figures.memory * 100.0,
            p.evicted,
            p.rss_p95 as f64 / 1e6,
            p.cpu_cores,
            if p.settled { "" } else { "  (did not settle)" },
        );
    }
    for p in phases {
        let b = p.bounds;
        let mut judged = Vec::new();
        if let Some(t) = b.time {
            judged.push(format!("time < {} s: {}", t.as_secs(), check(p.time < t)));
        }
        if let Some(n) = b.nodes {
            judged.push(format!("nodes < {n}: {}", check(p.figures.nodes < n)));
        }
        if let Some(c) = b.cpu {
            judged.push(format!(
                "cpu > {:.0} %: {}",
                c * 100.0,
                check(p.figures.cpu > c)
            ));
        }
        if let Some(m) = b.memory {
            judged.push(format!(
                "mem > {:.0} %: {}",
                m * 100.0,
                check(p.figures.memory > m)
            ));
        }
        let _ = writeln!(
            out,
            "{} upstream bounds: {}",
            p.name,
            if judged.is_empty() {
                "none".to_owned()
            } else {
                judged.join(", ")
            }
        );
        let requests: Vec<String> = p
            .requests
            .iter()
            .map(|((verb, resource), n)| format!("{verb} {resource} {n}"))
            .collect();
        let _ = writeln!(
            out,
            "{} API requests (every client): {}",
            p.name,
            requests.join(", ")
        );
        let own: Vec<String> = p
            .controller_requests
            .iter()
            .map(|(m, n)| format!("{m} {n}"))
            .collect();
        let _ = writeln!(out, "{} controller requests: {}", p.name, own.join(", "));
    }
    out
}
