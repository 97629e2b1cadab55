//! Coalesces calls from many NodeClaims into one AWS request, as upstream does for
//! DescribeInstances and TerminateInstances: a batch closes after `idle` without a new call,
//! `max` after it opened, or at `max_items`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

type Exec<I, O> = Arc<dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = Vec<O>> + Send>> + Send + Sync>;

/// Window settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Close after this long without a new call.
    pub idle: Duration,
    /// Close this long after the first call.
    pub max: Duration,
    /// Close at this many calls.
    pub max_items: usize,
}

/// A batcher of `I → O` calls.
pub struct Batcher<I, O> {
    tx: mpsc::UnboundedSender<(I, oneshot::Sender<O>)>,
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").finish_non_exhaustive()
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the batching task on the current runtime. `exec` answers every input of a
    /// batch, in order; a short answer fails the missing calls (their senders drop).
    pub fn new<F, Fut>(window: Window, exec: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Vec<O>> + Send + 'static,
    {
        let exec: Exec<I, O> = Arc::new(move |inputs| Box::pin(exec(inputs)));
        let (tx, mut rx) = mpsc::unbounded_channel::<(I, oneshot::Sender<O>)>();
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + window.max;
                while batch.len() < window.max_items {
                    let wait = window
                        .idle
                        .min(deadline.saturating_duration_since(tokio::time::Instant::now()));
                    match tokio::time::timeout(wait, rx.recv()).await {
                        Ok(Some(next)) => batch.push(next),
                        Ok(None) | Err(_) => break,
                    }
                }
                let (inputs, replies): (Vec<I>, Vec<oneshot::Sender<O>>) =
                    batch.into_iter().unzip();
                let exec = exec.clone();
                // Batches run concurrently so a slow call does not hold up the next window.
                tokio::spawn(async move {
                    let outputs = exec(inputs).await;
                    for (reply, output) in replies.into_iter().zip(outputs) {
                        let _ = reply.send(output);
                    }
                });
            }
        });
        Batcher { tx }
    }

    /// Submits one call and waits for its answer; `None` if the batcher is gone.
    pub async fn call(&self, input: I) -> Option<O> {
        let (reply, answer) = oneshot::channel();
        self.tx.send((input, reply)).ok()?;
        answer.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test(start_paused = true)]
    async fn concurrent_calls_share_one_request_and_get_their_own_answers() {
        let sizes = Arc::new(Mutex::new(Vec::new()));
        let seen = sizes.clone();
        let batcher = Arc::new(Batcher::new(
            Window {
                idle: Duration::from_millis(100),
                max: Duration::from_secs(1),
                max_items: 3,
            },
            move |inputs: Vec<u32>| {
                seen.lock().unwrap().push(inputs.len());
                async move { inputs.into_iter().map(|i| i * 10).collect() }
            },
        ));
        let calls: Vec<_> = (1..=4)
            .map(|i| {
                let b = batcher.clone();
                tokio::spawn(async move { b.call(i).await })
            })
            .collect();
        let mut answers = Vec::new();
        for c in calls {
            answers.push(c.await.unwrap());
        }
        assert_eq!(answers, vec![Some(10), Some(20), Some(30), Some(40)]);
        assert_eq!(
            *sizes.lock().unwrap(),
            vec![3, 1],
            "max_items closes the first batch"
        );
    }
}
