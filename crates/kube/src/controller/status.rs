//! kstatus conditions (`Ready`, `Reconciling`, `Stalled`) as kubosh writes them: every
//! condition carries the generation it describes, and `lastTransitionTime` only moves when
//! the status does.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::api::condition::{READY, RECONCILING, STALLED};
use crate::state::NamespacedObject;

/// A condition of `kind` with `status` (`"True"`/`"False"`), stamped now.
pub fn condition(
    kind: &str,
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: kind.to_string(),
        status: if status { "True" } else { "False" }.to_string(),
        reason: reason.to_string(),
        message: message.to_string(),
        observed_generation: generation,
        last_transition_time: now_seconds(),
    }
}

/// Now, at the precision the API server keeps (whole seconds), so a status read back
/// compares equal to the one written.
fn now_seconds() -> Time {
    use k8s_openapi::jiff::Timestamp;
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Replaces the condition of the same type, keeping its `lastTransitionTime` when the status
/// did not change.
pub fn set_condition(conditions: &mut Vec<Condition>, new: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(old) => {
            let keep_time = old.status == new.status;
            let time = old.last_transition_time.clone();
            *old = new;
            if keep_time {
                old.last_transition_time = time;
            }
        }
        None => conditions.push(new),
    }
}

/// Sets the kstatus trio (`Ready`, `Reconciling`, `Stalled`: each its value, reason and
/// message) in `conditions` for `generation`, messages clipped to what a condition holds.
pub fn set_trio(
    conditions: &mut Vec<Condition>,
    generation: Option<i64>,
    ready: (bool, &str, &str),
    reconciling: (bool, &str, &str),
    stalled: (bool, &str, &str),
) {
    for (kind, (value, reason, message)) in [
        (READY, ready),
        (RECONCILING, reconciling),
        (STALLED, stalled),
    ] {
        let message = kubosh_base::secret::excerpt(message, MAX_MESSAGE);
        set_condition(
            conditions,
            condition(kind, value, reason, &message, generation),
        );
    }
}

/// Longest condition message kubosh writes (the apiserver allows 32 KiB).
pub const MAX_MESSAGE: usize = 4096;

/// The kstatus trio for a finished reconcile: Ready, or Stalled with `reason`.
pub fn outcome(
    conditions: &mut Vec<Condition>,
    result: Result<&str, (&str, &str)>,
    generation: Option<i64>,
) {
    match result {
        Ok(message) => {
            set_condition(
                conditions,
                condition(READY, true, "Succeeded", message, generation),
            );
            set_condition(
                conditions,
                condition(STALLED, false, "Succeeded", "", generation),
            );
        }
        Err((reason, message)) => {
            set_condition(
                conditions,
                condition(READY, false, reason, message, generation),
            );
            set_condition(
                conditions,
                condition(STALLED, true, reason, message, generation),
            );
        }
    }
    set_condition(
        conditions,
        condition(RECONCILING, false, "Done", "", generation),
    );
}

/// Writes `status` as `resource`'s whole status, in one server-side apply with field
/// manager `kubosh` (forced: the status is kubosh's alone).
pub async fn apply_status<K, S>(
    client: &kube::Client,
    resource: &K,
    status: &S,
) -> Result<(), kube::Error>
where
    K: NamespacedObject,
    S: serde::Serialize,
{
    apply_status_if(client, resource, status, None).await
}

