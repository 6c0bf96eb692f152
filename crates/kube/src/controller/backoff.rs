//! Per-object exponential backoff for failed reconciles (kube-runtime's `error_policy` is
//! stateless, kube-rs/kube#1916): the delay grows with each failure of the same object and
//! starts over after a success. Delays come from backon.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use backon::BackoffBuilder;

/// The first delay.
const MIN: Duration = Duration::from_secs(5);

/// The longest delay.
const MAX: Duration = Duration::from_secs(300);

/// Backoff state by object uid.
#[derive(Debug, Default)]
pub struct Backoffs {
    by_uid: Mutex<HashMap<String, backon::ExponentialBackoff>>,
}

impl Backoffs {
    /// The delay before `uid`'s next attempt (5 s, doubling, with jitter, at most 5 min).
    pub fn next(&self, uid: &str) -> Duration {
        let mut map = self.by_uid.lock().unwrap_or_else(PoisonError::into_inner);
        map.entry(uid.to_string())
            .or_insert_with(|| {
                backon::ExponentialBuilder::default()
                    .with_min_delay(MIN)
                    .with_max_delay(MAX)
                    .with_jitter()
                    .without_max_times()
                    .build()
            })
            .next()
            .unwrap_or(MAX)
    }

    /// `uid` succeeded: its next failure starts from the first delay again.
    pub fn reset(&self, uid: &str) {
        self.by_uid
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_grow_per_object_and_start_over_after_a_success() {
        let b = Backoffs::default();
        let first = b.next("a");
        assert!(first >= MIN && first < MIN * 3, "{first:?}");
        let later = (0..20).map(|_| b.next("a")).last().unwrap();
        assert!(later >= MAX / 2 && later <= MAX * 2, "{later:?}");
        assert!(b.next("b") < MIN * 3, "another object has its own");
        b.reset("a");
        assert!(b.next("a") < MIN * 3);
    }
}
