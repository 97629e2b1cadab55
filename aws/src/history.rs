//! The journal's history store on S3 ([`HistoryStore`]): one cluster's segments and
//! snapshots under `s3://bucket/prefix/<cluster>/`.
//!
//! - Every object is written with `If-None-Match: *`, so S3 never replaces one (a second
//!   write of a name answers 412, reported as [`Stored::AlreadyThere`]), and with its
//!   SHA-256, which S3 checks before keeping the object: a torn upload is never stored (S3
//!   answers `BadDigest`, an [`HistoryError::Unavailable`] to retry: nothing is wrong with
//!   what is stored).
//! - Reads ask S3 for the stored checksum and the SDK checks the body against it.
//! - S3's errors become [`HistoryError`]s that name the bucket and the permission to grant.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::ChecksumMode;
use base64::Engine as _;
use karpenter_core::ports::BoxFuture;
use karpenter_core::ports::history::{HistoryError, HistoryStore, Stored};
use sha2::Digest as _;

use crate::config::{Connection, sdk_config};

/// The S3 actions the history store calls (`deploy/aws/cloudformation.yaml` grants these
/// in `JournalBucketPolicy`).
pub const REQUIRED_PERMISSIONS: &[&str] = &["s3:GetObject", "s3:ListBucket", "s3:PutObject"];

/// Where a cluster's history lives: a bucket, and a prefix in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryLocation {
    /// The bucket.
    pub bucket: String,
    /// The prefix of the cluster's objects, ending in `/` (empty for the bucket's root).
    pub prefix: String,
}

impl HistoryLocation {
    /// Reads `s3://bucket/prefix` (the `journal` tools' form; `s3://` may be left out, as
    /// `--journal-bucket` takes it).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let rest = spec.strip_prefix("s3://").unwrap_or(spec);
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let valid_bucket = (3..=63).contains(&bucket.len())
            && bucket
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
            && !bucket.starts_with(['-', '.'])
            && !bucket.ends_with(['-', '.']);
        if !valid_bucket {
            return Err(format!(
                "{spec:?} does not name an S3 bucket: a bucket name is 3-63 lowercase letters, digits, '-' and '.', as in s3://my-bucket/karpenter"
            ));
        }
        let prefix = prefix.trim_matches('/');
        Ok(HistoryLocation {
            bucket: bucket.to_owned(),
            prefix: if prefix.is_empty() {
                String::new()
            } else {
                format!("{prefix}/")
            },
        })
    }

    /// The location of `cluster`'s history below this one (the controller keeps one history
    /// per cluster in a shared bucket).
    pub fn for_cluster(&self, cluster: &str) -> Self {
        HistoryLocation {
            bucket: self.bucket.clone(),
            prefix: format!("{}{cluster}/", self.prefix),
        }
    }
}

impl std::fmt::Display for HistoryLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "s3://{}/{}",
            self.bucket,
            self.prefix.trim_end_matches('/')
        )
    }
}

/// A cluster's history in S3.
#[derive(Debug, Clone)]
pub struct S3History {
    client: aws_sdk_s3::Client,
    location: HistoryLocation,
    display: String,
}

impl S3History {
    /// A client for `location`. An emulator endpoint (`connection.endpoint`) is addressed
    /// path-style (`http://127.0.0.1:port/bucket/key`), as emulators expect.
    pub async fn connect(connection: &Connection, location: HistoryLocation) -> Self {
        let config = sdk_config(connection).await;
        let client = aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&config)
                .force_path_style(connection.endpoint.is_some())
                .build(),
        );
        S3History {
            client,
            display: location.to_string(),
            location,
        }
    }

    fn key(&self, name: &str) -> String {
        format!("{}{name}", self.location.prefix)
    }

    /// A store error from an S3 error, for `action` (the IAM action it needed).
    fn error<E, R>(&self, action: &str, error: &SdkError<E, R>) -> HistoryError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let location = self.display.clone();
        let (code, message) = match error {
            SdkError::ServiceError(e) => (
                e.err().code().unwrap_or_default().to_owned(),
                e.err().message().unwrap_or_default().to_owned(),
            ),
            other => (String::new(), describe(other)),
        };
        match code.as_str() {
            "NoSuchBucket" => HistoryError::NoSuchBucket {
                bucket: self.location.bucket.clone(),
            },
            "AccessDenied"
            | "AllAccessDisabled"
            | "InvalidAccessKeyId"
            | "SignatureDoesNotMatch" => HistoryError::AccessDenied {
                action: action.to_owned(),
                location,
                message: if message.is_empty() { code } else { message },
            },
            "SlowDown" | "Throttling" | "ThrottlingException" | "RequestLimitExceeded" => {
                HistoryError::Throttled { location }
            }
            "BadDigest" | "InvalidDigest" | "XAmzContentSHA256Mismatch" => HistoryError::Corrupt {
                location,
                name: String::new(),
                message: format!("{code}: {message}"),
            },
            _ => HistoryError::Unavailable {
                location,
                message: if code.is_empty() {
                    message
                } else {
                    format!("{code}: {message}")
                },
            },
        }
    }
}

