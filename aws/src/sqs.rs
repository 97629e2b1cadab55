//! The interruption queue on SQS: long polls as upstream (10 messages, 20 s wait, 20 s
//! visibility) and parses each body with [`crate::messages`].

use aws_sdk_sqs::Client;
use karpenter_core::ports::{
    BoxFuture, CloudError, InterruptionQueue, QueueMessage, QueueMessageContent,
};

use crate::error::AwsError;
use crate::messages::{Parsed, parse};

/// Long-poll settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polling {
    /// Messages per receive (1..10).
    pub max_messages: i32,
    /// Long-poll wait in seconds (0..20).
    pub wait_seconds: i32,
    /// Seconds a received message stays invisible to other receivers.
    pub visibility_seconds: i32,
}

impl Default for Polling {
    fn default() -> Self {
        Polling {
            max_messages: 10,
            wait_seconds: 20,
            visibility_seconds: 20,
        }
    }
}

/// An SQS queue as an interruption stream.
#[derive(Debug, Clone)]
pub struct SqsQueue {
    client: Client,
    name: String,
    url: String,
    polling: Polling,
}

impl SqsQueue {
    /// Looks the queue up by name (`--interruption-queue`).
    pub async fn connect(client: Client, name: &str, polling: Polling) -> Result<Self, AwsError> {
        let url = client
            .get_queue_url()
            .queue_name(name)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("GetQueueUrl", e))?
            .queue_url()
            .map(str::to_owned)
            .ok_or_else(|| {
                AwsError::new("GetQueueUrl", "NoQueueUrl", "the answer had no queue URL")
            })?;
        Ok(SqsQueue {
            client,
            name: name.to_owned(),
            url,
            polling,
        })
    }

    /// The queue URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Sends a message (EventBridge does this in production; simulations and tests use it).
    pub async fn send(&self, body: &str) -> Result<(), AwsError> {
        self.client
            .send_message()
            .queue_url(&self.url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| AwsError::from_sdk("SendMessage", e))?;
        Ok(())
    }
}

/// A received body as the actors see it.
pub fn content(body: &str) -> (QueueMessageContent, Option<u64>) {
    match parse(body) {
        Ok(Parsed::Notice {
            kind,
            instance_ids,
            time_ms,
        }) => (QueueMessageContent::Notice { kind, instance_ids }, time_ms),
        Ok(Parsed::Ignored { reason }) => (QueueMessageContent::Ignored { reason }, None),
        Err(error) => (
            QueueMessageContent::Malformed {
                error: error.to_string(),
            },
            None,
        ),
    }
}

impl InterruptionQueue for SqsQueue {
    fn name(&self) -> &str {
        &self.name
    }

    fn receive(&self) -> BoxFuture<'_, Result<Vec<QueueMessage>, CloudError>> {
        Box::pin(async move {
            let out = self
                .client
                .receive_message()
                .queue_url(&self.url)
                .max_number_of_messages(self.polling.max_messages)
                .wait_time_seconds(self.polling.wait_seconds)
                .visibility_timeout(self.polling.visibility_seconds)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("ReceiveMessage", e))?;
            Ok(out
                .messages()
                .iter()
                .filter_map(|m| {
                    // A message without a receipt handle cannot be deleted; it will come back.
                    let receipt = m.receipt_handle()?.to_owned();
                    let (content, sent_at_ms) = content(m.body().unwrap_or_default());
                    Some(QueueMessage {
                        id: m.message_id().unwrap_or_default().to_owned(),
                        receipt,
                        sent_at_ms,
                        content,
                    })
                })
                .collect())
        })
    }

    fn delete<'a>(&'a self, receipt: &'a str) -> BoxFuture<'a, Result<(), CloudError>> {
        Box::pin(async move {
            self.client
                .delete_message()
                .queue_url(&self.url)
                .receipt_handle(receipt)
                .send()
                .await
                .map_err(|e| AwsError::from_sdk("DeleteMessage", e))?;
            Ok(())
        })
    }
}
