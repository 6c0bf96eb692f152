//! The resurrector: what the controller does about instances that lost their agent or VM
//! (the health monitor's resurrector plugin and the Director's `scan_and_fix`, in one).
//!
//! The health watch tells it each instance it finds `Unresponsive` (an agent silent for longer
//! than the agent timeout; a VM deleted behind kubosh's back ends the same way, its agent
//! gone). Unless resurrection is off (the controller's switch, `spec.resurrection`) or the
//! deployment is in meltdown, the deployment is asked to deploy again, and every deploy of a
//! deployment with resurrection on recreates silent agents' VMs (`--fix`): on their
//! persistent disks, with their identity, addresses and DNS names, through the engine's
//! crash-safe path. A deploy or deletion that runs is never interrupted: the request waits
//! for its end.
//!
//! **Meltdown** (BOSH's defaults): more than `minimum_down` (5) instances *and* more than
//! `percent` (20 %) of the deployment down within `window` (600 s) stops resurrection for the
//! deployment (something bigger than a VM is wrong: a network, an AZ, the bus). It resumes
//! once every instance runs again, or when asked (`kubosh.io/reconcile-request`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;

use crate::api::Deployment;

/// When resurrection stops for a deployment (BOSH's `minimum_down_jobs`,
/// `percent_threshold`, `time_threshold`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MeltdownPolicy {
    /// Meltdown needs more instances than this down in the window.
    pub minimum_down: usize,
    /// ... and more than this share of the deployment, in percent.
    pub percent: u32,
    /// How far back instances that went down count.
    pub window: Duration,
}

impl Default for MeltdownPolicy {
    fn default() -> MeltdownPolicy {
        MeltdownPolicy {
            minimum_down: 5,
            percent: 20,
            window: Duration::from_secs(600),
        }
    }
}

impl MeltdownPolicy {
    /// Whether `down` instances of `total` down within the window is a meltdown.
    pub fn is_meltdown(&self, down: usize, total: usize) -> bool {
        down > self.minimum_down && down * 100 > total * self.percent as usize
    }
}

/// A deployment in meltdown: how many of how many instances went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meltdown {
    /// Instances down within the window.
    pub down: usize,
    /// Instances of the deployment.
    pub total: usize,
}

/// What the resurrector makes of an instance that went down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Just seen down: the next check decides (others that died with it are seen by then,
    /// and count towards a meltdown before anything is recreated).
    Settling,
    /// A deploy is asked to recreate it (already asked, or asked now: `newly`).
    Repair {
        /// Asked now (the deployment's reconcile is to be woken).
        newly: bool,
    },
    /// The deployment is in meltdown (`newly`: this instance tipped it).
    Meltdown {
        /// What tipped it.
        meltdown: Meltdown,
        /// Said for the first time.
        newly: bool,
    },
}

/// What the resurrector knows of one deployment.
#[derive(Debug, Default)]
struct Known {
    /// When each instance (by name) last went down, within the window.
    down: BTreeMap<String, Instant>,
    /// In meltdown since.
    meltdown: Option<Meltdown>,
    /// A deploy should run to recreate what is down (or look again at agents that came
    /// back after a deploy stalled on them).
    wanted: bool,
    /// Asked to resume: what is down until the next deploy starts is that deploy's to
    /// recreate, whatever the count.
    resumed: bool,
}

/// The resurrector's bookkeeping, per deployment uid ([module docs](self)).
#[derive(Debug)]
pub struct Resurrection {
    /// The controller-wide switch (`--no-resurrection` turns it off).
    enabled: bool,
    policy: MeltdownPolicy,
    /// How long an instance is seen down before a repair is asked ([`Verdict::Settling`]).
    settle: Duration,
    known: Mutex<HashMap<String, Known>>,
    /// Wakes a deployment's reconcile (set once the controller runs).
    wake: Mutex<Option<UnboundedSender<ObjectRef<Deployment>>>>,
}

impl Default for Resurrection {
    fn default() -> Resurrection {
        Resurrection::new(true, MeltdownPolicy::default())
    }
}