/// An SDK error with its sources, on one line.
fn describe(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// The HTTP status of a failed call, when it got an answer.
fn status<E>(error: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>) -> Option<u16> {
    error.raw_response().map(|r| r.status().as_u16())
}

impl HistoryStore for S3History {
    fn location(&self) -> &str {
        &self.display
    }

    fn list<'a>(
        &'a self,
        prefix: &'a str,
        start_after: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<String>, HistoryError>> {
        Box::pin(async move {
            let mut names = Vec::new();
            let mut pages = self
                .client
                .list_objects_v2()
                .bucket(&self.location.bucket)
                .prefix(self.key(prefix))
                .set_start_after(start_after.map(|s| self.key(s)))
                .into_paginator()
                .send();
            while let Some(page) = pages.next().await {
                let page = page.map_err(|e| self.error("ListBucket", &e))?;
                for object in page.contents() {
                    if let Some(name) = object
                        .key()
                        .and_then(|k| k.strip_prefix(&self.location.prefix))
                    {
                        names.push(name.to_owned());
                    }
                }
            }
            Ok(names)
        })
    }

    fn get<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, HistoryError>> {
        Box::pin(async move {
            let response = self
                .client
                .get_object()
                .bucket(&self.location.bucket)
                .key(self.key(name))
                .checksum_mode(ChecksumMode::Enabled)
                .send()
                .await;
            let output = match response {
                Ok(output) => output,
                Err(e) if e.as_service_error().is_some_and(|s| s.is_no_such_key()) => {
                    return Ok(None);
                }
                Err(e) if status(&e) == Some(404) && e.code() != Some("NoSuchBucket") => {
                    return Ok(None);
                }
                Err(e) => return Err(self.error("GetObject", &e)),
            };
            let body = output
                .body
                .collect()
                .await
                .map_err(|e| HistoryError::Corrupt {
                    location: self.display.clone(),
                    name: name.to_owned(),
                    message: describe(&e),
                })?;
            Ok(Some(body.into_bytes().to_vec()))
        })
    }

    fn put_new<'a>(
        &'a self,
        name: &'a str,
        bytes: Vec<u8>,
    ) -> BoxFuture<'a, Result<Stored, HistoryError>> {
        Box::pin(async move {
            let sha256 =
                base64::engine::general_purpose::STANDARD.encode(sha2::Sha256::digest(&bytes));
            let response = self
                .client
                .put_object()
                .bucket(&self.location.bucket)
                .key(self.key(name))
                .if_none_match("*")
                .checksum_sha256(sha256)
                .body(ByteStream::from(bytes))
                .send()
                .await;
            match response {
                Ok(_) => Ok(Stored::Created),
                // 412: an object of that name exists. (409: a concurrent conditional write
                // of the same name is in progress; the caller reads what is there.)
                Err(e) if matches!(status(&e), Some(412 | 409)) => Ok(Stored::AlreadyThere),
                Err(e) if e.code() == Some("PreconditionFailed") => Ok(Stored::AlreadyThere),
                Err(e) => Err(match self.error("PutObject", &e) {
                    // The body arrived torn and S3 kept nothing: sending it again may do.
                    HistoryError::Corrupt {
                        location, message, ..
                    } => HistoryError::Unavailable {
                        location,
                        message: format!(
                            "the upload of {name} arrived damaged ({message}); nothing was stored"
                        ),
                    },
                    other => other,
                }),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse_with_or_without_the_scheme() {
        let l = HistoryLocation::parse("s3://journals/karpenter/").unwrap();
        assert_eq!(l.bucket, "journals");
        assert_eq!(l.prefix, "karpenter/");
        assert_eq!(l.to_string(), "s3://journals/karpenter");
        assert_eq!(
            l.for_cluster("prod-1").to_string(),
            "s3://journals/karpenter/prod-1"
        );
        let bare = HistoryLocation::parse("journals").unwrap();
        assert_eq!(bare.prefix, "");
        assert_eq!(bare.for_cluster("c").prefix, "c/");
        for bad in [
            "",
            "s3://",
            "UPPER",
            "ab",
            "-x-bucket",
            "bucket_with_underscore/p",
        ] {
            let err = HistoryLocation::parse(bad).unwrap_err();
            assert!(err.contains("bucket"), "{bad}: {err}");
        }
    }
}
