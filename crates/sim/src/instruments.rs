//! What tests steer and observe on either side of the simulation: per-method latencies,
//! injected faults, the call log and per-method counters.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use kubosh_cloud::ErrorKind;

/// One call as the log keeps it: the method and its main argument (a VM, disk or stemcell
/// CID, an image path, or the agent id of an agent call).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Call {
    /// The method, e.g. `create_vm` or `get_task`.
    pub method: String,
    /// The main argument (empty when the method has none, e.g. `info`).
    pub target: String,
}

impl Call {
    /// A call of `method` on `target`.
    pub fn new(method: impl Into<String>, target: impl Into<String>) -> Call {
        Call {
            method: method.into(),
            target: target.into(),
        }
    }
}

/// Which side of the simulation a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// A CPI method of [`super::SimCloud`].
    Cloud,
    /// An agent action of [`super::SimAgents`].
    Agent,
}

/// One call on the timeline both sides share ([`super::SimCloud::timeline`]), so a test can
/// check the order of cloud and agent calls together.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    /// The side called.
    pub side: Side,
    /// The method, e.g. `attach_disk` or `mount_disk`.
    pub method: String,
    /// The call's target as [`Call::target`] has it (a CID for the cloud, the agent id for
    /// an agent).
    pub target: String,
    /// An agent call's first argument when it is a string (e.g. the disk CID of
    /// `mount_disk`); empty otherwise.
    pub arg: String,
}

/// What an injected fault does to a cloud call.
#[derive(Debug, Clone, PartialEq)]
pub enum CloudEffect {
    /// Answer with this CPI error.
    Fail {
        /// The error kind (`Bosh::Clouds::*`).
        kind: ErrorKind,
        /// The message.
        message: String,
        /// `ok_to_retry` of the answer.
        ok_to_retry: bool,
    },
    /// Wait this long, then answer normally; `None` never answers (the caller must time
    /// out).
    Hang(Option<Duration>),
}

/// What an injected fault does to an agent call.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentEffect {
    /// The action fails with this cause: a synchronous action answers `Action Failed
    /// <method>: <cause>`, an asynchronous one starts a task that fails with it.
    Fail(String),
    /// No reply: the caller gets the transport timeout.
    NoReply,
}

/// A fault armed on one method: its effect, how many calls it affects and, optionally, the
/// one target (main argument or agent id) it applies to.
#[derive(Debug, Clone, PartialEq)]
pub struct Fault<E> {
    /// What happens.
    pub effect: E,
    /// How many calls it affects; every call when `None`.
    pub times: Option<u32>,
    /// Only calls on this target (a CID for the cloud, an agent id for agents).
    pub target: Option<String>,
    /// How many matching calls go through untouched before the fault fires.
    pub after: u32,
}

/// A fault of a [`super::SimCloud`] method.
pub type CloudFault = Fault<CloudEffect>;

/// A fault of a [`super::SimAgents`] method.
pub type AgentFault = Fault<AgentEffect>;

impl<E> Fault<E> {
    fn always(effect: E) -> Fault<E> {
        Fault {
            effect,
            times: None,
            target: None,
            after: 0,
        }
    }

    /// Limits the fault to the next `n` matching calls.
    pub fn times(mut self, n: u32) -> Fault<E> {
        self.times = Some(n);
        self
    }

    /// Lets the next `n` matching calls through before the fault fires.
    pub fn after(mut self, n: u32) -> Fault<E> {
        self.after = n;
        self
    }

    /// Limits the fault to calls on `target` (a CID, or an agent id).
    pub fn only_for(mut self, target: impl Into<String>) -> Fault<E> {
        self.target = Some(target.into());
        self
    }
}

impl CloudFault {
    /// Every call fails with `kind` and `message`.
    pub fn fail(kind: ErrorKind, message: impl Into<String>, ok_to_retry: bool) -> CloudFault {
        Fault::always(CloudEffect::Fail {
            kind,
            message: message.into(),
            ok_to_retry,
        })
    }

    /// Every call hangs forever.
    pub fn hang() -> CloudFault {
        Fault::always(CloudEffect::Hang(None))
    }

    /// Every call waits `delay` before it is answered normally.
    pub fn hang_for(delay: Duration) -> CloudFault {
        Fault::always(CloudEffect::Hang(Some(delay)))
    }
}

