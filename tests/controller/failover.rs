//! Controller failover campaign: two `karpenter controller` processes (this package's binary)
//! elect a leader on the test API server and run on EC2 (moto), shipping their journal to a
//! bucket on moto's S3. While pods scale up or a NodeClaim drains, the leader is stopped at a
//! seeded random moment, in turn: SIGKILLed and restarted in place (same identity and
//! journal), SIGKILLed and replaced by a new replica with its journal directory deleted (a
//! pod and its disk gone), and stopped cleanly (SIGTERM) and replaced the same way; the
//! follower, or the restarted one, takes over. After each stop the cluster must settle:
//! every pod bound, every NodeClaim object with a running instance, every running instance
//! with a NodeClaim object, one live leader; and no NodeClaim ever gets two instances.
//!
//! At the end the stored history is one unbroken sequence that `journal verify` re-decides,
//! and each deleted journal is in it: record for record up to where the next leader took
//! over, all of it after a clean stop (a SIGKILL loses at most the records not shipped yet,
//! counted in the figures).
//!
//! `KARPENTER_CHAOS_FAILOVER_KILLS` (3 here; `scripts/chaos.sh --full` asks for 21) and
//! `KARPENTER_CHAOS_SEED` (1) shape it; it prints one figure line.
//!
//! `standins` plays the rest of the cluster (ReplicaSet, kube-scheduler, the kubelets).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use karpenter_aws::config::Clients;
use karpenter_aws::testing::instance_claims;
use kube::api::{DeleteParams, ListParams};

use super::standins::{Player, busiest_claim, pending, web_budget};
use super::{Harness, condition, lease_holder};

/// How long the cluster has to settle after a kill.
const SETTLE: Duration = Duration::from_secs(180);

/// A `karpenter controller` process.
pub(super) struct Replica {
    pub(super) identity: String,
    pub(super) journal: PathBuf,
    pub(super) log: PathBuf,
    /// Its `--metrics-port`.
    pub(super) metrics_port: u16,
    child: Child,
}

impl Replica {
    /// Stops it as Kubernetes stops a pod (SIGTERM) and waits up to `grace` for it to exit
    /// (then SIGKILLs it, as the kubelet does). Whether it exited on its own, with success.
    pub(super) fn terminate(mut self, grace: Duration) -> bool {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .is_ok_and(|s| s.success());
        let deadline = Instant::now() + grace;
        while sent && Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(Some(status)) => return status.success(),
                Ok(None) => std::thread::sleep(Duration::from_millis(100)),
                Err(_) => break,
            }
        }
        false
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What every replica is started with.
pub(super) struct Launcher {
    pub(super) kubeconfig: PathBuf,
    pub(super) endpoint: String,
    pub(super) dir: PathBuf,
    /// More arguments for `karpenter controller`.
    pub(super) extra: Vec<String>,
}

