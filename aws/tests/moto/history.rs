//! The journal's history store on moto's S3: immutable objects, checked reads, listing from
//! a position, and S3's errors named as the settings they come from.

use karpenter_aws::history::{HistoryLocation, S3History};
use karpenter_core::ports::history::{HistoryError, HistoryStore, Stored};

use super::*;

async fn store(moto: &Moto, bucket: &str) -> S3History {
    store_at(&moto.endpoint(), bucket).await
}

async fn store_at(endpoint: &str, bucket: &str) -> S3History {
    let location = HistoryLocation::parse(&format!("s3://{bucket}/karpenter"))
        .unwrap()
        .for_cluster("c1");
    S3History::connect(&connection(endpoint), location).await
}

/// Moto to this test alone, emptied, with the bucket `journals`.
async fn journals_bucket(moto: &Moto) -> tokio::sync::MutexGuard<'static, ()> {
    let turn = Moto::exclusive().await;
    moto.reset();
    karpenter_aws::testing::create_bucket(&connection(&moto.endpoint()), "journals")
        .await
        .unwrap();
    turn
}

#[tokio::test]
async fn torn_uploads_are_refused_lost_answers_found_and_denials_named() {
    use karpenter_aws::testing::{S3Fault, S3FaultProxy};
    let moto = Moto::shared();
    let _turn = journals_bucket(moto).await;
    let proxy = S3FaultProxy::start(moto.addr()).await;
    let history = store_at(&proxy.endpoint(), "journals").await;
    let direct = store(moto, "journals").await;

    // Half the body arrives with the checksum of the whole: S3 keeps nothing.
    proxy.next_put(S3Fault::TornPut);
    let error = history
        .put_new("segments/torn", vec![7; 4096])
        .await
        .unwrap_err();
    // Nothing stored is wrong: an error to retry, not a damaged history.
    assert!(matches!(error, HistoryError::Unavailable { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("segments/torn arrived damaged (BadDigest"),
        "{error}"
    );
    assert_eq!(direct.get("segments/torn").await.unwrap(), None);
    assert_eq!(proxy.torn_stored(), 0);

    // The object is stored and the answer lost: the SDK's retry finds it there.
    proxy.next_put(S3Fault::AnswerLost);
    let stored = history
        .put_new("segments/lost", b"records".to_vec())
        .await
        .unwrap();
    assert_eq!(stored, Stored::AlreadyThere);
    assert_eq!(
        direct.get("segments/lost").await.unwrap().as_deref(),
        Some(&b"records"[..])
    );

    // A role without s3:PutObject: the error names the permission and where to grant it.
    proxy.deny("PutObject");
    let error = history.put_new("segments/x", vec![1]).await.unwrap_err();
    assert!(
        matches!(&error, HistoryError::AccessDenied { action, .. } if action == "PutObject"),
        "{error}"
    );
    let text = error.to_string();
    assert!(
        text.contains("s3:PutObject") && text.contains("s3://journals/karpenter/c1"),
        "{text}"
    );
    assert_eq!(error.metric_label(), "access_denied");
    proxy.clear();
    assert_eq!(
        history.put_new("segments/x", vec![1]).await.unwrap(),
        Stored::Created
    );

    // Unreachable: an error to retry later, not a wrong answer.
    proxy.outage(true);
    let error = history.list("", None).await.unwrap_err();
    assert!(matches!(error, HistoryError::Unavailable { .. }), "{error}");
    proxy.outage(false);
    let names = history.list("segments/", None).await.unwrap();
    assert_eq!(names, ["segments/lost", "segments/x"]);
}

#[tokio::test]
async fn objects_are_written_once_read_back_and_listed_in_order() {
    let moto = Moto::shared();
    let _turn = journals_bucket(moto).await;
    let history = store(moto, "journals").await;
    assert_eq!(history.location(), "s3://journals/karpenter/c1");
    for name in ["segments/b", "segments/a", "snapshots/c"] {
        let put = history
            .put_new(name, name.as_bytes().to_vec())
            .await
            .unwrap();
        assert_eq!(put, Stored::Created, "{name}");
    }
    // A name is never written twice: the object stays as it was.
    assert_eq!(
        history
            .put_new("segments/a", b"other".to_vec())
            .await
            .unwrap(),
        Stored::AlreadyThere
    );
    assert_eq!(
        history.get("segments/a").await.unwrap().as_deref(),
        Some(&b"segments/a"[..])
    );
    assert_eq!(history.get("segments/zz").await.unwrap(), None);
    assert_eq!(
        history.list("", None).await.unwrap(),
        ["segments/a", "segments/b", "snapshots/c"]
    );
    assert_eq!(
        history.list("segments/", Some("segments/a")).await.unwrap(),
        ["segments/b"]
    );
    // Stored under the cluster's prefix, nowhere else.
    let config = karpenter_aws::config::sdk_config(&connection(&moto.endpoint())).await;
    let s3 = aws_sdk_s3::Client::from_conf(
        aws_sdk_s3::config::Builder::from(&config)
            .force_path_style(true)
            .build(),
    );
    let keys: Vec<String> = s3
        .list_objects_v2()
        .bucket("journals")
        .send()
        .await
        .unwrap()
        .contents()
        .iter()
        .filter_map(|o| o.key().map(str::to_owned))
        .collect();
    assert!(
        keys.iter().all(|k| k.starts_with("karpenter/c1/")),
        "{keys:?}"
    );

    // A bucket that does not exist is named, with the fix.
    let missing = store(moto, "no-such-journals").await;
    let error = missing.list("", None).await.unwrap_err();
    assert!(
        matches!(&error, HistoryError::NoSuchBucket { bucket } if bucket == "no-such-journals"),
        "{error}"
    );
    assert!(error.to_string().contains("--journal-bucket"), "{error}");
    let error = missing.put_new("x", vec![1]).await.unwrap_err();
    assert!(
        matches!(error, HistoryError::NoSuchBucket { .. }),
        "{error}"
    );
}
