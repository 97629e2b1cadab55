//! The journal's history store on moto's S3: immutable objects, checked reads, listing from
//! a position, and S3's errors named as the settings they come from.

use karpenter_aws::history::{HistoryLocation, S3History};
use karpenter_core::ports::history::{HistoryError, HistoryStore, Stored};

use super::*;

async fn store(moto: &Moto, bucket: &str) -> S3History {
    let location = HistoryLocation::parse(&format!("s3://{bucket}/karpenter"))
        .unwrap()
        .for_cluster("c1");
    S3History::connect(&connection(&moto.endpoint()), location).await
}

#[tokio::test]
async fn objects_are_written_once_read_back_and_listed_in_order() {
    let moto = Moto::shared();
    let _turn = Moto::exclusive().await;
    moto.reset();
    karpenter_aws::testing::create_bucket(&connection(&moto.endpoint()), "journals")
        .await
        .unwrap();
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
