//! Faults the server injects at random (seeded), the way a real control plane fails its
//! clients: watches whose connection drops mid-stream, `410 Gone` for a watch resuming from a
//! resource version (as after an etcd compaction), answers that come late, `409 Conflict` on
//! writes (another writer got there first), `429 Too Many Requests` with `Retry-After` (API
//! Priority and Fairness turning a request away), `503` with `Retry-After` (an apiserver
//! shedding load), `500` without it (an internal error: the request did nothing), and lists
//! whose connection resets halfway through the body. A restart is not drawn at random: a test
//! asks for it ([`crate::ApiServer::restart`]).

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::Method;

/// What one request gets.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Fault {
    /// A watch stream that ends abruptly after this long.
    DropWatch(Duration),
    /// A watch resuming from a version is told it expired.
    Gone,
    /// The answer comes this late.
    Slow(Duration),
    /// A write is refused as conflicting.
    Conflict,
    /// `429 Too Many Requests`, `Retry-After: 1`.
    TooMany,
    /// `503 Service Unavailable`, `Retry-After: 1`.
    Unavailable,
    /// `500 Internal Server Error`, no `Retry-After`.
    Internal,
    /// A list whose body is cut halfway: the connection resets mid-list.
    ResetList,
}

impl Fault {
    /// The refusal it answers with instead of serving the request, and the `Retry-After`
    /// it carries; `None` for a fault that does not refuse.
    pub(crate) fn refusal(self) -> Option<(crate::ApiError, Option<u32>)> {
        let (code, reason, message, retry_after) = match self {
            Fault::TooMany => (
                429,
                "TooManyRequests",
                "Too many requests, please try again later.",
                Some(1),
            ),
            Fault::Unavailable => (
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
                Some(1),
            ),
            Fault::Internal => (
                500,
                "InternalError",
                "Internal error occurred: etcdserver: request timed out",
                None,
            ),
            _ => return None,
        };
        Some((
            crate::ApiError::new(code, reason, format!("{message} (injected fault)")),
            retry_after,
        ))
    }

    /// Its name in [`crate::ApiServer::faults_injected`].
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::DropWatch(_) => "dropped watch",
            Fault::Gone => "410 Gone",
            Fault::Slow(_) => "slow answer",
            Fault::Conflict => "409 Conflict",
            Fault::TooMany => "429 Too Many Requests",
            Fault::Unavailable => "503 Service Unavailable",
            Fault::Internal => "500 Internal Server Error",
            Fault::ResetList => "reset mid-list",
        }
    }
}

/// The random source and what it injected.
#[derive(Debug)]
pub(crate) struct Faults {
    rate: f64,
    rng: fastrand::Rng,
    injected: BTreeMap<&'static str, usize>,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            rate: 0.0,
            rng: fastrand::Rng::with_seed(0),
            injected: BTreeMap::new(),
        }
    }
}

impl Faults {
    pub(crate) fn set(&mut self, rate: f64, seed: u64) {
        self.rate = rate.clamp(0.0, 1.0);
        self.rng = fastrand::Rng::with_seed(seed);
    }

