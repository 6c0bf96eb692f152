//! What an operator asks of a `Deployment` besides its spec, with annotations (so GitOps
//! tools, which own the spec, see no diff):
//!
//! - `kubosh.io/action: "<verb> [<group>[/<index or uuid>]]"` runs `bosh start`, `stop`,
//!   `stop --hard`, `restart` or `recreate` on the whole deployment, an instance group or
//!   one instance, e.g. `kubectl annotate boshdeployment/cf kubosh.io/action="restart web/0"`.
//!   Anything after ` @` is ignored, so the same action can be asked again with a new
//!   suffix (`"restart web @2"`).
//! - `kubosh.io/reconcile-request: "<anything>"` forces a deploy now (agents asked, the
//!   cloud compared), as Flux's `reconcile.fluxcd.io/requestedAt`.
//!
//! A request is handled when its value is copied to the status (`lastHandledAction`,
//! `lastHandledReconcileRequest`); one whose value equals the acknowledged one is done. The
//! same values are kept in kubosh's annotation [`HANDLED_ANNOTATION`], so a wiped status (or
//! a restore without status) neither runs an action again nor loses the acknowledgement.

use serde::{Deserialize, Serialize};

use kubosh_engine::cck::Resolution;
use kubosh_engine::{InstanceAction, Scope};

use crate::api::{Deployment, DeploymentStatus};
pub use crate::state::HANDLED_ANNOTATION;

/// The annotation asking for an instance action.
pub const ACTION_ANNOTATION: &str = "kubosh.io/action";
/// The annotation asking for a deploy now.
pub const RECONCILE_ANNOTATION: &str = "kubosh.io/reconcile-request";

/// An action request not handled yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActionRequest {
    /// The annotation's value, acknowledged as it is.
    pub value: String,
    /// What it asks, or why it cannot be done.
    pub parsed: Result<Requested, String>,
}

/// What the action annotation asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Requested {
    /// An instance command (`start`, `stop`, `stop --hard`, `restart`, `recreate`), for the
    /// instances in the scope (all when `None`).
    Instance(InstanceAction, Option<Scope>),
    /// `cck`: a scan; what it finds goes to `status.problems`.
    Scan,
    /// `resolve <ID|all> <RESOLUTION>`: the problem of the last scan with that id (every one
    /// that offers the resolution when `None`) resolved so.
    Resolve {
        /// The problem's id, or `None` for all.
        problem: Option<String>,
        /// How.
        resolution: Resolution,
    },
}

impl std::fmt::Display for Requested {
    /// How it reads in a task description: `restart web/0`, `scan and fix`, `resolve all
    /// recreate_vm`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Requested::Instance(action, scope) => f.write_str(&describe(*action, scope.as_ref())),
            Requested::Scan => f.write_str("scan and fix"),
            Requested::Resolve {
                problem,
                resolution,
            } => write!(
                f,
                "resolve {} {}",
                problem.as_deref().unwrap_or("all"),
                resolution.name()
            ),
        }
    }
}

/// The request values a deployment acknowledged (its status, else [`HANDLED_ANNOTATION`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Handled {
    /// The last `kubosh.io/action` value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// The last `kubosh.io/reconcile-request` value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconcile_request: Option<String>,
}

impl Handled {
    /// What `deployment` acknowledged: each value from the status, or from the annotation
    /// where the status has none.
    pub fn of(deployment: &Deployment) -> Handled {
        let kept: Handled = (deployment.metadata.annotations.as_ref())
            .and_then(|a| a.get(HANDLED_ANNOTATION))
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default();
        let status = deployment.status.as_ref();
        Handled {
            action: status
                .and_then(|s| s.last_handled_action.clone())
                .or(kept.action),
            reconcile_request: status
                .and_then(|s| s.last_handled_reconcile_request.clone())
                .or(kept.reconcile_request),
        }
    }

