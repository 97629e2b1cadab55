//! End to end: a small scenario through the real actors on the simulated cloud and cluster,
//! checked against the report and against a replay of the journal it wrote.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;

use karpenter_actors::actor::Settings;
use karpenter_core::events::{ClusterView, DomainEvent, NodeClaimState, RoundRecord};
use karpenter_journal::{Journal, Until};
use karpenter_rs::progress::Progress;
use karpenter_rs::sim::run::{RunOptions, run};
use karpenter_rs::sim::scenario::{BUILT_IN, parse};

#[path = "simulate/buffers.rs"]
mod buffers;
#[path = "simulate/disruption.rs"]
mod disruption;
#[path = "simulate/offerings.rs"]
mod offerings;

const SMALL: &str = r#"
name: small
duration: 30m
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {name: default}
  spec:
    role: r
    amiSelectorTerms: [{alias: al2023@latest}]
    subnetSelectorTerms: [{tags: {k: v}}]
    securityGroupSelectorTerms: [{tags: {k: v}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {name: default}
  spec:
    template:
      spec:
        nodeClassRef: {group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}
        requirements:
          - {key: karpenter.sh/capacity-type, operator: In, values: [spot, on-demand]}
          - {key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["9"]}
    limits: {cpu: "1000", nodes: "200"}
daemonsets:
  - {name: agent, cpu: 100m, memory: 128Mi, tolerations: ["*"]}
deployments:
  - {name: web, cpu: 500m, memory: 1Gi, replicas: 6, labels: {app: web}, maxUnavailable: 2}
shortages:
  - {capacityType: spot, instanceType: m7g.2xlarge, from: 0s, until: 30m}
timeline:
  - {at: 1m, scale: {deployment: web, replicas: 40}}
  - {at: 5m, job: {name: too-big, cpu: "64", memory: 1Gi, replicas: 1, runFor: 1m}}
  - {at: 10m, interrupt: {nodepool: default, count: 1}}
"#;

fn options(dir: &std::path::Path, scope: &str) -> RunOptions {
    RunOptions {
        journal_dir: dir.to_path_buf(),
        progress: Progress::Off,
        settings: Settings::default(),
        scope: scope.into(),
        admin: None,
        pace: None,
        resume: false,
        cloud: Default::default(),
        measure: false,
        gc: Default::default(),
    }
}

#[test]
fn a_small_scenario_places_every_placeable_pod_and_the_journal_agrees() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SMALL, "small").unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-small")).unwrap();

    assert_eq!(report.pods_bound, 40, "{report:#?}");
    assert_eq!(
        report.pods_pending, 1,
        "the 64-CPU job pod fits no allowed type"
    );
    let reason = report.unschedulable.values().next().unwrap();
    assert!(
        reason.contains("nodepool \"default\"") && reason.contains("insufficient cpu"),
        "{reason}"
    );
    assert_eq!(report.leaked_instances, 0);
    assert!(
        report.actor_failures.is_empty(),
        "{:?}",
        report.actor_failures
    );
    assert_eq!(report.interruptions.received, 1);
    assert_eq!(report.interruptions.delivered, 1);
    assert!(report.nodeclaims_terminated >= 1);
    assert!(
        report
            .nodes
            .iter()
            .all(|g| g.instance_type != "m7g.2xlarge" || g.capacity_type != "spot"),
        "the shortage was honoured"
    );
    assert!(
        report.pending_p50 >= 60.0,
        "boot (40s) + ready (20s) come before binding: {}",
        report.pending_p50
    );

    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    let live: Vec<_> = view.live_nodeclaims().collect();
    assert_eq!(
        live.len(),
        report.node_count,
        "replay and report disagree on nodes"
    );
    assert!(
        (view.cost_per_hour() - report.cost_per_hour).abs() < 1e-6,
        "replay ${} vs report ${}",
        view.cost_per_hour(),
        report.cost_per_hour
    );
    assert!(
        live.iter()
            .all(|(_, c)| c.state == NodeClaimState::Initialized)
    );
    let interrupted: Vec<_> = view
        .nodeclaims
        .values()
        .filter(|c| {
            c.ended.as_deref() == Some("spot_interrupted")
                || c.ended.as_deref().is_some_and(|e| e.contains("reclaimed"))
        })
        .collect();
    assert_eq!(interrupted.len(), 1, "{:#?}", view.nodeclaims);
    assert_eq!(view.bound.len(), 40);
    // The job pod that fits nowhere is planned again every 10 s while it waits (25 minutes);
    // retries while nothing changed repeat an earlier round's input and decide as it did.
    let rounds: Vec<RoundRecord> = journal
        .read_from(0)
        .filter_map(|e| match e.unwrap().event {
            DomainEvent::RoundCompleted(r) => Some(*r),
            _ => None,
        })
        .collect();
    let retried = rounds
        .iter()
        .filter(|r| {
            r.unschedulable
                .iter()
                .any(|(_, why)| why.contains("insufficient cpu"))
        })
        .count();
    assert!(retried >= 140, "{retried} rounds saw the job pod");
    let repeats: Vec<&RoundRecord> = rounds.iter().filter(|r| r.repeats.is_some()).collect();
    assert!(repeats.len() >= 100, "{} repeats", repeats.len());
    for repeat in repeats {
        assert!(repeat.input.is_none());
        let of = rounds
            .iter()
            .find(|r| Some(r.round) == repeat.repeats)
            .unwrap();
        assert!(of.input.is_some() && of.repeats.is_none());
        assert_eq!(
            (&of.bindings, &of.unschedulable),
            (&repeat.bindings, &repeat.unschedulable)
        );
    }
    // Every launch was preceded by its write-ahead intent.
    for (name, claim) in &view.nodeclaims {
        if claim.instance.is_some() {
            let events: Vec<String> = journal
                .by_entity("NodeClaim", name)
                .map(|e| e.unwrap().event_type)
                .collect();
            let intent = events
                .iter()
                .position(|t| t == "LaunchRequested")
                .expect("intent recorded");
            let launched = events
                .iter()
                .position(|t| t == "NodeClaimLaunched")
                .expect("launch recorded");
            assert!(intent < launched, "{name}: {events:?}");
        }
    }
}