impl Resurrection {
    /// The resurrector, on or off for every deployment, stopping by `policy`.
    pub fn new(enabled: bool, policy: MeltdownPolicy) -> Resurrection {
        Resurrection {
            enabled,
            policy,
            settle: Duration::ZERO,
            known: Mutex::new(HashMap::new()),
            wake: Mutex::new(None),
        }
    }

    /// The resurrector asking for a repair only once an instance was seen down at an earlier
    /// health check, `check` apart (instances that die together are judged together). Half
    /// of it is enough: the checks are `check` apart by the clock, but each notes the time
    /// it started, a little later or earlier than its tick, and a full `check` would often
    /// wait for a third check.
    pub fn with_settle(self, check: Duration) -> Resurrection {
        Resurrection {
            settle: check / 2,
            ..self
        }
    }

    /// How long an instance is seen down before a repair is asked.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// When resurrection stops.
    pub fn policy(&self) -> MeltdownPolicy {
        self.policy
    }

    /// Whether the controller resurrects at all.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Where [`Resurrection::wake`] sends the deployments to reconcile.
    pub(crate) fn wake_with(&self, sender: UnboundedSender<ObjectRef<Deployment>>) {
        *self.wake.lock().unwrap_or_else(PoisonError::into_inner) = Some(sender);
    }

    /// Wakes the reconcile of `deployment`.
    pub(crate) fn wake(&self, deployment: ObjectRef<Deployment>) {
        if let Some(sender) = &*self.wake.lock().unwrap_or_else(PoisonError::into_inner) {
            let _ = sender.unbounded_send(deployment);
        }
    }

    fn with<T>(&self, uid: &str, f: impl FnOnce(&mut Known) -> T) -> T {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        f(known.entry(uid.to_string()).or_default())
    }

    /// Whether deploys of deployment `uid` (whose spec says `asked`) recreate silent agents'
    /// VMs: resurrection on for the controller and the deployment, and no meltdown.
    pub fn allows(&self, uid: &str, asked: bool) -> bool {
        self.enabled && asked && self.meltdown(uid).is_none()
    }

    /// The meltdown deployment `uid` is in, if it is.
    pub fn meltdown(&self, uid: &str) -> Option<Meltdown> {
        self.with(uid, |k| k.meltdown)
    }

    /// Instances `instances` of deployment `uid` (of `total` instances) are down at `now`
    /// (all the check found at once: a meltdown is decided on all of them).
    pub fn down(&self, uid: &str, instances: &[String], total: usize, now: Instant) -> Verdict {
        let (policy, settle) = (self.policy, self.settle);
        self.with(uid, |k| {
            k.down
                .retain(|_, at| now.saturating_duration_since(*at) <= policy.window);
            for instance in instances {
                k.down.entry(instance.clone()).or_insert(now);
            }
            if let Some(meltdown) = k.meltdown {
                return Verdict::Meltdown {
                    meltdown,
                    newly: false,
                };
            }
            if !k.resumed && policy.is_meltdown(k.down.len(), total) {
                let meltdown = Meltdown {
                    down: k.down.len(),
                    total,
                };
                k.meltdown = Some(meltdown);
                k.wanted = false;
                return Verdict::Meltdown {
                    meltdown,
                    newly: true,
                };
            }
            let settled = (instances.iter())
                .filter_map(|i| k.down.get(i))
                .any(|since| now.saturating_duration_since(*since) >= settle);
            if !settled && !k.resumed {
                return Verdict::Settling;
            }
            let newly = !k.wanted;
            k.wanted = true;
            Verdict::Repair { newly }
        })
    }

    /// Every instance of deployment `uid` runs: a meltdown ends (returned, to be said).
    pub fn all_up(&self, uid: &str) -> Option<Meltdown> {
        self.with(uid, |k| {
            k.down.clear();
            k.meltdown.take()
        })
    }

    /// Asked to resurrect again (`kubosh.io/reconcile-request`): a meltdown ends and what
    /// went down before no longer counts; the meltdown that ended, if any.
    pub fn resume(&self, uid: &str) -> Option<Meltdown> {
        self.with(uid, |k| {
            k.down.clear();
            k.wanted = k.meltdown.is_some();
            k.resumed = k.meltdown.is_some();
            k.meltdown.take()
        })
    }