    /// Copies the acknowledged values into `status` (where a wipe left none).
    pub fn fill(&self, status: &mut DeploymentStatus) {
        if status.last_handled_action.is_none() {
            status.last_handled_action = self.action.clone();
        }
        if status.last_handled_reconcile_request.is_none() {
            status.last_handled_reconcile_request = self.reconcile_request.clone();
        }
    }

    /// What `status` acknowledges.
    pub fn in_status(status: &DeploymentStatus) -> Handled {
        Handled {
            action: status.last_handled_action.clone(),
            reconcile_request: status.last_handled_reconcile_request.clone(),
        }
    }

    /// The annotation's value.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// The requests of `deployment` that it has not acknowledged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pending {
    /// The instance action.
    pub action: Option<ActionRequest>,
    /// The reconcile request's value.
    pub reconcile: Option<String>,
}

impl Pending {
    /// Of `deployment`.
    pub fn of(deployment: &Deployment) -> Pending {
        let annotations = &deployment.metadata.annotations;
        let handled = Handled::of(deployment);
        let value = |key: &str| {
            annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .filter(|v| !v.trim().is_empty())
                .cloned()
        };
        let action = value(ACTION_ANNOTATION)
            .filter(|v| handled.action.as_ref() != Some(v))
            .map(|value| ActionRequest {
                parsed: parse_action(&value),
                value,
            });
        let reconcile =
            value(RECONCILE_ANNOTATION).filter(|v| handled.reconcile_request.as_ref() != Some(v));
        Pending { action, reconcile }
    }

    /// Nothing asked.
    pub fn is_empty(&self) -> bool {
        self.action.is_none() && self.reconcile.is_none()
    }
}

/// `"<verb> [<group>[/<index or uuid>]][ @<anything>]"`, `"cck"`, or
/// `"resolve <ID|all> <RESOLUTION>"`.
pub fn parse_action(text: &str) -> Result<Requested, String> {
    let command = text.split_once(" @").map_or(text, |(c, _)| c);
    let words: Vec<&str> = command.split_whitespace().collect();
    let usage = || {
        format!(
            "cannot read {ACTION_ANNOTATION} {text:?}: expected \"start|stop|stop --hard|restart|recreate [GROUP[/INDEX-OR-ID]]\", \"cck\" or \"resolve ID|all RESOLUTION\""
        )
    };
    let (action, rest) = match words.as_slice() {
        ["cck"] => return Ok(Requested::Scan),
        ["resolve", problem, resolution] => {
            let resolution = Resolution::parse(resolution).ok_or_else(usage)?;
            let problem = (*problem != "all").then(|| problem.to_string());
            return Ok(Requested::Resolve {
                problem,
                resolution,
            });
        }
        ["start", rest @ ..] => (InstanceAction::Start, rest),
        ["stop", "--hard", rest @ ..] => (InstanceAction::StopHard, rest),
        ["stop", rest @ ..] => (InstanceAction::Stop, rest),
        ["restart", rest @ ..] => (InstanceAction::Restart, rest),
        ["recreate", rest @ ..] => (InstanceAction::Recreate, rest),
        _ => return Err(usage()),
    };
    let scope = match rest {
        [] => None,
        [target] => Some(Scope::parse(target).ok_or_else(usage)?),
        _ => return Err(usage()),
    };
    Ok(Requested::Instance(action, scope))
}