/// The simulated cluster lives in the process that runs the autoscaler, but a real cluster
/// outlives its autoscaler: a resumed run puts every pod back where the journal last saw it.
/// Resuming a run that had reached its last second used to start every pod pending again,
/// with a second left to place them (the kill campaign found it).
#[test]
fn a_resumed_run_finds_its_pods_where_they_ran() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SMALL, "small").unwrap();
    let first = run(&scenario, &options(dir.path(), "e2e-resume-1")).unwrap();
    assert_eq!((first.pods_bound, first.pods_pending), (40, 1));
    let replay = || {
        let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
        journal.replay::<ClusterView>(Until::End).unwrap().state
    };
    let before = replay();
    assert_eq!(before.names.len(), 41, "every pod's name is journaled");

    let mut again = options(dir.path(), "e2e-resume-2");
    again.resume = true;
    let resumed = run(&scenario, &again).unwrap();
    assert_eq!(
        (resumed.pods_bound, resumed.pods_pending),
        (40, 1),
        "{:#?}",
        resumed.unschedulable
    );
    assert_eq!(resumed.node_count, first.node_count);
    assert_eq!(resumed.leaked_instances, 0);
    let after = replay();
    assert_eq!(after.bound, before.bound, "the same pods on the same nodes");
    assert_eq!(
        after.pending, before.pending,
        "the job pod that fits nowhere"
    );
    assert_eq!(
        after.nodeclaims.len(),
        before.nodeclaims.len(),
        "nothing launched"
    );
}