/// [`apply_status`], only if the object is still at resource version `unchanged_since` when
/// one is given (else the apiserver answers `409 Conflict` and nothing is written).
pub(crate) async fn apply_status_if<K, S>(
    client: &kube::Client,
    resource: &K,
    status: &S,
    unchanged_since: Option<&str>,
) -> Result<(), kube::Error>
where
    K: NamespacedObject,
    S: serde::Serialize,
{
    use kube::ResourceExt;
    let api: kube::Api<K> =
        kube::Api::namespaced(client.clone(), &resource.namespace().unwrap_or_default());
    let mut patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(version) = unchanged_since {
        patch["metadata"] = serde_json::json!({"resourceVersion": version});
    }
    api.patch_status(
        &resource.name_any(),
        &kube::api::PatchParams::apply(crate::state::FIELD_MANAGER).force(),
        &kube::api::Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// How [`write_instance_state`] treats an `Instance` written since it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    /// Its status is written all the same (the writer read it after everything it knows of).
    Always,
    /// Nothing is written (`409 Conflict`): the state was judged on a stale copy.
    IfUnchanged,
}

/// Writes `instance`'s process state and its `Ready` condition (`ready`, `reason`) for its
/// generation, keeping the rest of its status but the processes and vitals (server-side
/// apply, field manager `kubosh`).
pub async fn write_instance_state(
    client: &kube::Client,
    instance: &crate::api::Instance,
    state: crate::api::ProcessState,
    ready: bool,
    reason: &str,
    overwrite: Overwrite,
) -> Result<(), kube::Error> {
    let generation = instance.metadata.generation;
    // The processes and vitals are the details refresh's (its own field manager): left out,
    // so this write never brings back an older copy of them.
    let mut next = crate::api::InstanceStatus {
        observed_generation: generation,
        process_state: Some(state),
        processes: Vec::new(),
        vitals: None,
        ..instance.status.clone().unwrap_or_default()
    };
    set_condition(
        &mut next.conditions,
        condition(READY, ready, reason, "", generation),
    );
    let version = match overwrite {
        Overwrite::Always => None,
        Overwrite::IfUnchanged => instance.metadata.resource_version.as_deref(),
    };
    apply_status_if(client, instance, &next, version).await
}

/// True when `conditions` say Ready for `generation`.
pub fn is_ready(conditions: &[Condition], generation: Option<i64>) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True" && c.observed_generation == generation)
}

/// Why a resource is not Ready for `generation`, when its conditions say so: `Stalled:
/// <reason>: <message>` or `<reason>: <message>` of a false `Ready`.
pub fn not_ready_because(conditions: &[Condition], generation: Option<i64>) -> Option<String> {
    let current = |kind: &str| {
        conditions
            .iter()
            .find(|c| c.type_ == kind && c.observed_generation == generation)
    };
    let said = |c: &Condition| match c.message.trim() {
        "" => c.reason.clone(),
        message => format!("{}: {message}", c.reason),
    };
    if let Some(stalled) = current(STALLED).filter(|c| c.status == "True") {
        return Some(format!("Stalled: {}", said(stalled)));
    }
    current(READY).filter(|c| c.status == "False").map(said)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut conds = Vec::new();
        set_condition(&mut conds, condition(READY, false, "A", "", Some(1)));
        let long_ago = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        conds[0].last_transition_time = long_ago.clone();
        set_condition(&mut conds, condition(READY, false, "B", "m", Some(2)));
        assert_eq!(conds[0].last_transition_time, long_ago);
        assert_eq!(
            (conds[0].reason.as_str(), conds[0].observed_generation),
            ("B", Some(2))
        );
        set_condition(&mut conds, condition(READY, true, "C", "", Some(2)));
        assert_ne!(conds[0].last_transition_time, long_ago);
        assert!(is_ready(&conds, Some(2)));
        assert!(!is_ready(&conds, Some(3)));
    }

    #[test]
    fn a_resource_says_why_it_is_not_ready() {
        let mut conds = Vec::new();
        assert_eq!(not_ready_because(&conds, Some(1)), None);
        set_condition(&mut conds, condition(READY, false, "Fetching", "", Some(1)));
        assert_eq!(
            not_ready_because(&conds, Some(1)).as_deref(),
            Some("Fetching")
        );
        assert_eq!(
            not_ready_because(&conds, Some(2)),
            None,
            "another generation"
        );
        set_condition(
            &mut conds,
            condition(STALLED, true, "InvalidTarball", "not a gzip file", Some(1)),
        );
        assert_eq!(
            not_ready_because(&conds, Some(1)).as_deref(),
            Some("Stalled: InvalidTarball: not a gzip file")
        );
    }
}
