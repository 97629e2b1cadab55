//! Wakes tail readers when events are appended, without ever making a writer wait for them.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Debug)]
struct State {
    /// The highest sequence number written so far.
    published: u64,
    wakers: Vec<Waker>,
}

/// Publishes "events up to seq N are readable" to blocking and async waiters.
#[derive(Debug)]
pub(crate) struct Notifier {
    state: Mutex<State>,
    written: Condvar,
}

impl Notifier {
    pub(crate) fn new(published: u64) -> Self {
        Notifier {
            state: Mutex::new(State {
                published,
                wakers: Vec::new(),
            }),
            written: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn publish(&self, seq: u64) {
        let wakers = {
            let mut state = self.lock();
            state.published = state.published.max(seq);
            std::mem::take(&mut state.wakers)
        };
        self.written.notify_all();
        for waker in wakers {
            waker.wake();
        }
    }

    /// Blocks until an event with sequence number `>= seq` has been written, or `timeout`
    /// passes. Returns whether it was written.
    pub(crate) fn wait_for(&self, seq: u64, timeout: Duration) -> bool {
        let state = self.lock();
        let (state, _) = self
            .written
            .wait_timeout_while(state, timeout, |s| s.published < seq)
            .unwrap_or_else(|p| p.into_inner());
        state.published >= seq
    }

    /// Resolves once an event with sequence number `>= seq` has been written.
    pub(crate) fn published(&self, seq: u64) -> Published<'_> {
        Published {
            notifier: self,
            seq,
        }
    }
}

pub(crate) struct Published<'a> {
    notifier: &'a Notifier,
    seq: u64,
}

impl Future for Published<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut state = self.notifier.lock();
        if state.published >= self.seq {
            return Poll::Ready(());
        }
        if !state.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            state.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}