/// A node restored on resume carries what its registration had laid on it: its NodePool's
/// taint keeps pods that do not tolerate it off it, as before the restart (the kill
/// campaign saw web pods fill a restored GPU node, which then could not be drained).
#[test]
fn a_restored_node_keeps_its_nodepools_taint() {
    let scenario_until = |duration: &str, web_replicas: &str| {
        format!(
            r#"
name: taints
duration: {duration}
manifests: |
  apiVersion: karpenter.k8s.aws/v1
  kind: EC2NodeClass
  metadata: {{name: default}}
  spec:
    role: r
    amiSelectorTerms: [{{alias: al2023@latest}}]
    subnetSelectorTerms: [{{tags: {{k: v}}}}]
    securityGroupSelectorTerms: [{{tags: {{k: v}}}}]
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {{name: general}}
  spec:
    template:
      spec:
        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
        requirements:
          - {{key: karpenter.k8s.aws/instance-cpu, operator: Lt, values: ["9"]}}
  ---
  apiVersion: karpenter.sh/v1
  kind: NodePool
  metadata: {{name: dedicated}}
  spec:
    weight: 10
    template:
      spec:
        nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
        taints:
          - {{key: dedicated, value: batch, effect: NoSchedule}}
        requirements:
          - {{key: karpenter.k8s.aws/instance-cpu, operator: In, values: ["16"]}}
deployments:
  - {{name: batch, cpu: 500m, memory: 1Gi, replicas: 2, tolerations: [dedicated]}}
  - {{name: web, cpu: 500m, memory: 1Gi, replicas: 2}}
timeline:
  - {{at: 5m, scale: {{deployment: web, replicas: {web_replicas}}}}}
"#
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let first = parse(&scenario_until("10m", "2"), "taints").unwrap();
    run(&first, &options(dir.path(), "e2e-taints-1")).unwrap();
    let longer = parse(&scenario_until("30m", "12"), "taints").unwrap();
    let mut again = options(dir.path(), "e2e-taints-2");
    again.resume = true;
    let resumed = run(&longer, &again).unwrap();
    assert_eq!(resumed.pods_pending, 0, "{:#?}", resumed.unschedulable);

    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    let dedicated: Vec<&str> = view
        .nodeclaims
        .values()
        .filter(|c| c.nodepool == "dedicated")
        .filter_map(|c| c.node.as_deref())
        .collect();
    assert!(!dedicated.is_empty(), "{:#?}", view.nodeclaims);
    for (uid, node) in &view.bound {
        let name = view.names.get(uid).map_or("?", String::as_str);
        if name.starts_with("default/web-") {
            assert!(
                !dedicated.contains(&node.as_str()),
                "{name} runs on the dedicated node {node}"
            );
        }
    }
    assert_eq!(view.bound.len(), 14, "{:?}", view.bound);
}

#[test]
fn the_built_in_scenario_runs_clean() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(BUILT_IN, "built-in").unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-builtin")).unwrap();
    assert_eq!(report.pods_pending, 0, "{:#?}", report.unschedulable);
    assert_eq!(report.leaked_instances, 0);
    assert!(
        report.actor_failures.is_empty(),
        "{:?}",
        report.actor_failures
    );
    assert_eq!(report.interruptions.delivered, 1);
    // Nodes leave as they arrived: the batch and GPU nodes are gone once empty, the hour
    // ends near what the pods left need, and every kind of disruption happened.
    let peak = report
        .samples
        .iter()
        .map(|s| s.cost_per_hour)
        .fold(0.0, f64::max);
    assert!(peak > 9.0, "the batch and GPU work was provisioned: {peak}");
    assert!(
        report.cost_per_hour <= 1.50,
        "ends at ${:.2}/h",
        report.cost_per_hour
    );
    assert!(
        report
            .nodes
            .iter()
            .all(|g| !g.instance_type.starts_with('g')),
        "the GPU node is gone: {:?}",
        report.nodes
    );
    let d = &report.disruptions;
    for reason in ["empty", "drifted", "expired", "deleted", "spot_interrupted"] {
        assert!(d.by_reason.contains_key(reason), "{reason}: {d:?}");
    }
    assert_eq!(d.protected_evictions, 0, "{d:?}");
    assert_eq!(d.stale_marks, 0, "{d:?}");
    assert!(
        d.blocked_events > 0,
        "the training pods held their node: {d:?}"
    );
    // No node stays empty longer than consolidateAfter (30 s at most) plus a pass (10 s).
    assert!(d.longest_empty_seconds <= 41.0, "{d:?}");
    assert_eq!(d.outcomes.get("Abandoned"), None, "{d:?}");
}

/// `GET path` on 127.0.0.1:`port` with a bearer token, returning status code and body.
fn get(port: u16, path: &str, token: Option<&str>) -> Option<(u16, String)> {
    let authorization = token.map(|t| format!("Bearer {t}"));
    request(port, path, authorization.as_deref()).map(|(status, _, body)| (status, body))
}

/// `GET path` on 127.0.0.1:`port` with this `Authorization` value, returning status code,
/// header lines (lower-cased) and body.
fn request(port: u16, path: &str, authorization: Option<&str>) -> Option<(u16, String, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1)?.parse().ok()?;
    let (head, body) = response.split_once("\r\n\r\n").unwrap_or((&response, ""));
    Some((status, head.to_ascii_lowercase(), body.to_owned()))
}

