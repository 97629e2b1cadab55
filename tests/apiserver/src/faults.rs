//! Faults the server injects at random (seeded), the way a real control plane fails its
//! clients: watches whose connection drops mid-stream, `410 Gone` for a watch resuming from a
//! resource version (as after an etcd compaction), answers that come late, and `409 Conflict`
//! on writes (another writer got there first).

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
}

impl Fault {
    /// Its name in [`crate::ApiServer::faults_injected`].
    pub(crate) fn name(self) -> &'static str {
        match self {
            Fault::DropWatch(_) => "dropped watch",
            Fault::Gone => "410 Gone",
            Fault::Slow(_) => "slow answer",
            Fault::Conflict => "409 Conflict",
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
    /// requests): a watch has its connection dropped within 3 s or, when it resumes from a
    /// version, is told that version expired; a
    /// replace or a patch is refused as conflicting or answered late; anything else is
    /// answered late (0.1 to 1.5 s).
    pub(crate) fn draw(&mut self, method: &Method, watch: bool, resuming: bool) -> Option<Fault> {
        // A client opens few watches and keeps them, so a watch draws at four times the rate:
        // enough drops and expiries to matter at any rate worth testing.
        let rate = if watch {
            (self.rate * 4.0).min(1.0)
        } else {
            self.rate
        };
        if rate <= 0.0 || self.rng.f64() >= rate {
            return None;
        }
        let coin = self.rng.f64() < 0.5;
        let fault = if watch {
            if resuming && coin {
                Fault::Gone
            } else {
                Fault::DropWatch(self.millis(200, 3_000))
            }
        } else if (*method == Method::PUT || *method == Method::PATCH) && coin {
            Fault::Conflict
        } else {
            Fault::Slow(self.millis(100, 1_500))
        };
        *self.injected.entry(fault.name()).or_default() += 1;
        Some(fault)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_and_the_kinds_follow_the_request() {
        let mut faults = Faults::default();
        assert_eq!(
            faults.draw(&Method::GET, true, true),
            None,
            "off by default"
        );
        faults.set(0.5, 7);
        let mut drawn = 0;
        for _ in 0..2_000 {
            if let Some(f) = faults.draw(&Method::GET, false, false) {
                drawn += 1;
                assert!(
                    matches!(f, Fault::Slow(d) if d >= Duration::from_millis(100) && d < Duration::from_millis(1_500))
                );
            }
        }
        assert!((800..1_200).contains(&drawn), "{drawn}");
        for _ in 0..200 {
            if let Some(f) = faults.draw(&Method::GET, true, false) {
                assert!(
                    matches!(f, Fault::DropWatch(_)),
                    "a fresh watch cannot be expired"
                );
            }
            if let Some(f) = faults.draw(&Method::POST, false, false) {
                assert!(matches!(f, Fault::Slow(_)), "a create does not conflict");
            }
        }
        let injected = faults.injected();
        assert!(injected["slow answer"] > 0 && injected["dropped watch"] > 0);
        for _ in 0..200 {
            faults.draw(&Method::PATCH, false, false);
            faults.draw(&Method::GET, true, true);
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
                a.draw(&Method::PUT, false, false),
                b.draw(&Method::PUT, false, false)
            );
        }
    }
}
