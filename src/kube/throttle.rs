//! The client's request rate, bounded as client-go bounds it (`--kube-client-qps`,
//! `--kube-client-burst`; upstream's defaults 200 and 300): a token bucket holding `burst`
//! requests, refilled at `qps` a second. A request waits for its token before it is sent, in
//! the order requests came. A watch takes one token when it
//! starts, not one per event. [`TokenBucket`] decides (pure, the clock an argument);
//! [`ThrottleLayer`] holds requests back in kube's client stack.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// Upstream Karpenter's `KUBE_CLIENT_QPS`.
pub const DEFAULT_QPS: f64 = 200.0;
/// Upstream Karpenter's `KUBE_CLIENT_BURST`.
pub const DEFAULT_BURST: u32 = 300;

/// A client's request rate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Limits {
    /// Requests a second, sustained (> 0).
    pub qps: f64,
    /// Requests at once, after a quiet spell (≥ 1).
    pub burst: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            qps: DEFAULT_QPS,
            burst: DEFAULT_BURST,
        }
    }
}

impl Limits {
    /// The limits, refused with the flag to fix when they cannot bound anything.
    pub fn new(qps: f64, burst: u32) -> Result<Self, String> {
        if !(qps.is_finite() && qps > 0.0) {
            return Err(format!(
                "--kube-client-qps (KUBE_CLIENT_QPS) must be a number of requests a second above 0, not {qps}"
            ));
        }
        if burst == 0 {
            return Err(
                "--kube-client-burst (KUBE_CLIENT_BURST) must be at least 1 request".to_owned(),
            );
        }
        Ok(Limits { qps, burst })
    }
}

/// A token bucket: `burst` tokens, refilled at `qps` a second.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    limits: Limits,
    tokens: f64,
    at: Duration,
}

impl TokenBucket {
    /// A full bucket at time `now` (any monotonic origin).
    pub fn new(limits: Limits, now: Duration) -> Self {
        TokenBucket {
            limits,
            tokens: f64::from(limits.burst),
            at: now,
        }
    }

    /// Takes a token at `now`, or says how long until one is there.
    pub fn take(&mut self, now: Duration) -> Result<(), Duration> {
        let elapsed = now.saturating_sub(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limits.qps).min(f64::from(self.limits.burst));
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - self.tokens) / self.limits.qps,
            ))
        }
    }
}

/// The layer that puts a [`Throttle`] around kube's client service.
#[derive(Debug, Clone)]
pub struct ThrottleLayer {
    limits: Limits,
    host: std::sync::Arc<str>,
}

impl ThrottleLayer {
    /// A layer bounding requests to the API server at `host` to `limits`.
    pub fn new(limits: Limits, host: &str) -> Self {
        ThrottleLayer {
            limits,
            host: host.into(),
        }
    }
}

impl<S> tower_layer::Layer<S> for ThrottleLayer {
    type Service = Throttle<S>;

    fn layer(&self, inner: S) -> Throttle<S> {
        Throttle {
            inner,
            origin: Instant::now(),
            bucket: TokenBucket::new(self.limits, Duration::ZERO),
            sleep: None,
            has_token: false,
            waited: None,
            host: self.host.clone(),
        }
    }
}

/// A service that is ready only when its bucket has a token (kube's client serializes
/// readiness behind its buffer, so requests wait in the order they came).
pub struct Throttle<S> {
    inner: S,
    origin: Instant,
    bucket: TokenBucket,
    sleep: Option<Pin<Box<Sleep>>>,
    has_token: bool,
    /// When the request waiting for a token started to wait.
    waited: Option<Instant>,
    host: std::sync::Arc<str>,
}

impl<S, B> tower_service::Service<http::Request<B>> for Throttle<S>
where
    S: tower_service::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        while !self.has_token {
            if let Some(sleep) = self.sleep.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.sleep = None;
            }
            match self.bucket.take(self.origin.elapsed()) {
                Ok(()) => self.has_token = true,
                Err(wait) => {
                    self.waited.get_or_insert_with(Instant::now);
                    self.sleep = Some(Box::pin(tokio::time::sleep(wait)));
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        self.has_token = false;
        if let Some(since) = self.waited.take() {
            karpenter_actors::metrics::client().rate_limited(
                &self.host,
                request.method().as_str(),
                since.elapsed().as_secs_f64(),
            );
        }
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn a_full_bucket_lets_the_burst_through_then_the_rate() {
        let limits = Limits::new(200.0, 300).unwrap();
        let mut bucket = TokenBucket::new(limits, at(0));
        assert!((0..300).all(|_| bucket.take(at(0)).is_ok()));
        let wait = bucket.take(at(0)).unwrap_err();
        assert_eq!(wait, Duration::from_millis(5));
        // One second on, 200 more, not 300.
        assert_eq!(
            (0..400).filter(|_| bucket.take(at(1000)).is_ok()).count(),
            200
        );
        // A long quiet spell refills to the burst, no more.
        assert_eq!(
            (0..400).filter(|_| bucket.take(at(60_000)).is_ok()).count(),
            300
        );
    }

    #[test]
    fn limits_that_bound_nothing_are_refused_naming_the_flag() {
        for qps in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let error = Limits::new(qps, 10).unwrap_err();
            assert!(error.contains("--kube-client-qps"), "{error}");
        }
        assert!(
            Limits::new(5.0, 0)
                .unwrap_err()
                .contains("--kube-client-burst")
        );
        assert_eq!(Limits::default(), Limits::new(200.0, 300).unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn requests_past_the_burst_wait_for_their_tokens() {
        use tower::{Service, ServiceExt};
        use tower_layer::Layer;
        let metrics = karpenter_actors::metrics::client();
        let (waits_before, _) = metrics.rate_limiter_waits();
        let layer = ThrottleLayer::new(Limits::new(10.0, 2).unwrap(), "test");
        let mut service = layer.layer(tower::service_fn(|r: http::Request<u32>| async move {
            Ok::<_, ()>(*r.body())
        }));
        let start = Instant::now();
        for n in 0..6 {
            let answer = service
                .ready()
                .await
                .unwrap()
                .call(http::Request::new(n))
                .await;
            assert_eq!(answer, Ok(n));
        }
        // Two at once, then four at 10 a second, each counted as a wait.
        let elapsed = start.elapsed();
        assert!(
            elapsed >= Duration::from_millis(400) && elapsed < Duration::from_millis(450),
            "{elapsed:?}"
        );
        let (waits, _) = metrics.rate_limiter_waits();
        assert!(waits - waits_before >= 4, "{waits} after {waits_before}");
    }
}
