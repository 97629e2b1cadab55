//! S3 fault campaign: one `karpenter controller` on the test API server and EC2 (moto) ships
//! its journal through a fault-injecting proxy in front of moto's S3 (random throttling,
//! 5xx, dropped connections, late answers, torn uploads, lost answers, and an outage of the
//! bucket) while pods scale up and down. The controller is never held up: every scale-up
//! settles, during the outage too, while the upload lag grows; once the bucket is back the
//! lag falls, and after a clean stop the stored history equals the local journal record for
//! record (nothing lost, nothing twice, no torn object read as good) and `journal verify`
//! re-decides all of it.
//!
//! `KARPENTER_CHAOS_S3_FAULT_RATE` (0.2 here; `scripts/chaos.sh --full` asks for 0.05, 0.2
//! and 0.5) and `KARPENTER_CHAOS_SEED` (1) shape it; it prints one figure line.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use karpenter_aws::testing::{Moto, S3Fault, S3FaultProxy, connection, create_bucket};

use super::Harness;
use super::failover::{Launcher, tail, unsettled};
use super::history::{journal_tool, stats_range};
use super::standins::Player;
use super::watch_faults::env_or;

const HISTORY: &str = "s3://journals/faults/test";

/// The controller's metrics page, or an empty one when it does not answer.
fn metrics(port: u16) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut page = String::new();
    if stream.write_all(request.as_bytes()).is_err() || stream.read_to_string(&mut page).is_err() {
        return String::new();
    }
    page
}