    /// Asks for a deploy of `uid` (agents came back after a deploy stalled on them); whether
    /// it was not asked already.
    pub fn want(&self, uid: &str) -> bool {
        self.with(uid, |k| !std::mem::replace(&mut k.wanted, true))
    }

    /// What the `ResurrectionStopped` Event and the `Resurrection` condition say of
    /// `meltdown`.
    pub fn meltdown_message(&self, meltdown: Meltdown) -> String {
        let policy = self.policy;
        format!(
            "Resurrection stopped (meltdown): {} of {} instances went down within {}s (more than {} and more than {}%); it resumes once every instance runs again, or when asked with the kubosh.io/reconcile-request annotation",
            meltdown.down,
            meltdown.total,
            policy.window.as_secs(),
            policy.minimum_down,
            policy.percent
        )
    }

    /// Why the instances of deployment `uid` (whose spec says `asked`) that lose their agent
    /// or VM are not recreated, if they are not: a condition reason and the words.
    pub fn not_resurrected_because(
        &self,
        uid: &str,
        asked: bool,
    ) -> Option<(&'static str, String)> {
        if !self.enabled {
            return Some((
                RESURRECTION_OFF,
                "the controller runs with --no-resurrection".into(),
            ));
        }
        if !asked {
            return Some((RESURRECTION_OFF, "spec.resurrection is false".into()));
        }
        (self.meltdown(uid)).map(|m| (RESURRECTION_MELTDOWN, self.meltdown_message(m)))
    }

    /// Whether a deploy of `uid` is asked for.
    pub fn wanted(&self, uid: &str) -> bool {
        self.with(uid, |k| k.wanted)
    }

    /// A deploy of `uid` starts: it does what was asked.
    pub fn deploying(&self, uid: &str) {
        self.with(uid, |k| {
            k.wanted = false;
            k.resumed = false;
        });
    }

    /// Deployment `uid` is gone.
    pub fn forget(&self, uid: &str) {
        (self.known.lock().unwrap_or_else(PoisonError::into_inner)).remove(uid);
    }
}

/// The condition type that says whether resurrection runs for a deployment.
pub const RESURRECTION: &str = "Resurrection";

/// The condition reason of a deployment whose instances are not resurrected because
/// resurrection is off (the controller's switch or `spec.resurrection`).
pub const RESURRECTION_OFF: &str = "ResurrectionOff";

/// The condition reason of a deployment in meltdown.
pub const RESURRECTION_MELTDOWN: &str = "Meltdown";

#[cfg(test)]
mod tests {
    use super::*;

    /// BOSH's window with a meltdown from 2 instances down and more than `percent`.
    fn lowered(percent: u32) -> MeltdownPolicy {
        MeltdownPolicy {
            minimum_down: 1,
            percent,
            ..MeltdownPolicy::default()
        }
    }

    #[test]
    fn meltdown_needs_more_than_five_and_more_than_a_fifth() {
        let p = MeltdownPolicy::default();
        assert!(!p.is_meltdown(5, 5), "five is not more than five");
        assert!(p.is_meltdown(6, 10));
        assert!(p.is_meltdown(6, 29), "6 of 29 is 20.7 %");
        assert!(!p.is_meltdown(6, 30), "6 of 30 is 20 %, not more");
        assert!(!p.is_meltdown(50, 1000));
    }