#[test]
fn the_admin_endpoint_shows_live_state_while_the_simulation_runs() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(SMALL, "small").unwrap();
    let mut opts = options(dir.path(), "e2e-admin");
    opts.admin = Some(karpenter_rs::admin::AdminOptions {
        addr: ([127, 0, 0, 1], port).into(),
        token: Some("s3cret".into()),
    });
    // 30 simulated minutes at 60× take 30 s: time to look even when the machine is busy
    // (the checks below outlasted a 6 s run beside five other test binaries on two cores).
    opts.pace = Some(60.0);
    let runner = std::thread::spawn(move || run(&scenario, &opts));

    let mut claims = String::new();
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(50));
        if let Some((200, body)) = get(port, "/nodeclaims", Some("s3cret"))
            && body.contains("\"state\":\"Initialized\"")
        {
            claims = body;
            break;
        }
    }
    assert!(
        claims.contains("\"nodepool\":\"default\""),
        "no live NodeClaims seen: {claims}"
    );
    assert_eq!(get(port, "/healthz", None).map(|r| r.0), Some(200));
    // Every route but /healthz wants the exact token; a refusal shows no state.
    for path in [
        "/",
        "/admin.js",
        "/admin.css",
        "/favicon.ico",
        "/explain/nodeclaim/nope",
        "/rounds/1/cost",
        "/actors",
        "/nodepools",
        "/nodeclaims",
        "/nodeclaims/nope",
        "/scheduler",
        "/disruption",
        "/journal?since=1",
        "/keeper",
        "/overlays",
        "/metrics",
        "/readyz",
    ] {
        for token in [
            None,
            Some(""),
            Some("s3cre"),
            Some("s3cret2"),
            Some("S3CRET"),
        ] {
            let (status, body) = get(port, path, token).unwrap();
            assert_eq!(status, 401, "{path} with {token:?}");
            assert_eq!(body, REFUSED, "{path} with {token:?}");
        }
        check_basic_authentication(port, path);
    }
    check_page(port);
    check_explanations(port);
    let metrics = check_metrics(port);
    assert!(
        metrics.contains("# TYPE karpenter_scheduler_scheduling_duration_seconds histogram"),
        "{metrics}"
    );
    assert!(metrics.trim_end().ends_with("# EOF"));
    for line in metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let value = line.rsplit(' ').next().unwrap();
        assert!(value.parse::<f64>().is_ok(), "not a sample line: {line}");
    }
    let (_, scheduler) = get(port, "/scheduler", Some("s3cret")).unwrap();
    assert!(scheduler.contains("\"rounds\":"), "{scheduler}");
    let (_, journal) = get(port, "/journal?since=1&limit=3", Some("s3cret")).unwrap();
    assert!(journal.starts_with("[{\"seq\":1,"), "{journal}");
    let (status, keeper) = get(port, "/keeper", Some("s3cret")).unwrap();
    assert_eq!(status, 200);
    assert!(
        keeper.contains("\"snapshots\":") && keeper.contains("\"removed_events\":"),
        "{keeper}"
    );
    let (status, overlays) = get(port, "/overlays", Some("s3cret")).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        overlays, r#"{"enabled":false,"repriced":{},"resized":{},"conflicts":[]}"#,
        "the built-in run reads no overlays"
    );
    let (status, refused) = get(port, "/journal?since=abc", Some("s3cret")).unwrap();
    assert_eq!(status, 400);
    assert!(
        refused.contains("since: \"abc\" is not a sequence number"),
        "{refused}"
    );
    assert_eq!(
        get(port, "/nodeclaims/nope", Some("s3cret")).map(|r| r.0),
        Some(404)
    );

    let report = runner.join().unwrap().unwrap();
    assert_eq!(report.leaked_instances, 0);
    assert!(
        get(port, "/healthz", None).is_none(),
        "the endpoint stops with the run"
    );
}

