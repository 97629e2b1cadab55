//! End to end on an EC2 API: the example emulator scenario runs through the real actors with
//! the AWS provider against moto (started on 127.0.0.1 by the test): instances launched with
//! CreateFleet, a spot interruption sent as an EventBridge message to the SQS queue, the
//! interrupted node drained and replaced, a leaked instance garbage-collected, and nothing
//! left running afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use karpenter_actors::actor::Settings;
use karpenter_actors::actor::messages::GcSettings;
use karpenter_aws::config::Clients;
use karpenter_aws::testing::{
    FaultProxy, Fixture, Moto, RandomFault, ami_lookup, connection, create_queue, instance_states,
    launch_template_names, launch_unowned_instance, settings,
};
use karpenter_core::events::{ClusterView, DomainEvent, MessageOutcome};
use karpenter_journal::{Journal, Until};
use karpenter_rs::progress::Progress;
use karpenter_rs::sim::run::{CloudChoice, RunOptions, run};
use karpenter_rs::sim::scenario::parse;
use karpenter_rs::system::aws::AwsSetup;

#[path = "aws/reservations.rs"]
mod reservations;

const SCENARIO: &str = include_str!("../deploy/scenarios/emulator.yaml");

/// A run of the emulator scenario on the EC2 API at `endpoint`, with the emulator not
/// prepared by the run (a test prepares it, or checks what happens when nobody did).
fn options(dir: &Path, scope: &str, endpoint: &str, queue: Option<&str>) -> RunOptions {
    RunOptions {
        journal_dir: dir.to_path_buf(),
        progress: Progress::Off,
        settings: Settings::default(),
        scope: scope.into(),
        admin: None,
        pace: None,
        resume: false,
        measure: false,
        gc: GcSettings::default(),
        cloud: CloudChoice::Aws(Box::new(AwsSetup {
            connection: connection(endpoint),
            settings: settings("demo"),
            cluster: karpenter_aws::testing::known_cluster("demo"),
            interruption_queue: queue.map(str::to_owned),
            prepare_emulator: false,
            isolated_vpc: false,
        })),
    }
}