impl AgentFault {
    /// Every call fails with `cause`.
    pub fn fail(cause: impl Into<String>) -> AgentFault {
        Fault::always(AgentEffect::Fail(cause.into()))
    }

    /// No call gets a reply.
    pub fn no_reply() -> AgentFault {
        Fault::always(AgentEffect::NoReply)
    }
}

/// The steering and observing methods both sides share, forwarded to their `instruments`
/// field (an `Instruments<$effect>` under a mutex): one definition for [`super::SimCloud`]
/// and [`super::SimAgents`].
macro_rules! forward_to_instruments {
    ($fault:ty, $target:literal) => {
        /// Every call of `method` takes `latency` (zero: answers at once).
        pub fn set_latency(&self, method: &str, latency: std::time::Duration) {
            lock(&self.instruments).set_latency(method, latency);
        }

        /// The `n`-th call of `method` takes [`super::spread_latency`]`(least, most, n)`:
        /// spread over the range as real clouds' and agents' calls are, the same every run.
        pub fn set_latency_range(
            &self,
            method: &str,
            least: std::time::Duration,
            most: std::time::Duration,
        ) {
            lock(&self.instruments).set_latency_range(method, least, most);
        }

        #[doc = concat!("Arms a fault on `method` (its target is ", $target, "; several faults on one method fire in the order armed).")]
        pub fn inject(&self, method: &str, fault: $fault) {
            lock(&self.instruments).inject(method, fault);
        }

        /// Disarms every fault.
        pub fn clear_faults(&self) {
            lock(&self.instruments).clear_faults();
        }

        #[doc = concat!("The calls so far (target: ", $target, "), oldest first; empty when [`super::SimConfig::record_calls`] is off.")]
        pub fn calls(&self) -> Vec<super::Call> {
            lock(&self.instruments).calls()
        }

        /// How often `method` was called.
        pub fn count(&self, method: &str) -> u64 {
            lock(&self.instruments).count(method)
        }

        /// Calls per method.
        pub fn counts(&self) -> std::collections::BTreeMap<String, u64> {
            lock(&self.instruments).counts()
        }

        /// Forgets the call log and the counters.
        pub fn reset_calls(&self) {
            lock(&self.instruments).reset_calls();
        }
    };
}

pub(crate) use forward_to_instruments;

/// Latencies, faults, call log and counters of one side. Kept under one lock so that a call
/// costs one short critical section here.
#[derive(Debug)]
pub struct Instruments<E> {
    latencies: HashMap<String, Latency>,
    faults: HashMap<String, Vec<Fault<E>>>,
    calls: Vec<Call>,
    counts: HashMap<String, u64>,
    record_calls: bool,
}

/// How long a method's calls take.
#[derive(Debug, Clone, Copy)]
enum Latency {
    Fixed(Duration),
    /// Each call its own, drawn from the range by its number.
    Spread {
        least: Duration,
        most: Duration,
    },
}

/// The latency of the `n`-th call (from 1) of a method whose calls take `least` to `most`:
/// spread evenly over the range by a hash of `n` (splitmix64), so a run is repeatable and a
/// benchmark can tell what its calls took.
pub fn spread_latency(least: Duration, most: Duration, n: u64) -> Duration {
    let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    let span = most.saturating_sub(least).as_millis() as u64;
    least + Duration::from_millis(z % (span + 1))
}

/// What a call must do, decided when it arrives.
#[derive(Debug)]
pub struct Entry<E> {
    /// The method's configured latency.
    pub latency: Duration,
    /// The fault that fired, if any.
    pub fault: Option<E>,
}

impl<E: Clone> Instruments<E> {
    pub fn new(record_calls: bool) -> Instruments<E> {
        Instruments {
            latencies: HashMap::new(),
            faults: HashMap::new(),
            calls: Vec::new(),
            counts: HashMap::new(),
            record_calls,
        }
    }

    /// Records a call of `method` on `target` and decides its latency and fault (counting
    /// the fault down).
    pub fn enter(&mut self, method: &str, target: &str) -> Entry<E> {
        match self.counts.get_mut(method) {
            Some(n) => *n += 1,
            None => {
                self.counts.insert(method.to_string(), 1);
            }
        }
        if self.record_calls {
            self.calls.push(Call::new(method, target));
        }
        let latency = match self.latencies.get(method) {
            None => Duration::ZERO,
            Some(Latency::Fixed(latency)) => *latency,
            Some(Latency::Spread { least, most }) => {
                spread_latency(*least, *most, self.counts.get(method).copied().unwrap_or(1))
            }
        };
        Entry {
            latency,
            fault: self.fire(method, target),
        }
    }

