//! End to end on an EC2 API: the example emulator scenario runs through the real actors with
//! the AWS provider against moto (started on 127.0.0.1 by the test): instances launched with
//! CreateFleet, a spot interruption sent as an EventBridge message to the SQS queue, the
//! interrupted node drained and replaced, a leaked instance garbage-collected, and nothing
//! left running afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use karpenter_actors::actor::Settings;
use karpenter_actors::actor::messages::GcSettings;
use karpenter_aws::config::Clients;
use karpenter_aws::testing::{
    FaultProxy, Fixture, Moto, ami_lookup, connection, create_queue, instance_states,
    launch_template_names, launch_unowned_instance, settings,
};
use karpenter_core::events::{ClusterView, DomainEvent, MessageOutcome};
use karpenter_journal::{Journal, Until};
use karpenter_rs::sim::run::{CloudChoice, RunOptions, run};
use karpenter_rs::sim::scenario::parse;
use karpenter_rs::system::aws::AwsSetup;

const SCENARIO: &str = include_str!("../deploy/scenarios/emulator.yaml");

#[test]
fn emulator_scenario_launches_interrupts_replaces_and_cleans_up() {
    let setup = tokio::runtime::Runtime::new().unwrap();
    let _exclusive = setup.block_on(Moto::exclusive());
    let moto = Moto::shared();
    moto.reset();
    let clients = setup.block_on(Clients::connect(&connection(&moto.endpoint())));
    let (fixture, leaked) = setup.block_on(async {
        let fixture = Fixture::create_with(&clients, "demo", &ami_lookup())
            .await
            .unwrap();
        create_queue(&clients, "demo-interruptions").await.unwrap();
        let leaked = launch_unowned_instance(&clients, &fixture, "ghost-nodeclaim")
            .await
            .unwrap();
        (fixture, leaked)
    });

    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SCENARIO, "emulator.yaml").unwrap();
    let options = RunOptions {
        journal_dir: dir.path().to_path_buf(),
        progress_every: None,
        settings: Settings::default(),
        scope: "aws-e2e".into(),
        admin: None,
        pace: None,
        resume: false,
        gc: GcSettings {
            interval: Duration::from_secs(10),
            grace: Duration::ZERO,
        },
        cloud: CloudChoice::Aws(Box::new(AwsSetup {
            connection: connection(&moto.endpoint()),
            settings: settings("demo"),
            interruption_queue: Some("demo-interruptions".into()),
            prepare_emulator: false,
        })),
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
    assert_eq!(report.interruptions.received, 1);
    assert_eq!(report.interruptions.delivered, 1);
    assert_eq!(report.interruptions.messages_deleted, 1);

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
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    assert!(view.pending.is_empty(), "{:?}", view.pending);
    drop(journal);
    let _ = setup;
}

/// Campaign: random cloud faults (insufficient capacity, throttling, 5xx, dropped and slow
/// connections) on every EC2/SSM/SQS call, through the fault-injecting proxy in front of moto,
/// while the emulator scenario runs. Every pod ends bound, no instance is left running, no
/// actor fails. Rates from `KARPENTER_CHAOS_FAULT_RATES` (default `0.2`; `scripts/chaos.sh
/// --full` gives `0.05,0.2,0.5`); prints one figure line per rate.
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
    let _exclusive = setup.block_on(Moto::exclusive());
    let moto = Moto::shared();
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
        let dir = tempfile::tempdir().unwrap();
        let options = RunOptions {
            journal_dir: dir.path().to_path_buf(),
            progress_every: None,
            settings: Settings::default(),
            scope: format!("aws-faults-{i}"),
            admin: None,
            pace: None,
            resume: false,
            gc: GcSettings::default(),
            cloud: CloudChoice::Aws(Box::new(AwsSetup {
                connection: connection(&proxy.endpoint()),
                settings: settings("demo"),
                interruption_queue: Some("demo-interruptions".into()),
                prepare_emulator: false,
            })),
        };
        let report = run(&scenario, &options).unwrap();
        let injected = proxy.random_injected();
        let calls = proxy.total_hits();
        drop(proxy);
        let states = setup
            .block_on(instance_states(&clients, &fixture.cluster))
            .unwrap();
        let running = states
            .values()
            .filter(|s| *s == "running" || *s == "pending")
            .count();
        println!(
            "cloud faults at {:.0} %: {} faults injected ({injected:?}) over {calls} EC2/SSM/SQS calls; pods {} bound, {} pending; {} NodeClaims launched; {running} of {} instances left running, {} leaked at the end; {} actor failures",
            rate * 100.0,
            injected.values().sum::<usize>(),
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
    }
}