/// Real-shaped junk for the interruption queue: truncated events, wrong types, unknown
/// kinds, huge values, and well-formed notices about instances no NodeClaim owns. Returns
/// the bodies and how many of them are well-formed notices (about unowned instances).
fn junk_corpus() -> (Vec<String>, usize) {
    let spot = r#"{"version":"0","id":"7","detail-type":"EC2 Spot Instance Interruption Warning","source":"aws.ec2","account":"123456789012","time":"2026-11-22T10:00:00Z","region":"us-west-2","resources":[],"detail":{"instance-id":"i-0fffffffffffffff0","instance-action":"terminate"}}"#;
    let event = |source: &str, detail_type: &str, detail: &str| {
        format!(
            r#"{{"version":"0","id":"8","detail-type":"{detail_type}","source":"{source}","account":"123456789012","time":"2026-11-22T10:00:00Z","region":"us-west-2","resources":[],"detail":{detail}}}"#
        )
    };
    let mut junk: Vec<String> = Vec::new();
    // Truncated anywhere.
    for cut in [
        1,
        17,
        60,
        120,
        spot.len() / 2,
        spot.len() - 2,
        spot.len() - 1,
    ] {
        junk.push(spot[..cut].to_owned());
    }
    // Not JSON, or JSON of the wrong shape.
    for body in [
        " ",
        "garbage",
        "null",
        "[]",
        "42",
        r#""a string""#,
        "{}",
        r#"{"detail-type":5,"source":[]}"#,
        "\u{feff}{\"version\":\"0\"}",
    ] {
        junk.push(body.to_owned());
    }
    // Right kind, wrong types or missing fields.
    let warning = "EC2 Spot Instance Interruption Warning";
    junk.push(event("aws.ec2", warning, r#""not an object""#));
    junk.push(event("aws.ec2", warning, r#"{"instance-id":42}"#));
    junk.push(event(
        "aws.ec2",
        warning,
        r#"{"instance-action":"terminate"}"#,
    ));
    junk.push(event(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        r#"{"instance-id":"i-0fffffffffffffff1"}"#,
    ));
    junk.push(event(
        "aws.health",
        "AWS Health Event",
        r#"{"service":"EC2","eventTypeCategory":"scheduledChange"}"#,
    ));
    junk.push(event("aws.health", "AWS Health Event", r#"{"service":"EC2","eventTypeCategory":"scheduledChange","affectedEntities":[{"entityValue":"vol-1"}]}"#));
    // Kinds this queue should not receive, and kinds that ask for nothing.
    junk.push(event("aws.ec2", "EC2 Instance Launch Successful", "{}"));
    junk.push(event(
        "aws.autoscaling",
        "EC2 Instance-terminate Lifecycle Action",
        "{}",
    ));
    junk.push(event(
        "aws.health",
        "AWS Health Event",
        r#"{"service":"RDS","eventTypeCategory":"scheduledChange"}"#,
    ));
    junk.push(event(
        "aws.ec2",
        "EC2 Instance State-change Notification",
        r#"{"instance-id":"i-0fffffffffffffff2","state":"pending"}"#,
    ));
    // Huge values (SQS takes bodies up to 256 KiB).
    junk.push(event(
        "aws.ec2",
        warning,
        &format!(r#"{{"instance-id":"i-{}"}}"#, "f".repeat(200_000)),
    ));
    junk.push(format!(
        r#"{{"version":"0","padding":"{}"}}"#,
        "x".repeat(250_000)
    ));
    junk.push(format!("{}{}", "[".repeat(10_000), "]".repeat(10_000)));
    // Well-formed notices about instances nobody owns: counted, not acted on.
    let unowned = [
        spot.to_owned(),
        event(
            "aws.ec2",
            "EC2 Instance Rebalance Recommendation",
            r#"{"instance-id":"i-0fffffffffffffff3"}"#,
        ),
        event(
            "aws.ec2",
            "EC2 Instance State-change Notification",
            r#"{"instance-id":"i-0fffffffffffffff4","state":"stopping"}"#,
        ),
    ];
    let notices = unowned.len();
    junk.extend(unowned);
    (junk, notices)
}

#[test]
fn emulator_scenario_launches_interrupts_replaces_and_cleans_up() {
    let setup = tokio::runtime::Runtime::new().unwrap();
    // A server of its own: this binary's tests run side by side.
    let moto = Moto::start();
    moto.reset();
    let clients = setup.block_on(Clients::connect(&connection(&moto.endpoint())));
    let (junk, unowned_notices) = junk_corpus();
    let (fixture, leaked) = setup.block_on(async {
        let fixture = Fixture::create_with(&clients, "demo", &ami_lookup())
            .await
            .unwrap();
        let queue = create_queue(&clients, "demo-interruptions").await.unwrap();
        for body in &junk {
            clients
                .sqs
                .send_message()
                .queue_url(&queue)
                .message_body(body)
                .send()
                .await
                .unwrap();
        }
        let leaked = launch_unowned_instance(&clients, &fixture, "ghost-nodeclaim")
            .await
            .unwrap();
        (fixture, leaked)
    });

    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SCENARIO, "emulator.yaml").unwrap();
    let options = RunOptions {
        gc: GcSettings {
            interval: Duration::from_secs(10),
            grace: Duration::ZERO,
        },
        ..options(
            dir.path(),
            "aws-e2e",
            &moto.endpoint(),
            Some("demo-interruptions"),
        )
    };
    let report = run(&scenario, &options).unwrap();
    assert!(
        report.actor_failures.is_empty(),
        "{:?}",
        report.actor_failures
    );
    assert_eq!(report.leaked_instances, 0);
    assert_eq!(report.pods_pending, 0, "{report:?}");
    assert_eq!(report.pods_bound, 8);
    assert!(
        report.nodeclaims_launched >= 3,
        "two nodes, then a replacement: {report:?}"
    );
    // The one real notice is acted on; each junk message is counted and deleted, never
    // acted on.
    let i = &report.interruptions;
    assert_eq!(i.received, 1 + junk.len() as u64, "{i:?}");
    assert_eq!(i.delivered, 1, "{i:?}");
    assert_eq!(i.unowned, unowned_notices as u64, "{i:?}");
    assert_eq!(i.messages_deleted, 1 + junk.len() as u64, "{i:?}");
    assert_eq!(
        i.messages_malformed,
        (junk.len() - unowned_notices) as u64 - 2,
        "all but the two that ask for nothing: {i:?}"
    );

    // Every instance is gone: the leaked one collected, the run's own terminated at its end.
    let states = setup
        .block_on(instance_states(&clients, &fixture.cluster))
        .unwrap();
    assert!(states.len() >= 4, "{states:?}");
    for (id, state) in &states {
        assert!(
            state == "terminated" || state == "shutting-down",
            "{id} is {state}"
        );
    }

    // So are the launch templates the run created.
    let templates = setup
        .block_on(launch_template_names(&clients, &fixture.cluster))
        .unwrap();
    assert!(templates.is_empty(), "{templates:?}");

    // The journal tells the story.
    let journal = Journal::<DomainEvent>::open(dir.path()).unwrap();
    let events: Vec<DomainEvent> = journal.read_from(0).map(|e| e.unwrap().event).collect();
    assert!(events.iter().any(|e| matches!(
        e,
        DomainEvent::InstanceGarbageCollected { instance_id, nodeclaim, .. }
            if instance_id == &leaked && nodeclaim == "ghost-nodeclaim"
    )));
    let message = events.iter().position(|e| matches!(
        e,
        DomainEvent::InterruptionMessage { outcome: MessageOutcome::Notice, queue, .. } if queue == "demo-interruptions"
    ));
    let draining = events.iter().position(|e| {
        matches!(
            e,
            DomainEvent::NodeClaimDraining { reason, .. } if reason == "spot_interrupted"
        )
    });
    assert!(
        message.is_some() && message < draining,
        "the message is journaled before it is acted on"
    );
    let mut outcomes = std::collections::BTreeMap::new();
    let mut ids = std::collections::BTreeSet::new();
    for event in &events {
        if let DomainEvent::InterruptionMessage {
            outcome,
            message_id,
            ..
        } = event
        {
            *outcomes.entry(format!("{outcome:?}")).or_insert(0) += 1;
            ids.insert(message_id.clone());
        }
    }
    assert_eq!(ids.len(), 1 + junk.len(), "every message journaled once");
    assert_eq!(
        outcomes.get("Notice"),
        Some(&(1 + unowned_notices)),
        "{outcomes:?}"
    );
    assert_eq!(outcomes.get("Ignored"), Some(&2), "{outcomes:?}");
    let drained: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, DomainEvent::NodeClaimDraining { reason, .. } if reason.contains("interrupt") || reason.contains("stopp") || reason.contains("rebalance")))
        .collect();
    assert_eq!(drained.len(), 1, "only the real notice drains: {drained:?}");
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    assert!(view.pending.is_empty(), "{:?}", view.pending);
    drop(journal);
    // Nothing is left in the queue.
    let left = setup.block_on(async {
        let url = create_queue(&clients, "demo-interruptions").await.unwrap();
        clients
            .sqs
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap()
            .messages()
            .len()
    });
    assert_eq!(left, 0, "every message was deleted");
    let _ = setup;
}

/// A bare emulator (no VPC, subnets or AMI parameters) without `--prepare-emulator`: the
/// run stops at once, naming the selector that matched nothing and the fix, instead of
/// waiting out its length unable to launch.
#[test]
fn a_bare_emulator_is_refused_at_once_with_the_fix() {
    let setup = tokio::runtime::Runtime::new().unwrap();
    // A server of its own: this binary's tests run side by side.
    let moto = Moto::start();
    moto.reset();
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SCENARIO, "emulator.yaml").unwrap();
    let error = run(
        &scenario,
        &options(dir.path(), "bare", &moto.endpoint(), None),
    )
    .expect_err("nothing can launch on a bare emulator");
    let text = format!("{error:#}");
    for part in [
        "EC2NodeClass default cannot launch anything",
        "SubnetsReady is False (SubnetsNotFound: SubnetSelector did not match any Subnets)",
        "add --prepare-emulator",
    ] {
        assert!(text.contains(part), "{part:?} missing in: {text}");
    }
    let clients = setup.block_on(Clients::connect(&connection(&moto.endpoint())));
    let states = setup.block_on(instance_states(&clients, "demo")).unwrap();
    assert!(states.is_empty(), "{states:?}");
}

/// Campaign: random cloud faults (insufficient capacity, throttling, 5xx, dropped and slow
/// connections) on every EC2/SSM/SQS call, through the fault-injecting proxy in front of moto,
/// while the emulator scenario runs, and new instances listed without their NodeClaim tag or
/// launch time (eventual consistency) for longer than the garbage collector's grace period.
/// Every pod ends bound, no instance is left running or collected, no actor fails.
/// Rates from `KARPENTER_CHAOS_FAULT_RATES` (default `0.2`; `scripts/chaos.sh --full` gives
/// `0.05,0.2,0.5`); prints one figure line per rate.
#[test]
fn random_cloud_faults_lose_and_leak_nothing() {
    let rates: Vec<f64> = std::env::var("KARPENTER_CHAOS_FAULT_RATES")
        .unwrap_or_else(|_| "0.2".into())
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .expect("KARPENTER_CHAOS_FAULT_RATES: numbers like 0.05,0.2")
        })
        .collect();
    let setup = tokio::runtime::Runtime::new().unwrap();
    // A server of its own: this binary's tests run side by side.
    let moto = Moto::start();
    // The scenario with a minute more at the end: retries take time.
    let text = SCENARIO.replace("duration: 90s", "duration: 150s");
    assert_ne!(text, SCENARIO);
    let scenario = parse(&text, "emulator.yaml").unwrap();
    for (i, rate) in rates.into_iter().enumerate() {
        moto.reset();
        let clients = setup.block_on(Clients::connect(&connection(&moto.endpoint())));
        let fixture = setup.block_on(async {
            let fixture = Fixture::create_with(&clients, "demo", &ami_lookup())
                .await
                .unwrap();
            create_queue(&clients, "demo-interruptions").await.unwrap();
            fixture
        });
        let proxy = setup.block_on(FaultProxy::start(moto.addr()));
        proxy.random(rate, 1 + i as u64);
        // New instances are listed without their NodeClaim tag or launch time for longer
        // than the collector's grace period, while it passes every 2 s.
        proxy.stale_listings(Duration::from_secs(15));
        let dir = tempfile::tempdir().unwrap();
        let options = RunOptions {
            gc: GcSettings {
                interval: Duration::from_secs(2),
                grace: Duration::from_secs(3),
            },
            ..options(
                dir.path(),
                &format!("aws-faults-{i}"),
                &proxy.endpoint(),
                Some("demo-interruptions"),
            )
        };
        let report = run(&scenario, &options).unwrap();
        let injected = proxy.random_injected();
        let calls = proxy.total_hits();
        let stale = proxy.shown_stale();
        drop(proxy);
        // Every instance of the run was its NodeClaims': the collector took none of them.
        let journal = Journal::<DomainEvent>::open(dir.path()).unwrap();
        let collected: Vec<String> = journal
            .read_from(0)
            .map(|e| e.unwrap().event)
            .filter_map(|e| match e {
                DomainEvent::InstanceGarbageCollected { instance_id, .. } => Some(instance_id),
                _ => None,
            })
            .collect();
        drop(journal);
        assert!(stale > 0, "instances were listed stale at {rate}");
        assert!(collected.is_empty(), "at {rate}: collected {collected:?}");
        let states = setup
            .block_on(instance_states(&clients, &fixture.cluster))
            .unwrap();
        let running = states
            .values()
            .filter(|s| *s == "running" || *s == "pending")
            .count();
        println!(
            "cloud faults at {:.0} %: {} faults injected ({injected:?}) over {calls} EC2/SSM/SQS calls, {stale} instances listed stale; {} failed attempts and {} retries in the metrics; pods {} bound, {} pending; {} NodeClaims launched; {running} of {} instances left running, {} leaked at the end; {} actor failures",
            rate * 100.0,
            injected.values().sum::<usize>(),
            report.cloud_retries.1,
            report.cloud_retries.0,
            report.pods_bound,
            report.pods_pending,
            report.nodeclaims_launched,
            states.len(),
            report.leaked_instances,
            report.actor_failures.len(),
        );
        assert!(
            report.actor_failures.is_empty(),
            "{:?}",
            report.actor_failures
        );
        assert_eq!(
            report.pods_pending, 0,
            "at {rate}: pending {:?}; {report:?}",
            report.unschedulable
        );
        assert_eq!(report.leaked_instances, 0, "at {rate}");
        assert_eq!(running, 0, "at {rate}: {states:?}");
        if rate >= 0.2 {
            assert!(!injected.is_empty(), "faults were injected at {rate}");
        }
        // Throttling, 5xx and dropped connections fail an attempt each, which the SDK backs
        // off from and retries; the metrics show both.
        let failing: usize = injected
            .iter()
            .filter(|(fault, _)| {
                matches!(
                    fault,
                    RandomFault::Throttled | RandomFault::ServerError | RandomFault::Dropped
                )
            })
            .map(|(_, n)| n)
            .sum();
        assert!(
            report.cloud_retries.1 >= failing as u64,
            "{failing} failing faults injected, {:?} in the metrics",
            report.cloud_retries
        );
        if failing > 0 {
            assert!(report.cloud_retries.0 > 0, "{:?}", report.cloud_retries);
        }
    }
}