/// The metrics upstream's dashboards query, as the running simulation exports them: per-node
/// series with the node's pool, capacity type and zone, what its pods and DaemonSet pods
/// request, the pool's limits, nodes created, and how long cloud calls took.
fn check_metrics(port: u16) -> String {
    let mut metrics = String::new();
    for _ in 0..100 {
        let (status, body) = get(port, "/metrics", Some("s3cret")).unwrap();
        assert_eq!(status, 200);
        metrics = body;
        if metrics.contains("karpenter_nodes_total_daemon_requests{") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    for expected in [
        "karpenter_nodeclaims_created_total{nodepool=\"default\"}",
        "karpenter_nodes_created_total{nodepool=\"default\"}",
        "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"cpu\"} 1000",
        "karpenter_nodepools_limit{nodepool=\"default\",resource_type=\"nodes\"} 200",
        "karpenter_cloudprovider_duration_seconds_count{controller=\"nodeclaim.lifecycle\",method=\"Create\",provider=\"simulated\"}",
        "karpenter_cloudprovider_duration_seconds_count{controller=\"provisioner\",method=\"GetInstanceTypes\",provider=\"simulated\"}",
    ] {
        assert!(metrics.contains(expected), "no {expected} in\n{metrics}");
    }
    // Each node's DaemonSet pod asks 100m of it; the web pods ask the rest.
    let daemon: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            l.starts_with("karpenter_nodes_total_daemon_requests{")
                && l.contains("resource_type=\"cpu\"")
        })
        .collect();
    assert!(!daemon.is_empty(), "{metrics}");
    for line in &daemon {
        assert!(
            line.contains("nodepool=\"default\"")
                && line.contains("zone=\"us-")
                && (line.contains("capacity_type=\"spot\"")
                    || line.contains("capacity_type=\"on-demand\""))
                && line.ends_with(" 0.1"),
            "{line}"
        );
    }
    let requested = metrics
        .lines()
        .filter(|l| {
            l.starts_with("karpenter_nodes_total_pod_requests{")
                && l.contains("resource_type=\"cpu\"")
        })
        .count();
    assert_eq!(requested, daemon.len(), "{metrics}");
    metrics
}

/// What every refusal says, whatever was asked.
const REFUSED: &str = "missing or wrong token: send `Authorization: Bearer TOKEN`, or in a browser give the token as the password\n";

/// A browser's Basic credentials carry the token as the password: refused with a challenge
/// unless the password is exactly the token, whatever the user name.
fn check_basic_authentication(port: u16, path: &str) {
    use base64::Engine as _;
    let basic = |credentials: &str| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(credentials)
        )
    };
    for credentials in [
        "admin:s3cre",
        "admin:",
        "s3cret:",
        "admin:s3cret ",
        "s3cret",
    ] {
        let (status, head, body) = request(port, path, Some(&basic(credentials))).unwrap();
        assert_eq!(status, 401, "{path} with Basic {credentials:?}");
        assert!(
            head.contains("www-authenticate: basic realm=\"karpenter-rs admin\""),
            "{path}: {head}"
        );
        assert_eq!(body, REFUSED);
    }
    for user in ["admin", "", "anyone"] {
        let (status, _, _) = request(port, path, Some(&basic(&format!("{user}:s3cret")))).unwrap();
        assert_ne!(status, 401, "{path} with user {user:?}");
    }
}

