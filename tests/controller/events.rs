//! Events as client-go records them, written to the API server: one seen again is counted
//! on the Event written (`series.count`), similar ones with ten distinct notes are combined,
//! and an object gets 25 before its rate limit drops the rest.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use karpenter_rs::kube::events::Publisher;
use karpenter_test_apiserver::ApiServer;
use kube::Api;
use kube::runtime::events::Reporter;

use super::{client, eventually};

fn pod(name: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some("default".into()),
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

/// The Events about pod `name`, as (note, series count) sorted.
async fn about(events: &Api<Event>, name: &str) -> Vec<(String, i32)> {
    let mut found: Vec<(String, i32)> = (events.list(&Default::default()).await)
        .map(|l| l.items)
        .unwrap_or_default()
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            let count = e.series.as_ref().map_or(1, |s| s.count);
            (e.note.unwrap_or_default(), count)
        })
        .collect();
    found.sort();
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_events_are_counted_combined_and_rate_limited_per_object() {
    let server = ApiServer::start().await.unwrap();
    let client = client(&server);
    let reporter = Reporter {
        controller: "karpenter".into(),
        instance: Some("test".into()),
    };
    let publisher = Publisher::start(client.clone(), reporter);
    for _ in 0..40 {
        publisher.record(
            pod("same"),
            false,
            "Nominated",
            "Pod should schedule on: nodeclaim/a",
        );
    }
    for i in 0..12 {
        let note = format!("Failed to schedule pod, no fit ({i})");
        publisher.record(pod("varied"), true, "FailedScheduling", &note);
    }
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    // 25 of the 40 are written (the rate limit), all on one Event.
    let same = eventually("the repeated Event counted to 25", 20, || async {
        let found = about(&events, "same").await;
        (found.iter().map(|(_, n)| *n).max() == Some(25)).then_some(found)
    })
    .await;
    assert_eq!(
        same,
        vec![("Pod should schedule on: nodeclaim/a".to_owned(), 25)]
    );
    // Nine distinct notes, then one combined Event counting the other three.
    let varied = eventually("the combined Event counted to 3", 20, || async {
        let found = about(&events, "varied").await;
        (found.len() == 10 && found.iter().any(|(_, n)| *n == 3)).then_some(found)
    })
    .await;
    let combined: Vec<&(String, i32)> = varied
        .iter()
        .filter(|(note, _)| note.starts_with("(combined from similar events): "))
        .collect();
    assert_eq!(combined.len(), 1, "{varied:?}");
    assert_eq!(combined[0].1, 3, "{varied:?}");
    let ev = (events.list(&Default::default()).await.unwrap()).items;
    assert!(
        ev.iter()
            .all(|e| e.reporting_controller.as_deref() == Some("karpenter")
                && e.type_.is_some()
                && e.event_time.is_some())
    );
    assert_eq!(
        ev.iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .count(),
        10
    );
    drop(publisher);
    server.stop().await;
}
