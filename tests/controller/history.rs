//! The journal's history in S3 across a failover: two `karpenter controller` processes on the
//! test API server and EC2 (moto), shipping to a bucket on moto's S3. The leader is killed
//! and its journal directory deleted (its pod and disk gone); the other replica takes the
//! Lease and the stored history over, and disrupts a NodeClaim the first one launched. One
//! `karpenter journal explain --journal s3://…` tells the NodeClaim's whole life across the
//! seam, and `journal verify` re-decides every recorded decision of both leaders.

use std::sync::Arc;
use std::time::{Duration, Instant};

use karpenter_aws::testing::{Moto, connection, create_bucket};
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;

use super::failover::{Launcher, tail, unsettled};
use super::standins::Player;
use super::{Harness, lease_holder};

const HISTORY: &str = "s3://journals/clusters/test";

/// `karpenter journal ARGS…` on the stored history: (exit success, stdout, stderr).
pub(super) async fn journal_tool(endpoint: &str, args: &[&str]) -> (bool, String, String) {
    let endpoint = endpoint.to_owned();
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        super::failover::journal_tool(&endpoint, &args)
    })
    .await
    .unwrap()
}

/// The NodeClaims the API server holds.
async fn claim_names(h: &Harness) -> Vec<String> {
    h.nodeclaims()
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect()
}