/// The page and its assets are served from the binary, load nothing from elsewhere, and say so
/// in their Content-Security-Policy.
fn check_page(port: u16) {
    let (status, head, page) = request(port, "/", Some("Bearer s3cret")).unwrap();
    assert_eq!(status, 200);
    assert!(head.contains("content-type: text/html"), "{head}");
    assert!(
        head.contains("content-security-policy: default-src 'self'"),
        "{head}"
    );
    assert!(page.contains("<title>karpenter-rs admin</title>"), "{page}");
    for asset in ["admin.js", "admin.css", "favicon.ico"] {
        assert!(
            page.contains(&format!("\"{asset}\"")),
            "the page loads {asset}"
        );
    }
    for path in ["/", "/admin.js", "/admin.css", "/favicon.ico"] {
        let (status, _, body) = request(port, path, Some("Bearer s3cret")).unwrap();
        assert_eq!(status, 200, "{path}");
        // The SVG namespace is a name, not an address anything is fetched from.
        let body = body.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !body.contains("http://") && !body.contains("https://") && !body.contains("//cdn"),
            "{path} refers to another origin"
        );
    }
}

/// Explanations and round costs read from the live journal, and the latest journal events.
fn check_explanations(port: u16) {
    let json = |path: &str| -> serde_json::Value {
        let (status, body) = get(port, path, Some("s3cret")).unwrap();
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let claims = json("/nodeclaims");
    // One a scheduling round planned (not a disruption command's replacement), now running.
    let first = claims
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["round"].as_u64().is_some_and(|r| r >= 1) && c["state"] == "Initialized")
        .unwrap_or_else(|| panic!("no NodeClaim of a round is Initialized: {claims}"));
    let name = first["name"].as_str().unwrap();
    assert!(
        first["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Launched" && c["status"] == "True"),
        "{first}"
    );
    let (status, text) = get(
        port,
        &format!("/explain/nodeclaim/{name}?format=text"),
        Some("s3cret"),
    )
    .unwrap();
    assert_eq!(status, 200);
    assert!(text.starts_with(&format!("nodeclaim/{name}\n")), "{text}");
    assert!(text.contains(" planned by round "), "{text}");
    assert!(text.contains("cloud launched i-"), "{text}");
    let explained = json(&format!("/explain/nodeclaim/{name}"));
    assert_eq!(explained["nodeclaim"], name);
    assert_eq!(
        explained["lines"].as_array().unwrap().len(),
        text.lines().count()
    );
    let events = explained["events"].as_array().unwrap();
    assert!(events.iter().any(|e| e["event_type"] == "NodeClaimPlanned"));
    assert!(
        events
            .iter()
            .all(|e| e["entity"] == format!("NodeClaim/{name}").as_str())
    );
    for (path, status) in [
        ("/explain/nodeclaim/nope".to_owned(), 404),
        (format!("/explain/nodeclaim/{name}?format=xml"), 400),
        ("/rounds/abc/cost".to_owned(), 400),
        ("/rounds/999999/cost".to_owned(), 404),
    ] {
        assert_eq!(
            get(port, &path, Some("s3cret")).unwrap().0,
            status,
            "{path}"
        );
    }
    let round = json("/scheduler")["last_planning_round"].as_u64().unwrap();
    let cost = json(&format!("/rounds/{round}/cost"));
    assert_eq!(cost["round"].as_u64(), Some(round));
    let (cost, bound) = (
        cost["cost"].as_f64().unwrap(),
        cost["bound"].as_f64().unwrap(),
    );
    assert!(cost > 0.0 && bound <= cost + 1e-9, "{cost} against {bound}");
    let latest = json("/journal?last=3");
    let seqs: Vec<u64> = latest
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs.len(), 3);
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    assert!(seqs[0] > 1, "the latest events, not the first: {seqs:?}");
}

