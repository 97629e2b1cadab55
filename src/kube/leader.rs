//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's leader election does
//! it: the holder renews the Lease every `retry_period`; a candidate takes it over only once
//! the Lease has stayed unchanged, by its own clock, for `leaseDurationSeconds` (clocks of
//! different nodes are never compared); a holder that has not renewed within
//! `renew_deadline` stops acting at once, before anyone else may take over (renew deadline <
//! lease duration). Every write is guarded by the Lease's resource version, so two
//! candidates can never both win the same round.
//!
//! The decision is [`decide`], pure; [`Elector`] does the I/O.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, PostParams};
use tokio::sync::watch;
use tracing::{info, warn};

/// Timing of an election (upstream's defaults: 15 s, 10 s, 2 s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease is valid after its last renewal.
    pub lease_duration: Duration,
    /// A leader that has not renewed for this long steps down.
    pub renew_deadline: Duration,
    /// How often to try to acquire or renew.
    pub retry_period: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What a candidate should do with the Lease as it found it.
#[derive(Debug, Clone, PartialEq)]
pub enum Decision {
    /// Nobody holds it: create it (`None` found) or take it over, as `spec`.
    Acquire(LeaseSpec),
    /// It is ours: write it back renewed, as `spec`.
    Renew(LeaseSpec),
    /// Someone else holds it and it has not expired.
    Follow {
        /// The holder.
        holder: String,
    },
}

/// Decides, at `now`, what `identity` does with `current` (the Lease's spec, `None` when the
/// Lease does not exist), which this candidate has seen unchanged for `unchanged_for`.
pub fn decide(
    current: Option<&LeaseSpec>,
    identity: &str,
    now: jiff::Timestamp,
    lease_duration: Duration,
    unchanged_for: Duration,
) -> Decision {
    let seconds = i32::try_from(lease_duration.as_secs()).unwrap_or(i32::MAX);
    let fresh = |transitions: i32| LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(seconds),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    };
    let Some(spec) = current else {
        return Decision::Acquire(fresh(0));
    };
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let transitions = spec.lease_transitions.unwrap_or(0);
    if holder == identity {
        let mut renewed = spec.clone();
        renewed.renew_time = Some(MicroTime(now));
        renewed.lease_duration_seconds = Some(seconds);
        return Decision::Renew(renewed);
    }
    let valid_for =
        Duration::from_secs(u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0));
    if holder.is_empty() || unchanged_for >= valid_for {
        Decision::Acquire(fresh(transitions + 1))
    } else {
        Decision::Follow { holder }
    }
}

/// Runs an election for one identity and publishes whether it leads.
pub struct Elector {
    api: Api<Lease>,
    /// The Lease record last seen (holder, renew time, transitions) and when, by our clock.
    observed: std::sync::Mutex<Option<(String, tokio::time::Instant)>>,
    name: String,
    identity: String,
    timing: Timing,
    leading: watch::Sender<bool>,
}

impl Elector {
    /// An election on Lease `name` (in `api`'s namespace) as `identity`; the receiver says
    /// whether it currently leads.
    pub fn new(
        api: Api<Lease>,
        name: &str,
        identity: &str,
        timing: Timing,
    ) -> (Elector, watch::Receiver<bool>) {
        let (leading, rx) = watch::channel(false);
        (
            Elector {
                api,
                observed: std::sync::Mutex::new(None),
                name: name.to_owned(),
                identity: identity.to_owned(),
                timing,
                leading,
            },
            rx,
        )
    }

