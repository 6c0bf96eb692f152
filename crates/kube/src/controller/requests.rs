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
//! `lastHandledReconcileRequest`); one whose value equals the acknowledged one is done.

use kubosh_engine::{InstanceAction, Scope};

use crate::api::Deployment;

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
    pub parsed: Result<(InstanceAction, Option<Scope>), String>,
}

/// The requests of `deployment` that its status has not acknowledged.
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
        let status = deployment.status.as_ref();
        let value = |key: &str| {
            annotations
                .as_ref()
                .and_then(|a| a.get(key))
                .filter(|v| !v.trim().is_empty())
                .cloned()
        };
        let action = value(ACTION_ANNOTATION)
            .filter(|v| status.and_then(|s| s.last_handled_action.as_ref()) != Some(v))
            .map(|value| ActionRequest {
                parsed: parse_action(&value),
                value,
            });
        let reconcile = value(RECONCILE_ANNOTATION)
            .filter(|v| status.and_then(|s| s.last_handled_reconcile_request.as_ref()) != Some(v));
        Pending { action, reconcile }
    }

    /// Nothing asked.
    pub fn is_empty(&self) -> bool {
        self.action.is_none() && self.reconcile.is_none()
    }
}

/// `"<verb> [<group>[/<index or uuid>]][ @<anything>]"`.
pub fn parse_action(text: &str) -> Result<(InstanceAction, Option<Scope>), String> {
    let command = text.split_once(" @").map_or(text, |(c, _)| c);
    let words: Vec<&str> = command.split_whitespace().collect();
    let usage = || {
        format!(
            "cannot read {ACTION_ANNOTATION} {text:?}: expected \"start|stop|stop --hard|restart|recreate [GROUP[/INDEX-OR-ID]]\""
        )
    };
    let (action, rest) = match words.as_slice() {
        ["start", rest @ ..] => (InstanceAction::Start, rest),
        ["stop", "--hard", rest @ ..] => (InstanceAction::StopHard, rest),
        ["stop", rest @ ..] => (InstanceAction::Stop, rest),
        ["restart", rest @ ..] => (InstanceAction::Restart, rest),
        ["recreate", rest @ ..] => (InstanceAction::Recreate, rest),
        _ => return Err(usage()),
    };
    let scope = match rest {
        [] => None,
        [target] => {
            let (group, instance) = match target.split_once('/') {
                Some((g, i)) => (g, Some(i)),
                None => (*target, None),
            };
            if group.is_empty() || instance.is_some_and(str::is_empty) {
                return Err(usage());
            }
            Some(Scope {
                group: group.to_string(),
                instance: instance.map(str::to_string),
            })
        }
        _ => return Err(usage()),
    };
    Ok((action, scope))
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

    #[test]
    fn actions_read_as_bosh_commands_with_an_optional_target_and_suffix() {
        assert_eq!(parse_action("restart"), Ok((InstanceAction::Restart, None)));
        assert_eq!(
            parse_action("stop --hard web"),
            Ok((InstanceAction::StopHard, scope("web", None)))
        );
        assert_eq!(
            parse_action("  recreate web/0 @2026-11-25"),
            Ok((InstanceAction::Recreate, scope("web", Some("0"))))
        );
        assert_eq!(
            parse_action("start api/6f1c"),
            Ok((InstanceAction::Start, scope("api", Some("6f1c"))))
        );
        assert_eq!(parse_action("stop"), Ok((InstanceAction::Stop, None)));
        for bad in [
            "",
            "reboot web",
            "restart web api",
            "restart /0",
            "stop web/",
            "@x",
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