#[test]
fn an_interrupted_node_is_drained_and_replaced_without_stranding_pods() {
    // Regression: a cordoned node's NodeClaim was counted as capacity still on its way, so
    // evicted pods were nominated to it and stayed pending.
    let dir = tempfile::tempdir().unwrap();
    let scenario = parse(
        include_str!("../deploy/scenarios/emulator.yaml"),
        "emulator.yaml",
    )
    .unwrap();
    let report = run(&scenario, &options(dir.path(), "interrupt-replace")).unwrap();
    assert_eq!(report.interruptions.delivered, 1);
    assert_eq!(report.pods_pending, 0, "{report:?}");
    assert_eq!(report.pods_bound, 8);
    assert_eq!(
        report.nodeclaims_terminated, 1,
        "the interrupted node went away"
    );
    assert!(report.nodeclaims_launched >= 3);
}

#[test]
fn pods_binding_one_host_port_are_planned_and_bound_on_separate_nodes() {
    let manifests = SMALL
        .split("daemonsets:")
        .next()
        .unwrap()
        .replace("name: small", "name: host-ports");
    let scenario = parse(
        &format!(
            "{manifests}deployments:\n  - {{name: web, cpu: 500m, memory: 1Gi, replicas: 6, labels: {{app: web}}}}\n  - {{name: ingress, cpu: 100m, memory: 128Mi, replicas: 4, labels: {{app: ingress}}, hostPorts: [443]}}\n"
        ),
        "host-ports",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-host-ports")).unwrap();
    assert_eq!(report.pods_bound, 10, "{report:#?}");
    assert_eq!(report.pods_pending, 0, "{report:#?}");

    let journal: Journal<DomainEvent> = Journal::open(dir.path()).unwrap();
    let mut binding_443 = std::collections::BTreeSet::new();
    let mut planned = Vec::new();
    for envelope in journal.read_from(0) {
        match envelope.unwrap().event {
            DomainEvent::RoundCompleted(round) => {
                for pod in round.input.iter().flat_map(|i| &i.pods) {
                    if !pod.host_ports.is_empty() {
                        binding_443.insert(pod.uid.clone());
                    }
                }
            }
            DomainEvent::NodeClaimPlanned(plan) => planned.push(plan.pods),
            _ => {}
        }
    }
    assert_eq!(binding_443.len(), 4);
    for pods in &planned {
        let sharing = pods.iter().filter(|p| binding_443.contains(*p)).count();
        assert!(
            sharing <= 1,
            "{pods:?} plans {sharing} pods binding 443 on one node"
        );
    }
    let view = journal.replay::<ClusterView>(Until::End).unwrap().state;
    let nodes: std::collections::BTreeSet<&String> = binding_443
        .iter()
        .filter_map(|uid| view.bound.get(uid))
        .collect();
    assert_eq!(nodes.len(), 4, "{:?}", view.bound);
}

#[test]
fn a_pod_needing_a_daemonsets_host_port_gets_no_node_and_nothing_is_launched_for_it() {
    let manifests = SMALL
        .split("daemonsets:")
        .next()
        .unwrap()
        .replace("name: small", "name: daemonset-ports")
        .replace("duration: 30m", "duration: 10m");
    let scenario = parse(
        &format!(
            "{manifests}daemonsets:\n  - {{name: proxy, cpu: 100m, memory: 128Mi, tolerations: [\"*\"], hostPorts: [8080]}}\n  - {{name: arm-agent, cpu: \"2\", memory: 128Mi, nodeSelector: {{kubernetes.io/arch: arm64}}, hostPorts: [9090]}}\ndeployments:\n  - {{name: web, cpu: 500m, memory: 1Gi, replicas: 2, labels: {{app: web}}}}\n  - {{name: clash, cpu: 100m, memory: 128Mi, replicas: 1, labels: {{app: clash}}, hostPorts: [8080]}}\n"
        ),
        "daemonset-ports",
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let report = run(&scenario, &options(dir.path(), "e2e-daemonset-ports")).unwrap();
    assert_eq!(report.pods_bound, 2, "{report:#?}");
    assert_eq!(report.pods_pending, 1, "{report:#?}");
    let reason = report.unschedulable.values().next().unwrap();
    assert!(reason.contains("host port 8080/TCP"), "{reason}");
    assert_eq!(
        report.nodeclaims_launched, 1,
        "one node for web, none for the pod whose port the proxy holds: {report:#?}"
    );
}