/// How an action reads in a task description: `restart web/0`.
pub fn describe(action: InstanceAction, scope: Option<&Scope>) -> String {
    let verb = match action {
        InstanceAction::Start => "start",
        InstanceAction::Stop => "stop",
        InstanceAction::StopHard => "stop --hard",
        InstanceAction::Restart => "restart",
        InstanceAction::Recreate => "recreate",
    };
    match scope {
        None => format!("{verb} deployment"),
        Some(Scope {
            group,
            instance: None,
        }) => format!("{verb} {group}"),
        Some(Scope {
            group,
            instance: Some(i),
        }) => format!("{verb} {group}/{i}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scope(group: &str, instance: Option<&str>) -> Option<Scope> {
        Some(Scope {
            group: group.into(),
            instance: instance.map(Into::into),
        })
    }

    fn deployment(annotations: &[(&str, &str)], status: Option<DeploymentStatus>) -> Deployment {
        let mut d = Deployment::new(
            "web",
            serde_json::from_value(serde_json::json!({"manifest": {}})).unwrap(),
        );
        d.metadata.annotations = Some(
            (annotations.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        d.status = status;
        d
    }

    #[test]
    fn a_wiped_status_keeps_the_acknowledgement_in_the_annotation() {
        let kept = Handled {
            action: Some("recreate web/1".into()),
            reconcile_request: Some("r1".into()),
        }
        .to_annotation();
        let asked = [
            (ACTION_ANNOTATION, "recreate web/1"),
            (RECONCILE_ANNOTATION, "r1"),
        ];
        // Status wiped: the annotation still says both were handled.
        let mut with_kept = asked.to_vec();
        with_kept.push((HANDLED_ANNOTATION, &kept));
        let d = deployment(&with_kept, None);
        assert!(Pending::of(&d).is_empty());
        let mut status = DeploymentStatus::default();
        Handled::of(&d).fill(&mut status);
        assert_eq!(
            status.last_handled_action.as_deref(),
            Some("recreate web/1")
        );
        assert_eq!(status.last_handled_reconcile_request.as_deref(), Some("r1"));
        // Without either, both are pending; a newer value is pending whatever was kept.
        assert_eq!(
            Pending::of(&deployment(&asked, None)).reconcile.as_deref(),
            Some("r1")
        );
        let mut newer = with_kept.clone();
        newer[0] = (ACTION_ANNOTATION, "recreate web/1 @2");
        let pending = Pending::of(&deployment(&newer, None));
        assert_eq!(pending.action.unwrap().value, "recreate web/1 @2");
        // The status wins over the annotation where both say something.
        let status = DeploymentStatus {
            last_handled_action: Some("stop web".into()),
            ..DeploymentStatus::default()
        };
        let d = deployment(&with_kept, Some(status));
        assert_eq!(Handled::of(&d).action.as_deref(), Some("stop web"));
        assert_eq!(Handled::of(&d).reconcile_request.as_deref(), Some("r1"));
    }

    #[test]
    fn actions_read_as_bosh_commands_with_an_optional_target_and_suffix() {
        let instance = |a, s| Ok(Requested::Instance(a, s));
        assert_eq!(
            parse_action("restart"),
            instance(InstanceAction::Restart, None)
        );
        assert_eq!(
            parse_action("stop --hard web"),
            instance(InstanceAction::StopHard, scope("web", None))
        );
        assert_eq!(
            parse_action("  recreate web/0 @2026-11-25"),
            instance(InstanceAction::Recreate, scope("web", Some("0")))
        );
        assert_eq!(
            parse_action("start api/6f1c"),
            instance(InstanceAction::Start, scope("api", Some("6f1c")))
        );
        assert_eq!(parse_action("stop"), instance(InstanceAction::Stop, None));
        assert_eq!(parse_action("cck @1"), Ok(Requested::Scan));
        assert_eq!(
            parse_action("resolve 3f2a91c0 reboot_vm"),
            Ok(Requested::Resolve {
                problem: Some("3f2a91c0".into()),
                resolution: Resolution::RebootVm
            })
        );
        let all = parse_action("resolve all recreate_vm @2").unwrap();
        assert_eq!(all.to_string(), "resolve all recreate_vm");
        for bad in [
            "",
            "reboot web",
            "restart web api",
            "restart /0",
            "stop web/",
            "@x",
            "resolve all",
            "resolve all reboot",
            "cck web",
        ] {
            let e = parse_action(bad).expect_err(bad);
            assert!(
                e.contains("kubosh.io/action") && e.contains("restart"),
                "{e}"
            );
        }
        assert_eq!(
            describe(InstanceAction::StopHard, scope("web", Some("1")).as_ref()),
            "stop --hard web/1"
        );
        assert_eq!(
            describe(InstanceAction::Restart, None),
            "restart deployment"
        );
    }
}