    /// One attempt: `Ok(true)` when it holds the Lease afterwards.
    async fn attempt(&self) -> Result<bool, kube::Error> {
        let now = jiff::Timestamp::now();
        let found = self.api.get_opt(&self.name).await?;
        let spec = found.as_ref().and_then(|l| l.spec.as_ref());
        let record = spec.map(|s| {
            format!(
                "{:?}/{:?}/{:?}",
                s.holder_identity, s.renew_time, s.lease_transitions
            )
        });
        let unchanged_for = {
            let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
            match (&*observed, &record) {
                (Some((seen, at)), Some(record)) if seen == record => at.elapsed(),
                (_, Some(record)) => {
                    *observed = Some((record.clone(), tokio::time::Instant::now()));
                    Duration::ZERO
                }
                (_, None) => Duration::ZERO,
            }
        };
        let decision = decide(
            spec,
            &self.identity,
            now,
            self.timing.lease_duration,
            unchanged_for,
        );
        let spec = match decision {
            Decision::Follow { .. } => return Ok(false),
            Decision::Acquire(spec) | Decision::Renew(spec) => spec,
        };
        let result = match found {
            None => {
                let lease = Lease {
                    metadata: kube::core::ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(spec),
                };
                self.api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                // Replace carries the resource version read: a concurrent writer makes this
                // a conflict, never a second winner.
                lease.spec = Some(spec);
                self.api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
            }
        };
        match result {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.is_conflict() || s.is_already_exists() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Campaigns and renews until `stop` fires or leadership is lost; returns whether it
    /// lost a leadership it had (the caller must stop acting at once; the process exits so
    /// it comes back as a candidate with fresh state). On `stop`, a held Lease is released
    /// so a successor need not wait for it to expire.
    pub async fn run(self, mut stop: watch::Receiver<bool>) -> bool {
        let mut last_renewal: Option<tokio::time::Instant> = None;
        loop {
            let leading = *self.leading.borrow();
            match self.attempt().await {
                Ok(true) => {
                    last_renewal = Some(tokio::time::Instant::now());
                    if !leading {
                        info!(lease = %self.name, identity = %self.identity, "Became the leader.");
                        let _ = self.leading.send(true);
                    }
                }
                Ok(false) if leading => {
                    warn!(lease = %self.name, "The Lease was taken over; stepping down.");
                    let _ = self.leading.send(false);
                    return true;
                }
                Ok(false) => {}
                Err(error) => warn!(lease = %self.name, %error, "Leader election request failed."),
            }
            if leading && last_renewal.is_none_or(|at| at.elapsed() >= self.timing.renew_deadline) {
                warn!(lease = %self.name, "Could not renew the Lease in time; stepping down.");
                let _ = self.leading.send(false);
                return true;
            }
            tokio::select! {
                _ = tokio::time::sleep(self.timing.retry_period) => {}
                _ = stop.changed() => {
                    if *self.leading.borrow() {
                        self.release().await;
                        let _ = self.leading.send(false);
                    }
                    return false;
                }
            }
        }
    }

    async fn release(&self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        if let Err(error) = self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            warn!(lease = %self.name, %error, "Releasing the Lease failed; it expires on its own.");
        } else {
            info!(lease = %self.name, "Released the Lease.");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_800_000_000).unwrap_or(jiff::Timestamp::UNIX_EPOCH)
    }

    fn held_by(holder: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(now())),
            lease_transitions: Some(3),
            ..LeaseSpec::default()
        }
    }

    const FIFTEEN: Duration = Duration::from_secs(15);

    fn seconds(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    #[test]
    fn a_missing_lease_is_acquired() {
        match decide(None, "a", now(), FIFTEEN, Duration::ZERO) {
            Decision::Acquire(spec) => {
                assert_eq!(spec.holder_identity.as_deref(), Some("a"));
                assert_eq!(spec.lease_transitions, Some(0));
                assert_eq!(spec.lease_duration_seconds, Some(15));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_held_lease_is_followed_until_unchanged_for_its_duration_then_taken_over() {
        let lease = held_by("b");
        assert_eq!(
            decide(Some(&lease), "a", now(), FIFTEEN, seconds(14)),
            Decision::Follow { holder: "b".into() }
        );
        match decide(Some(&lease), "a", now(), FIFTEEN, seconds(15)) {
            Decision::Acquire(spec) => {
                assert_eq!(spec.holder_identity.as_deref(), Some("a"));
                assert_eq!(spec.lease_transitions, Some(4), "a transition is counted");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_holder_renews_and_a_released_lease_is_free() {
        match decide(Some(&held_by("a")), "a", now(), FIFTEEN, seconds(5)) {
            Decision::Renew(spec) => {
                assert_eq!(spec.renew_time, Some(MicroTime(now())));
                assert_eq!(spec.lease_transitions, Some(3), "renewing is no transition");
            }
            other => panic!("{other:?}"),
        }
        let mut released = held_by("b");
        released.holder_identity = None;
        assert!(matches!(
            decide(Some(&released), "a", now(), FIFTEEN, Duration::ZERO),
            Decision::Acquire(_)
        ));
    }
}