    pub(crate) fn injected(&self) -> BTreeMap<&'static str, usize> {
        self.injected.clone()
    }

    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(self.rng.u64(from..to))
    }

    /// The fault for a request, if it gets one (a watch four times as often as other
    /// requests). A watch: turned away with `429` (one in five), told the version it resumes
    /// from expired (half of the rest, when it resumes from one) or dropped within 3 s. A
    /// replace or a patch: refused as conflicting half the time. Otherwise, of every ten: four
    /// answered late (0.1 to 1.5 s), two `429`, two `503` (a list instead resets halfway
    /// through its body), one `500`, one more late answer.
    pub(crate) fn draw(&mut self, request: Drawn<'_>) -> Option<Fault> {
        // A client opens few watches and keeps them, so a watch draws at four times the rate:
        // enough drops and expiries to matter at any rate worth testing.
        let rate = if request.watch {
            (self.rate * 4.0).min(1.0)
        } else {
            self.rate
        };
        if rate <= 0.0 || self.rng.f64() >= rate {
            return None;
        }
        let coin = self.rng.f64() < 0.5;
        let write = *request.method == Method::PUT || *request.method == Method::PATCH;
        let fault = if request.watch {
            if self.rng.u8(0..5) == 0 {
                Fault::TooMany
            } else if request.resuming && coin {
                Fault::Gone
            } else {
                Fault::DropWatch(self.millis(200, 3_000))
            }
        } else if write && coin {
            Fault::Conflict
        } else {
            match self.rng.u8(0..10) {
                0..=3 | 9 => Fault::Slow(self.millis(100, 1_500)),
                4 | 5 => Fault::TooMany,
                6 | 7 if request.list => Fault::ResetList,
                6 | 7 => Fault::Unavailable,
                _ => Fault::Internal,
            }
        };
        *self.injected.entry(fault.name()).or_default() += 1;
        Some(fault)
    }
}

/// What a fault is drawn for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Drawn<'a> {
    pub(crate) method: &'a Method,
    /// A watch.
    pub(crate) watch: bool,
    /// A watch from a resource version.
    pub(crate) resuming: bool,
    /// A list (a GET of a collection).
    pub(crate) list: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(method: &Method, watch: bool, resuming: bool, list: bool) -> Drawn<'_> {
        Drawn {
            method,
            watch,
            resuming,
            list,
        }
    }

    #[test]
    fn the_rate_and_the_kinds_follow_the_request() {
        let mut faults = Faults::default();
        assert_eq!(
            faults.draw(req(&Method::GET, true, true, false)),
            None,
            "off by default"
        );
        faults.set(0.5, 7);
        let mut drawn = 0;
        for _ in 0..2_000 {
            if let Some(f) = faults.draw(req(&Method::GET, false, false, false)) {
                drawn += 1;
                assert!(
                    matches!(f, Fault::Slow(d) if d >= Duration::from_millis(100) && d < Duration::from_millis(1_500))
                        || matches!(f, Fault::TooMany | Fault::Unavailable | Fault::Internal),
                    "{f:?}"
                );
            }
        }
        assert!((800..1_200).contains(&drawn), "{drawn}");
        for _ in 0..200 {
            if let Some(f) = faults.draw(req(&Method::GET, true, false, false)) {
                assert!(
                    matches!(f, Fault::DropWatch(_) | Fault::TooMany),
                    "a fresh watch cannot be expired: {f:?}"
                );
            }
            if let Some(f) = faults.draw(req(&Method::POST, false, false, false)) {
                assert!(
                    !matches!(f, Fault::Conflict | Fault::ResetList),
                    "a create neither conflicts nor resets mid-list: {f:?}"
                );
            }
            if let Some(f) = faults.draw(req(&Method::GET, false, false, true)) {
                assert!(
                    !matches!(f, Fault::Unavailable),
                    "a list resets instead: {f:?}"
                );
            }
        }
        let injected = faults.injected();
        for kind in [
            "slow answer",
            "dropped watch",
            "429 Too Many Requests",
            "503 Service Unavailable",
            "500 Internal Server Error",
            "reset mid-list",
        ] {
            assert!(
                injected.get(kind).is_some_and(|n| *n > 0),
                "{kind}: {injected:?}"
            );
        }
        for _ in 0..200 {
            faults.draw(req(&Method::PATCH, false, false, false));
            faults.draw(req(&Method::GET, true, true, false));
        }
        let injected = faults.injected();
        assert!(
            injected["409 Conflict"] > 0 && injected["410 Gone"] > 0,
            "{injected:?}"
        );
        // Seeded: the same seed draws the same faults.
        let (mut a, mut b) = (Faults::default(), Faults::default());
        a.set(0.3, 11);
        b.set(0.3, 11);
        for _ in 0..100 {
            assert_eq!(
                a.draw(req(&Method::PUT, false, false, false)),
                b.draw(req(&Method::PUT, false, false, false))
            );
        }
    }
}