/// `journal explain nodeclaim/NAME` on the stored history, asked until its answer holds
/// every one of `wanted` (the history is shipped every two seconds), within `seconds`.
async fn explained(endpoint: &str, claim: &str, wanted: &[&str], seconds: u64) -> String {
    let object = format!("nodeclaim/{claim}");
    let deadline = Instant::now() + Duration::from_secs(seconds);
    loop {
        let (ok, out, err) =
            journal_tool(endpoint, &["explain", &object, "--journal", HISTORY]).await;
        if ok && wanted.iter().all(|w| out.contains(w)) {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "the stored history never explained {object} with {wanted:?}:\n{out}\n{err}"
        );
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_continues_the_stored_history_and_explains_across_the_failover() {
    let (_lock, clients, fixture) = super::moto_for_test_cluster().await;
    let moto = Moto::shared();
    let endpoint = moto.endpoint();
    create_bucket(&connection(&endpoint), "journals")
        .await
        .unwrap();
    let class = serde_json::to_value(fixture.node_class("default")).unwrap();
    let h = Arc::new(Harness::start_with_class(class).await);
    // No PodDisruptionBudget: the test API server runs no PDB controller, and a PDB without
    // its status allows no eviction (as a real one does before its controller writes it).

    let dir = tempfile::tempdir().unwrap();
    let launcher = Launcher::shipping(&h, &endpoint, dir.path(), "journals/clusters");
    let start = |n: usize| {
        let identity = format!("karpenter-{n}");
        launcher.start(&identity, &dir.path().join(format!("journal-{identity}")))
    };
    let mut replicas = vec![start(1), start(2)];

    let player = Player::start(h.clone(), 4);
    let settle =
        |live: Vec<String>, logs: Vec<(String, std::path::PathBuf)>, what: &'static str| {
            let (h, clients) = (&*h, &clients);
            async move {
                let deadline = Instant::now() + Duration::from_secs(180);
                loop {
                    let names: Vec<&str> = live.iter().map(String::as_str).collect();
                    let u = unsettled(h, clients, 4, &names).await;
                    if u.settled() {
                        return;
                    }
                    if Instant::now() > deadline {
                        for (identity, log) in &logs {
                            eprintln!("--- {identity} ---\n{}", tail(log, 60));
                        }
                        panic!("{what}: never settled: {u:?}");
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }
        };
    let logs = |replicas: &[super::failover::Replica]| -> Vec<(String, std::path::PathBuf)> {
        (replicas.iter())
            .map(|r| (r.identity.clone(), r.log.clone()))
            .collect()
    };
    let live = |replicas: &[super::failover::Replica]| -> Vec<String> {
        replicas.iter().map(|r| r.identity.clone()).collect()
    };

    settle(live(&replicas), logs(&replicas), "before the failover").await;
    let claims = claim_names(&h).await;
    let claim = claims.first().expect("a NodeClaim").clone();
    // Its launch is in the bucket before the leader dies.
    explained(
        &endpoint,
        &claim,
        &["cloud launched", "node initialized"],
        60,
    )
    .await;

    // The leader's pod and its disk are gone; a new pod joins with an empty directory.
    let holder = lease_holder(&h.client).await.expect("a leader");
    let at = replicas
        .iter()
        .position(|r| r.identity == holder)
        .expect("the leader is one of the replicas");
    let killed = replicas.remove(at);
    let killed_journal = killed.journal.clone();
    drop(killed); // SIGKILL
    std::fs::remove_dir_all(&killed_journal).unwrap();
    replicas.push(start(3));

    // The next leader drifts every node the first one launched (a new template label).
    let deadline = Instant::now() + Duration::from_secs(60);
    let next = loop {
        match lease_holder(&h.client).await {
            Some(next) if next != holder => break next,
            _ => {}
        }
        assert!(Instant::now() < deadline, "no replica took the Lease over");
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let pools: Api<karpenter_core::api::NodePool> = Api::all(h.client.clone());
    let relabel = json!({"spec": {"template": {"metadata": {"labels": {"rev": "2"}}}}});
    pools
        .patch("general", &PatchParams::default(), &Patch::Merge(&relabel))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let now = claim_names(&h).await;
        if !now.iter().any(|c| claims.contains(c)) {
            break;
        }
        if Instant::now() > deadline {
            for r in &replicas {
                eprintln!("--- {} ---\n{}", r.identity, tail(&r.log, 40));
            }
            panic!("the drifted NodeClaims {claims:?} were not replaced: {now:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    settle(live(&replicas), logs(&replicas), "after the drift").await;
    player.stop().await;

    // One answer: launched by the first leader, the seam, disrupted by the next.
    let seam = format!("{next} took the journal's history over from {HISTORY}");
    let text = explained(&endpoint, &claim, &["terminated", &seam], 60).await;
    let position = |what: &str| {
        text.find(what)
            .unwrap_or_else(|| panic!("{what:?} is not in:\n{text}"))
    };
    assert!(
        position("cloud launched") < position(&seam) && position(&seam) < position("terminated"),
        "{text}"
    );
    assert!(
        text.contains("disrupted (drifted) by disruption command"),
        "{text}"
    );
    // Every recorded decision of both leaders is re-decided the same, across the seam.
    let (ok, out, err) = journal_tool(&endpoint, &["verify", HISTORY]).await;
    assert!(ok, "journal verify across the failover:\n{out}\n{err}");
    // The stored history is one unbroken sequence from the first record: every record once
    // (reading it refuses a gap or an overlap).
    let (ok, out, err) = journal_tool(&endpoint, &["stats", HISTORY]).await;
    assert!(ok, "{out}\n{err}");
    let (events, first, last) =
        stats_range(&out).unwrap_or_else(|| panic!("journal stats said:\n{out}"));
    assert_eq!((first, events), (1, last), "{out}");
    eprintln!("{text}\n{out}");
    drop(replicas);
    if let Ok(h) = Arc::try_unwrap(h) {
        h.server.stop().await;
    }
}

/// `(events, first seq, last seq)` from `journal stats`.
pub(super) fn stats_range(out: &str) -> Option<(u64, u64, u64)> {
    let line = out.lines().find(|l| l.starts_with("events: "))?;
    let (count, rest) = line["events: ".len()..].split_once(" (seq ")?;
    let (first, rest) = rest.split_once("..")?;
    let last = rest.split(',').next()?;
    Some((count.parse().ok()?, first.parse().ok()?, last.parse().ok()?))
}