impl Launcher {
    /// Replicas on `h`'s API server and the AWS `endpoint`, keeping their files in `dir` and
    /// shipping their journal to `bucket` (BUCKET/PREFIX) every two seconds.
    pub(super) fn shipping(h: &Harness, endpoint: &str, dir: &Path, bucket: &str) -> Launcher {
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, h.server.kubeconfig()).unwrap();
        Launcher {
            kubeconfig,
            endpoint: endpoint.to_owned(),
            dir: dir.to_owned(),
            extra: ["--journal-bucket", bucket, "--journal-ship-interval", "2s"]
                .into_iter()
                .map(String::from)
                .collect(),
        }
    }

    pub(super) fn start(&self, identity: &str, journal: &Path) -> Replica {
        let log = self.dir.join(format!("{identity}.log"));
        let metrics_port = karpenter_aws::testing::free_port();
        let out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_karpenter"))
            .args(["--log-level", "info", "controller", "--kubeconfig"])
            .arg(&self.kubeconfig)
            .args(["--cloud", "aws", "--aws-endpoint", &self.endpoint])
            .args(["--aws-region", "us-west-2", "--cluster-name", "test"])
            .args(["--interruption-queue", "test-interruptions"])
            .args([
                "--ssm-parameter-prefix",
                karpenter_aws::emulator::SSM_PREFIX,
            ])
            .args([
                "--kubernetes-version",
                karpenter_aws::emulator::KUBERNETES_VERSION,
            ])
            .arg("--journal")
            .arg(journal)
            .args(["--metrics-port", &metrics_port.to_string()])
            .args([
                "--health-probe-port",
                &karpenter_aws::testing::free_port().to_string(),
            ])
            .args(["--leader-election-namespace", "kube-system"])
            .args(&self.extra)
            .env("POD_NAME", identity)
            .env("AWS_ACCESS_KEY_ID", "testing")
            .env("AWS_SECRET_ACCESS_KEY", "testing")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("the karpenter binary starts");
        Replica {
            identity: identity.to_owned(),
            journal: journal.to_owned(),
            log,
            metrics_port,
            child,
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn running(state: &str) -> bool {
    matches!(state, "pending" | "running")
}

/// What keeps the cluster from being settled, counted: NodeClaims without a running instance,
/// running instances without a NodeClaim object, pods not bound, and other reasons.
#[derive(Default, Debug)]
pub(super) struct Unsettled {
    claims_without_instance: usize,
    instances_without_claim: usize,
    pods_pending: usize,
    other: Vec<String>,
}

impl Unsettled {
    pub(super) fn settled(&self) -> bool {
        self.claims_without_instance == 0
            && self.instances_without_claim == 0
            && self.pods_pending == 0
            && self.other.is_empty()
    }
}

pub(super) async fn unsettled(
    h: &Harness,
    clients: &Clients,
    wanted: usize,
    live: &[&str],
) -> Unsettled {
    let mut u = Unsettled::default();
    let claims = h
        .nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items;
    let nodes = h.nodes().list(&Default::default()).await.unwrap().items;
    let pods = h
        .pods()
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items;
    let instances = instance_claims(clients, "test").await.unwrap();
    let running_claims: BTreeSet<&str> = instances
        .values()
        .filter(|(state, _)| running(state))
        .map(|(_, claim)| claim.as_str())
        .collect();
    let names: BTreeSet<&str> = claims
        .iter()
        .filter_map(|c| c.metadata.name.as_deref())
        .collect();
    for claim in &claims {
        let name = claim.metadata.name.as_deref().unwrap_or_default();
        if !running_claims.contains(name) {
            u.claims_without_instance += 1;
        }
        if claim.metadata.deletion_timestamp.is_some() {
            u.other
                .push(format!("NodeClaim {name} still being deleted"));
        } else if condition(claim, "Initialized").as_deref() != Some("True") {
            u.other.push(format!("NodeClaim {name} not initialized"));
        }
    }
    u.instances_without_claim = running_claims
        .iter()
        .filter(|c| !names.contains(*c))
        .count();
    u.pods_pending = pending(&nodes, &pods);
    if pods.len() != wanted {
        u.other
            .push(format!("{} pods, {wanted} wanted", pods.len()));
    }
    match lease_holder(&h.client).await {
        Some(holder) if live.contains(&holder.as_str()) => {}
        holder => u.other.push(format!(
            "the Lease is held by {holder:?}, not a live replica"
        )),
    }
    u
}

pub(super) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_leader_during_scale_ups_and_drains_loses_and_leaks_nothing() {
    use karpenter_aws::testing::Moto;
    let kills = env_number("KARPENTER_CHAOS_FAILOVER_KILLS", 3);
    let seed = env_number("KARPENTER_CHAOS_SEED", 1);
    let mut rng = fastrand::Rng::with_seed(seed);

    let (_lock, clients, fixture) = super::moto_for_test_cluster().await;
    let moto = Moto::shared();
    karpenter_aws::testing::create_bucket(
        &karpenter_aws::testing::connection(&moto.endpoint()),
        "journals",
    )
    .await
    .unwrap();
    let class = serde_json::to_value(fixture.node_class("default")).unwrap();
    let h = Arc::new(Harness::start_with_class(class).await);
    web_budget(&h.client, 2).await;

    let dir = tempfile::tempdir().unwrap();
    let launcher = Launcher::shipping(&h, &moto.endpoint(), dir.path(), "journals/failover");
    let mut started = 0;
    let mut replicas: Vec<Replica> = Vec::new();
    for _ in 0..2 {
        started += 1;
        let identity = format!("karpenter-{started}");
        let journal = dir.path().join(format!("journal-{identity}"));
        replicas.push(launcher.start(&identity, &journal));
    }

    // The cluster stand-ins run beside the campaign.
    let player = Player::start(h.clone(), 4);
    let wanted = player.wanted.clone();

    let live = |replicas: &[Replica]| -> Vec<String> {
        replicas.iter().map(|r| r.identity.clone()).collect()
    };
    let settle = |wanted: usize, live: Vec<String>| {
        let (h, clients) = (&*h, &clients);
        async move {
            let deadline = Instant::now() + SETTLE;
            loop {
                let names: Vec<&str> = live.iter().map(String::as_str).collect();
                let u = unsettled(h, clients, wanted, &names).await;
                if u.settled() || Instant::now() > deadline {
                    return u;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };

    // Before the first kill: four pods on launched nodes.
    let first = settle(4, live(&replicas)).await;
    assert!(
        first.settled(),
        "the cluster never settled before any kill: {first:?}"
    );

    let mut not_settled = 0;
    let (mut claims_without_instance, mut instances_without_claim, mut pods_pending) = (0, 0, 0);
    let mut during = BTreeMap::<&str, usize>::new();
    let mut settle_times = Vec::new();
    let (mut in_place, mut fresh, mut clean) = (0, 0, 0);
    // The journals of stopped leaders whose disk was deleted, as `journal tail` printed them,
    // and whether the stop was clean.
    let mut deleted: Vec<(Vec<String>, bool)> = Vec::new();
    for k in 0..kills {
        // Odd kills land during a drain, even ones during a scale-up.
        let phase = if k % 2 == 1 { "drain" } else { "scale-up" };
        let now_wanted = if phase == "drain" {
            let claim = busiest_claim(&h.client)
                .await
                .expect("a NodeClaim running pods");
            h.nodeclaims()
                .delete(&claim, &DeleteParams::default())
                .await
                .unwrap();
            wanted.load(Ordering::SeqCst)
        } else {
            // Up by 3 to 5 pods, back to 4 after 16.
            let next = wanted.load(Ordering::SeqCst) + 3 + rng.usize(0..3);
            let next = if next > 16 { 4 } else { next };
            wanted.store(next, Ordering::SeqCst);
            next
        };
        tokio::time::sleep(Duration::from_millis(rng.u64(0..8_000))).await;
        let Some(holder) = lease_holder(&h.client).await else {
            panic!("no leader before kill {k}");
        };
        let Some(at) = replicas.iter().position(|r| r.identity == holder) else {
            panic!("the Lease is held by {holder}, which is not running");
        };
        let stopped = replicas.remove(at);
        let (identity, journal) = (stopped.identity.clone(), stopped.journal.clone());
        let mode = k % 3;
        if mode == 2 {
            clean += 1;
            let exited =
                tokio::task::spawn_blocking(move || stopped.terminate(Duration::from_secs(60)))
                    .await
                    .unwrap();
            assert!(exited, "{identity} did not stop cleanly on SIGTERM");
        } else {
            drop(stopped); // SIGKILL
        }
        let killed_at = Instant::now();
        *during.entry(phase).or_default() += 1;
        if mode == 0 {
            // Its pod restarts in place (same name, same journal).
            in_place += 1;
            replicas.push(launcher.start(&identity, &journal));
        } else {
            // The pod and its disk are gone; a new replica starts with an empty directory.
            fresh += 1;
            let lines = tokio::task::block_in_place(|| {
                journal_lines(&moto.endpoint(), &journal.display().to_string())
            });
            deleted.push((lines, mode == 2));
            std::fs::remove_dir_all(&journal).unwrap();
            started += 1;
            let identity = format!("karpenter-{started}");
            let journal = dir.path().join(format!("journal-{identity}"));
            replicas.push(launcher.start(&identity, &journal));
        }
        let u = settle(now_wanted, live(&replicas)).await;
        if u.settled() {
            settle_times.push(killed_at.elapsed());
        } else {
            not_settled += 1;
            claims_without_instance += u.claims_without_instance;
            instances_without_claim += u.instances_without_claim;
            pods_pending += u.pods_pending;
            eprintln!("kill {k} ({phase}) did not settle in {SETTLE:?}: {u:?}");
            for r in &replicas {
                eprintln!("--- {} ---\n{}", r.identity, tail(&r.log, 30));
            }
        }
    }
    player.stop().await;
    // The last leader stops cleanly, so the store ends where its journal does.
    for replica in std::mem::take(&mut replicas) {
        let identity = replica.identity.clone();
        let exited =
            tokio::task::spawn_blocking(move || replica.terminate(Duration::from_secs(60)))
                .await
                .unwrap();
        assert!(exited, "{identity} did not stop cleanly on SIGTERM");
    }
    let history = tokio::task::block_in_place(|| History::read(&moto.endpoint()));
    let mut unshipped = 0;
    for (lines, was_clean) in &deleted {
        let (held, lost) = history.holds(lines);
        assert!(
            held > 0,
            "a deleted journal left nothing in the stored history"
        );
        assert!(
            !was_clean || lost == 0,
            "{lost} records of a cleanly stopped leader are not in the stored history"
        );
        // A killed leader loses at most what it journaled after its last upload.
        let at = |line: &String| {
            let time = line.split_whitespace().nth(1)?;
            time.parse::<jiff::Timestamp>().ok()
        };
        if let (Some(last_held), Some(last)) = (at(&lines[held - 1]), lines.last().and_then(at)) {
            let span = last.duration_since(last_held).as_secs();
            assert!(
                span <= 15,
                "a killed leader's records of {span} s before it died are not in the stored history (it ships every 2 s)"
            );
        }
        unshipped += lost;
    }

    // One instance per NodeClaim, over the whole campaign.
    let mut per_claim = BTreeMap::<String, usize>::new();
    for (_, claim) in instance_claims(&clients, "test")
        .await
        .unwrap()
        .into_values()
    {
        *per_claim.entry(claim).or_default() += 1;
    }
    let doubled = per_claim
        .iter()
        .filter(|(c, n)| !c.is_empty() && **n > 1)
        .count();
    settle_times.sort();
    let p50 = settle_times
        .get(settle_times.len() / 2)
        .map_or(0.0, Duration::as_secs_f64);
    let max = settle_times.last().map_or(0.0, Duration::as_secs_f64);
    println!(
        "controller failover: {kills} stops of the leader ({} during scale-ups, {} during drains; {in_place} killed and restarted in place, {} killed and {clean} stopped cleanly, each replaced by a new replica with its disk deleted) (seed {seed}): {not_settled} not settled, {claims_without_instance} NodeClaims without an instance, {instances_without_claim} instances without a NodeClaim, {pods_pending} pods pending, {doubled} NodeClaims launched twice; settled {p50:.1} s (median), {max:.1} s (max) after a stop; stored history {} records over {} takeovers, verified, every deleted journal in it ({unshipped} records of killed leaders not yet shipped, 0 of cleanly stopped ones)",
        during.get("scale-up").unwrap_or(&0),
        during.get("drain").unwrap_or(&0),
        fresh - clean,
        history.lines.len(),
        history.takeovers(),
    );
    assert_eq!(not_settled, 0, "see the lines above");
    assert_eq!(doubled, 0, "{per_claim:?}");
    if let Ok(h) = Arc::try_unwrap(h) {
        h.server.stop().await;
    }
}

/// `karpenter journal ARGS…` against moto: (exit success, stdout, stderr).
pub(super) fn journal_tool(endpoint: &str, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_karpenter"))
        .arg("journal")
        .args(args)
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_REGION", "us-west-2")
        .env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .output()
        .expect("the karpenter binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every record of a journal (a directory, or `s3://…` on `endpoint`), as `journal tail`
/// prints them.
fn journal_lines(endpoint: &str, journal: &str) -> Vec<String> {
    let (ok, out, err) = journal_tool(endpoint, &["tail", journal, "--since", "1"]);
    assert!(ok, "journal tail {journal}: {err}");
    out.lines().map(str::to_owned).collect()
}

const STORED: &str = "s3://journals/failover/test";

/// The stored history after the campaign, checked whole.
struct History {
    lines: Vec<String>,
}

impl History {
    /// Reads it, and checks it is one unbroken sequence from the first record that
    /// `journal verify` re-decides the same.
    fn read(endpoint: &str) -> History {
        let (ok, out, err) = journal_tool(endpoint, &["verify", STORED]);
        assert!(ok, "journal verify of the stored history:\n{out}\n{err}");
        let (ok, stats, err) = journal_tool(endpoint, &["stats", STORED]);
        assert!(ok, "{stats}\n{err}");
        let (events, first, last) = super::history::stats_range(&stats)
            .unwrap_or_else(|| panic!("journal stats said:\n{stats}"));
        assert_eq!((first, events), (1, last), "{stats}");
        History {
            lines: journal_lines(endpoint, STORED),
        }
    }

    /// How many of a journal's records, from its first, the history holds as they were, and
    /// how many after those it does not (records written after its last upload, before the
    /// next leader took over: the next leader's records of the same numbers differ).
    fn holds(&self, journal: &[String]) -> (usize, usize) {
        let seq = |line: &str| {
            line.split_whitespace()
                .next()
                .and_then(|s| s.parse::<usize>().ok())
        };
        let held = journal
            .iter()
            .take_while(|line| {
                seq(line)
                    .and_then(|n| self.lines.get(n.checked_sub(1)?))
                    .is_some_and(|stored| stored == *line)
            })
            .count();
        (held, journal.len() - held)
    }

    fn takeovers(&self) -> usize {
        self.lines
            .iter()
            .filter(|l| l.contains(" HistoryTakenOver "))
            .count()
    }
}