    fn fire(&mut self, method: &str, target: &str) -> Option<E> {
        let armed = self.faults.get_mut(method)?;
        let index = armed
            .iter()
            .position(|f| f.target.as_deref().is_none_or(|t| t == target))?;
        let fault = &mut armed[index];
        if fault.after > 0 {
            fault.after -= 1;
            return None;
        }
        let effect = fault.effect.clone();
        if let Some(n) = &mut fault.times {
            *n = n.saturating_sub(1);
            if *n == 0 {
                armed.remove(index);
                if armed.is_empty() {
                    self.faults.remove(method);
                }
            }
        }
        Some(effect)
    }

    pub fn set_latency(&mut self, method: &str, latency: Duration) {
        if latency.is_zero() {
            self.latencies.remove(method);
        } else {
            self.latencies
                .insert(method.to_string(), Latency::Fixed(latency));
        }
    }

    pub fn set_latency_range(&mut self, method: &str, least: Duration, most: Duration) {
        let spread = Latency::Spread {
            least,
            most: most.max(least),
        };
        self.latencies.insert(method.to_string(), spread);
    }

    pub fn inject(&mut self, method: &str, fault: Fault<E>) {
        if fault.times == Some(0) {
            return;
        }
        self.faults
            .entry(method.to_string())
            .or_default()
            .push(fault);
    }

    pub fn clear_faults(&mut self) {
        self.faults.clear();
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.clone()
    }

    pub fn count(&self, method: &str) -> u64 {
        self.counts.get(method).copied().unwrap_or(0)
    }

    pub fn counts(&self) -> BTreeMap<String, u64> {
        self.counts.iter().map(|(m, n)| (m.clone(), *n)).collect()
    }

    pub fn reset_calls(&mut self) {
        self.calls.clear();
        self.counts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_delayed_fault_lets_the_first_calls_through() {
        let mut i: Instruments<CloudEffect> = Instruments::new(false);
        i.inject("create_vm", CloudFault::hang().after(2).times(1));
        assert_eq!(i.enter("create_vm", "a").fault, None);
        assert_eq!(i.enter("create_vm", "a").fault, None);
        assert_eq!(
            i.enter("create_vm", "a").fault,
            Some(CloudEffect::Hang(None))
        );
        assert_eq!(i.enter("create_vm", "a").fault, None);
    }

    #[test]
    fn counted_and_targeted_faults_fire_as_armed() {
        let mut i: Instruments<CloudEffect> = Instruments::new(true);
        i.inject(
            "create_vm",
            CloudFault::fail(ErrorKind::VmCreationFailed, "no capacity", true).times(2),
        );
        i.inject("delete_vm", CloudFault::hang().only_for("vm-2"));
        for _ in 0..2 {
            assert!(matches!(
                i.enter("create_vm", "a").fault,
                Some(CloudEffect::Fail {
                    ok_to_retry: true,
                    ..
                })
            ));
        }
        assert_eq!(i.enter("create_vm", "a").fault, None);
        assert_eq!(i.enter("delete_vm", "vm-1").fault, None);
        assert_eq!(
            i.enter("delete_vm", "vm-2").fault,
            Some(CloudEffect::Hang(None))
        );
        assert_eq!(
            i.enter("delete_vm", "vm-2").fault,
            Some(CloudEffect::Hang(None))
        );
        assert_eq!(i.count("create_vm"), 3);
        assert_eq!(i.count("delete_vm"), 3);
        assert_eq!(i.calls().len(), 6);
        assert_eq!(i.calls()[3], Call::new("delete_vm", "vm-1"));
        i.reset_calls();
        assert!(i.calls().is_empty() && i.counts().is_empty());
    }

    #[test]
    fn latencies_default_to_zero_and_the_log_can_be_off() {
        let mut i: Instruments<AgentEffect> = Instruments::new(false);
        i.set_latency("apply", Duration::from_secs(3));
        assert_eq!(i.enter("apply", "agent").latency, Duration::from_secs(3));
        assert_eq!(i.enter("ping", "agent").latency, Duration::ZERO);
        assert!(i.calls().is_empty());
        assert_eq!(i.count("apply"), 1);
    }
}
