//! Requests tried again as client-go tries them: an answer of `429` or any `5xx` that carries
//! `Retry-After` is sent again after that many seconds (at most [`MAX_RETRY_AFTER`]); `503`
//! and `504` without it after a doubling backoff (0.2 s to 5 s); at most [`MAX_RETRIES`]
//! times (client-go's default), and only requests whose body can be sent again. Anything
//! else is handed back: a `500` without `Retry-After` (the request may have done something;
//! the caller decides), and an eviction's `429` (a PodDisruptionBudget said no: the drain
//! tries again on its own schedule). Every attempt waits for its own throttle token and is counted in
//! `rest_client_requests_total`, every retry in `rest_client_request_retries_total`.
//! [`decide`] is the rule (pure); [`RetryLayer`] applies it in kube's client stack.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tower::buffer::Buffer;
use tower::{BoxError, Service, ServiceExt};

/// client-go's `maxRetries`.
pub const MAX_RETRIES: u32 = 10;
/// The longest `Retry-After` honoured; a longer one is cut to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How long to wait before attempt `attempt + 1` after an answer of `status` with
/// `retry_after` (the header's text), or `None` to hand the answer back.
pub fn decide(status: u16, retry_after: Option<&str>, attempt: u32) -> Option<Duration> {
    if attempt >= MAX_RETRIES || !(status == 429 || (500..600).contains(&status)) {
        return None;
    }
    if let Some(seconds) = retry_after.and_then(|v| v.trim().parse::<u64>().ok()) {
        return Some(Duration::from_secs(seconds).min(MAX_RETRY_AFTER));
    }
    matches!(status, 503 | 504).then(|| {
        let doubled = 200u64.saturating_mul(1 << attempt.min(16));
        Duration::from_millis(doubled.min(5_000))
    })
}

/// The layer that puts a [`Retry`] around kube's client service.
#[derive(Debug, Clone)]
pub struct RetryLayer {
    host: Arc<str>,
}

impl RetryLayer {
    /// Retries for the API server at `host` (the metrics' `host` label).
    pub fn new(host: &str) -> Self {
        RetryLayer { host: host.into() }
    }
}

type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B> tower_layer::Layer<S> for RetryLayer
where
    S: Service<Request<Body>, Response = Response<B>, Error = BoxError> + Send + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Service = Retry<B>;

    fn layer(&self, inner: S) -> Retry<B> {
        // A buffer makes the inner service shareable, so an attempt can wait for readiness
        // (the throttle's token) while the next request is handed in. It spawns its worker:
        // call within a Tokio runtime.
        let inner: Buffer<Request<Body>, Boxed<Result<Response<B>, BoxError>>> =
            Buffer::new(inner.map_future(|f| Box::pin(f) as Boxed<_>), 1024);
        Retry {
            inner,
            host: self.host.clone(),
        }
    }
}

/// A service that tries requests again by [`decide`].
pub struct Retry<B> {
    inner: Buffer<Request<Body>, Boxed<Result<Response<B>, BoxError>>>,
    host: Arc<str>,
}

impl<B: Send + 'static> Service<Request<Body>> for Retry<B> {
    type Response = Response<B>;
    type Error = BoxError;
    type Future = Boxed<Result<Response<B>, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        // The ready clone goes with this request; a fresh clone waits for the next one.
        let fresh = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, fresh);
        let host = self.host.clone();
        Box::pin(async move {
            let metrics = karpenter_actors::metrics::client();
            let method = request.method().as_str().to_owned();
            let eviction = request.uri().path().ends_with("/eviction");
            let mut request = request;
            let mut attempt = 0;
            loop {
                let again = copy(&request);
                let result = inner.call(request).await;
                let status = result.as_ref().ok().map(|r| r.status().as_u16());
                metrics.request(&host, &method, status);
                let wait = result.as_ref().ok().and_then(|response| {
                    let retry_after = response
                        .headers()
                        .get(http::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok());
                    decide(response.status().as_u16(), retry_after, attempt)
                });
                let (Some(wait), Some(again), Some(status), false) =
                    (wait, again, status, eviction)
                else {
                    return result;
                };
                metrics.retry(&host, &method, status);
                tracing::debug!(
                    status,
                    attempt,
                    wait_ms = wait.as_millis() as u64,
                    "the API server asked to try again later"
                );
                drop(result);
                tokio::time::sleep(wait).await;
                attempt += 1;
                request = again;
                inner.ready().await?;
            }
        })
    }
}

/// The request again, when its body can be sent again.
fn copy(request: &Request<Body>) -> Option<Request<Body>> {
    let body = request.body().try_clone()?;
    let mut again = Request::builder()
        .method(request.method().clone())
        .uri(request.uri().clone())
        .version(request.version())
        .body(body)
        .ok()?;
    *again.headers_mut() = request.headers().clone();
    *again.extensions_mut() = request.extensions().clone();
    Some(again)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_is_honoured_on_429_and_5xx_and_bounded() {
        assert_eq!(decide(429, Some("1"), 0), Some(Duration::from_secs(1)));
        assert_eq!(decide(500, Some("3"), 2), Some(Duration::from_secs(3)));
        assert_eq!(decide(503, Some("86400"), 0), Some(MAX_RETRY_AFTER));
        // Without the header: 503 and 504 back off, doubling; a 429 or a 500 is handed back.
        assert_eq!(decide(503, None, 0), Some(Duration::from_millis(200)));
        assert_eq!(decide(503, None, 2), Some(Duration::from_millis(800)));
        assert_eq!(decide(504, None, 9), Some(Duration::from_secs(5)));
        assert_eq!(decide(500, None, 0), None);
        assert_eq!(decide(429, None, 0), None);
        assert_eq!(decide(429, Some("soon"), 0), None);
        // Never more than client-go's ten retries; other answers are final.
        assert_eq!(decide(429, Some("1"), MAX_RETRIES), None);
        for status in [200, 201, 404, 409, 410, 422] {
            assert_eq!(decide(status, Some("1"), 0), None, "{status}");
        }
    }
}
