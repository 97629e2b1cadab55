//! One error type for every AWS call: the operation, the service's error code and message.

use aws_sdk_ec2::error::{DisplayErrorContext, ProvideErrorMetadata};

/// A failed AWS call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation}: {code}: {message}")]
pub struct AwsError {
    /// The API operation, e.g. `CreateFleet`.
    pub operation: &'static str,
    /// The service's error code (`InsufficientInstanceCapacity`, …), or `Unknown` when the
    /// call did not get an answer (connection refused, timeout).
    pub code: String,
    /// Human-readable detail.
    pub message: String,
}

impl AwsError {
    /// Wraps an SDK error.
    pub fn from_sdk<E>(operation: &'static str, error: E) -> AwsError
    where
        E: ProvideErrorMetadata + std::error::Error + 'static,
    {
        AwsError {
            operation,
            code: error.code().unwrap_or("Unknown").to_owned(),
            message: error
                .message()
                .map(str::to_owned)
                .unwrap_or_else(|| DisplayErrorContext(&error).to_string()),
        }
    }

    /// An error found in a successful response (e.g. a CreateFleet `errorSet` entry).
    pub fn new(operation: &'static str, code: &str, message: &str) -> AwsError {
        AwsError {
            operation,
            code: code.to_owned(),
            message: message.to_owned(),
        }
    }

    /// The caller's identity may not do this (credentials or IAM policy).
    pub fn is_auth(&self) -> bool {
        crate::selection::is_auth_error(&self.code)
    }

    /// The thing asked about does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code.ends_with(".NotFound")
            || self.code.ends_with("NotFoundException")
            || self.code == "ParameterNotFound"
            || self.code == "NoSuchEntity"
    }
}

impl From<AwsError> for karpenter_core::ports::CloudError {
    fn from(error: AwsError) -> Self {
        karpenter_core::ports::CloudError::Other(error.to_string())
    }
}