    #[test]
    fn instances_down_are_repaired_until_a_meltdown_which_ends_when_all_are_up() {
        let r = Resurrection::new(true, lowered(20));
        let t0 = Instant::now();
        assert_eq!(
            r.down("d", &["web/0".into()], 5, t0),
            Verdict::Repair { newly: true }
        );
        assert_eq!(
            r.down("d", &["web/0".into()], 5, t0 + Duration::from_secs(15)),
            Verdict::Repair { newly: false },
            "the same instance, still down: asked once"
        );
        assert!(r.wanted("d") && r.allows("d", true) && !r.allows("d", false));
        r.deploying("d");
        assert!(!r.wanted("d"));
        let tipped = r.down("d", &["web/1".into()], 5, t0 + Duration::from_secs(20));
        assert_eq!(
            tipped,
            Verdict::Meltdown {
                meltdown: Meltdown { down: 2, total: 5 },
                newly: true
            }
        );
        assert!(!r.allows("d", true) && !r.wanted("d"));
        assert!(matches!(
            r.down("d", &["web/2".into()], 5, t0 + Duration::from_secs(30)),
            Verdict::Meltdown { newly: false, .. }
        ));
        assert_eq!(r.all_up("d"), Some(Meltdown { down: 2, total: 5 }));
        assert!(r.allows("d", true));
        assert_eq!(r.all_up("d"), None);
        assert!(
            Resurrection::new(false, MeltdownPolicy::default()).down("e", &["web/0".into()], 5, t0)
                == Verdict::Repair { newly: true }
                && !Resurrection::new(false, MeltdownPolicy::default()).allows("e", true),
            "the controller's switch wins"
        );
    }

    #[test]
    fn instances_down_together_are_judged_together() {
        let r = Resurrection::new(true, lowered(60));
        let both = ["web/0".to_string(), "web/1".to_string()];
        assert!(
            matches!(
                r.down("d", &both, 2, Instant::now()),
                Verdict::Meltdown { newly: true, .. }
            ),
            "no repair is asked for the first before the second tips the meltdown"
        );
        assert!(!r.wanted("d"));
    }

    #[test]
    fn an_instance_just_seen_down_waits_one_check_for_the_others() {
        let r = Resurrection::new(true, lowered(60)).with_settle(Duration::from_secs(5));
        let t0 = Instant::now();
        assert_eq!(r.down("d", &["web/0".into()], 2, t0), Verdict::Settling);
        assert!(!r.wanted("d"));
        let both = ["web/0".to_string(), "web/1".to_string()];
        assert!(
            matches!(
                r.down("d", &both, 2, t0 + Duration::from_secs(5)),
                Verdict::Meltdown { newly: true, .. }
            ),
            "the second death, seen within the settle time, makes a meltdown, not a repair"
        );
        let alone =
            Resurrection::new(true, MeltdownPolicy::default()).with_settle(Duration::from_secs(5));
        alone.down("e", &["web/0".into()], 10, t0);
        // The next check, which reached the instance a little sooner after its tick.
        assert_eq!(
            alone.down("e", &["web/0".into()], 10, t0 + Duration::from_millis(4900)),
            Verdict::Repair { newly: true }
        );
        let again =
            Resurrection::new(true, MeltdownPolicy::default()).with_settle(Duration::from_secs(5));
        again.down("f", &["web/0".into()], 10, t0);
        assert_eq!(
            again.down("f", &["web/0".into()], 10, t0 + Duration::from_millis(10)),
            Verdict::Settling,
            "not the same check"
        );
    }

    #[test]
    fn what_went_down_outside_the_window_no_longer_counts() {
        let r = Resurrection::new(true, lowered(0));
        let t0 = Instant::now();
        r.down("d", &["web/0".into()], 10, t0);
        assert_eq!(
            r.down("d", &["web/1".into()], 10, t0 + Duration::from_secs(601)),
            Verdict::Repair { newly: false }
        );
        assert!(matches!(
            r.down("d", &["web/2".into()], 10, t0 + Duration::from_secs(602)),
            Verdict::Meltdown { .. }
        ));
        assert_eq!(r.resume("d"), Some(Meltdown { down: 2, total: 10 }));
        assert!(r.wanted("d"), "resuming looks again at once");
        let all = [
            "web/0".to_string(),
            "web/1".to_string(),
            "web/2".to_string(),
        ];
        let later = t0 + Duration::from_secs(610);
        assert_eq!(
            r.down("d", &all, 10, later),
            Verdict::Repair { newly: false },
            "what is down when asked to resume is the next deploy's to recreate"
        );
        r.deploying("d");
        assert!(matches!(
            r.down("d", &all, 10, later),
            Verdict::Meltdown { .. }
        ));
    }
}