/// The sum of a metric family's samples on a metrics page (0 when absent).
fn sample_sum(page: &str, family: &str) -> f64 {
    page.lines()
        .filter(|l| {
            l.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_faults_and_an_outage_block_nothing_and_lose_nothing() {
    let rate: f64 = env_or("KARPENTER_CHAOS_S3_FAULT_RATE", 0.2);
    let seed: u64 = env_or("KARPENTER_CHAOS_SEED", 1);
    let (_lock, clients, fixture) = super::moto_for_test_cluster().await;
    let moto = Moto::shared();
    create_bucket(&connection(&moto.endpoint()), "journals")
        .await
        .unwrap();
    let proxy = S3FaultProxy::start(moto.addr()).await;
    proxy.random(rate, seed);
    // At least one upload of each kind that tests the store's side, whatever the draw.
    proxy.next_put(S3Fault::TornPut);
    proxy.next_put(S3Fault::AnswerLost);

    let class = serde_json::to_value(fixture.node_class("default")).unwrap();
    let h = Arc::new(Harness::start_with_class(class).await);
    let dir = tempfile::tempdir().unwrap();
    let launcher = Launcher::shipping(&h, &proxy.endpoint(), dir.path(), "journals/faults");
    let journal = dir.path().join("journal-karpenter-1");
    let replica = launcher.start("karpenter-1", &journal);
    let port = replica.metrics_port;

    let player = Player::start(h.clone(), 4);
    let wanted = player.wanted.clone();
    // Scales to `pods` and waits for the cluster to settle; returns the highest upload lag
    // seen meanwhile.
    let scale = |pods: usize, what: &'static str| {
        let (h, clients, wanted, log) = (&*h, &clients, &wanted, &replica.log);
        async move {
            wanted.store(pods, Ordering::SeqCst);
            let deadline = Instant::now() + Duration::from_secs(180);
            let mut lag: f64 = 0.0;
            loop {
                lag = lag.max(sample_sum(
                    &metrics(port),
                    "karpenter_journal_upload_lag_seconds",
                ));
                let u = unsettled(h, clients, pods, &["karpenter-1"]).await;
                if u.settled() {
                    return lag;
                }
                if Instant::now() > deadline {
                    panic!("{what}: never settled: {u:?}\n{}", tail(log, 40));
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    };

    scale(4, "the first pods").await;
    scale(8, "a scale-up under S3 faults").await;
    // The bucket cannot be reached: the controller goes on, the lag grows.
    let outage = Instant::now();
    proxy.outage(true);
    let mut peak = scale(12, "a scale-up while the bucket is unreachable").await;
    while outage.elapsed() < Duration::from_secs(15) {
        peak = peak.max(sample_sum(
            &metrics(port),
            "karpenter_journal_upload_lag_seconds",
        ));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let outage_seconds = outage.elapsed().as_secs_f64();
    proxy.outage(false);
    assert!(
        peak >= 8.0,
        "the upload lag never showed the outage ({peak} s after {outage_seconds:.0} s)"
    );
    for (pods, what) in [
        (4, "a scale-down under S3 faults"),
        (10, "a second scale-up under S3 faults"),
        (6, "a second scale-down under S3 faults"),
    ] {
        peak = peak.max(scale(pods, what).await);
    }
    let injected = proxy.injected();
    proxy.clear();
    // With the bucket healthy again the history catches up.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = metrics(port);
        let lag = sample_sum(&page, "karpenter_journal_upload_lag_seconds");
        if page.contains("karpenter_journal_upload_lag_seconds") && lag < 5.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the upload lag stayed at {lag} s after the faults ended"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let failed_passes = sample_sum(&metrics(port), "karpenter_journal_upload_errors_total");
    player.stop().await;
    let log = replica.log.clone();
    let clean = tokio::task::spawn_blocking(move || replica.terminate(Duration::from_secs(60)))
        .await
        .unwrap();
    assert!(
        clean,
        "the controller did not stop cleanly:\n{}",
        tail(&log, 40)
    );

    // The stored history is the local journal, record for record.
    let endpoint = moto.endpoint();
    let local = journal.display().to_string();
    let (ok, mine, err) = journal_tool(&endpoint, &["tail", &local, "--since", "1"]).await;
    assert!(ok, "{err}");
    let (ok, stored, err) = journal_tool(&endpoint, &["tail", HISTORY, "--since", "1"]).await;
    assert!(ok, "reading the stored history: {err}");
    // Record for record, in order: nothing lost, nothing twice.
    assert_eq!(
        mine.lines().collect::<Vec<_>>(),
        stored.lines().collect::<Vec<_>>(),
        "the stored history differs from the local journal"
    );
    let (ok, out, err) = journal_tool(&endpoint, &["stats", HISTORY]).await;
    assert!(ok, "{out}\n{err}");
    let (events, first, last) =
        stats_range(&out).unwrap_or_else(|| panic!("journal stats said:\n{out}"));
    assert_eq!((first, events), (1, last), "{out}");
    let (ok, out, err) = journal_tool(&endpoint, &["verify", HISTORY]).await;
    assert!(ok, "journal verify of the stored history:\n{out}\n{err}");
    assert_eq!(proxy.torn_stored(), 0, "the store kept a torn upload");
    assert!(
        injected.get(&S3Fault::TornPut).is_some_and(|n| *n > 0)
            && injected.get(&S3Fault::AnswerLost).is_some_and(|n| *n > 0),
        "{injected:?}"
    );

    let hits = proxy.hits();
    let requests: usize = hits.values().sum();
    let kinds: BTreeMap<String, usize> = injected
        .iter()
        .map(|(k, n)| (format!("{k:?}"), *n))
        .collect();
    println!(
        "s3 faults at {rate} (seed {seed}): {requests} S3 requests ({} uploads), faults injected {kinds:?}, an outage of {outage_seconds:.0} s ({} requests dropped); {failed_passes} failed shipping passes, upload lag up to {peak:.1} s; stored history = local journal ({events} records): 0 lost, 0 twice, {} torn uploads kept; every scale-up settled",
        hits.get("PutObject").unwrap_or(&0),
        proxy.dropped_in_outage(),
        proxy.torn_stored(),
    );
    if let Ok(h) = Arc::try_unwrap(h) {
        h.server.stop().await;
    }
}
