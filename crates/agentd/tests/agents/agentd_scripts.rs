//! Lifecycle and drain scripts run for real.

use crate::agentd_common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agentd_common::*;
use kubosh_agentd::drain::{DrainError, DrainParams, DrainSpec, Drainer};
use kubosh_agentd::layout::Layout;
use kubosh_agentd::scripts::{NextState, PreStopEnv, ScriptRunner, ScriptsError};

const LIMIT: Duration = Duration::from_secs(30);

fn layout() -> (tempfile::TempDir, Layout) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path().join("vcap"));
    layout.create().unwrap();
    (dir, layout)
}

fn jobs(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// Waits (bounded) for `other` to exist after creating `me`: only passes when both scripts run
/// at the same time.
fn rendezvous(dir: &std::path::Path, me: &str, other: &str) -> String {
    let d = dir.display();
    format!(
        "touch {d}/{me}; i=0; while [ ! -e {d}/{other} ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done; [ -e {d}/{other} ] || exit 9"
    )
}

#[tokio::test]
async fn lifecycle_scripts_run_in_parallel_log_and_report_failures() {
    let (dir, layout) = layout();
    let meet = dir.path();
    write_script(
        &layout.job_script("a", "pre-start"),
        &format!(
            "{}\necho a-out; echo a-err >&2\necho \"home=[$HOME] path=$PATH x=$X\" > {}/a-env",
            rendezvous(meet, "a-here", "b-here"),
            meet.display()
        ),
    );
    write_script(
        &layout.job_script("b", "pre-start"),
        &format!(
            "{}\necho b-failed >&2; exit 3",
            rendezvous(meet, "b-here", "a-here")
        ),
    );
    std::fs::create_dir_all(layout.job_dir("c").join("bin")).unwrap();

    let runner = ScriptRunner::new(layout.clone());
    let env = BTreeMap::from([("X".to_string(), "1".to_string())]);
    let err = tokio::time::timeout(
        LIMIT,
        runner.run("pre-start", &jobs(&["a", "b", "c"]), &env),
    )
    .await
    .unwrap()
    .unwrap_err();
    let ScriptsError::Failed {
        script,
        failed,
        succeeded,
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(script, "pre-start");
    assert_eq!(succeeded, &["a"]);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].job, "b");
    let msg = err.to_string();
    assert!(
        msg.starts_with("1 of 2 pre-start scripts failed. Failed Jobs: b. Successful Jobs: a."),
        "{msg}"
    );
    assert!(msg.contains("exited with status 3"), "{msg}");
    assert!(msg.contains("sys/log/b/pre-start.stderr.log"), "{msg}");

    let log =
        |job: &str, f: &str| std::fs::read_to_string(layout.job_log_dir(job).join(f)).unwrap();
    assert_eq!(log("a", "pre-start.stdout.log"), "a-out\n");
    assert_eq!(log("a", "pre-start.stderr.log"), "a-err\n");
    assert_eq!(log("b", "pre-start.stderr.log"), "b-failed\n");
    assert_eq!(
        std::fs::read_to_string(meet.join("a-env")).unwrap(),
        "home=[] path=/usr/sbin:/usr/bin:/sbin:/bin x=1\n"
    );

    // Logs are appended to; a job without failures passes.
    std::fs::remove_file(layout.job_script("b", "pre-start")).unwrap();
    std::fs::remove_file(meet.join("b-here")).unwrap();
    write_script(&layout.job_script("a", "pre-start"), "echo again");
    let report = runner
        .run("pre-start", &jobs(&["a", "b", "c"]), &BTreeMap::new())
        .await
        .unwrap();
    assert_eq!(report.succeeded, ["a"]);
    assert_eq!(report.skipped, ["b", "c"]);
    assert_eq!(log("a", "pre-start.stdout.log"), "a-out\nagain\n");
}

#[tokio::test]
async fn pre_stop_gets_the_next_states() {
    let (dir, layout) = layout();
    let out = dir.path().join("pre-stop-env");
    write_script(
        &layout.job_script("a", "pre-stop"),
        &format!(
            "echo \"$BOSH_VM_NEXT_STATE $BOSH_INSTANCE_NEXT_STATE $BOSH_DEPLOYMENT_NEXT_STATE\" > {}",
            out.display()
        ),
    );
    let env = PreStopEnv {
        vm: NextState::Delete,
        instance: NextState::Delete,
        deployment: NextState::Keep,
    }
    .env();
    ScriptRunner::new(layout)
        .run("pre-stop", &jobs(&["a"]), &env)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(out).unwrap(),
        "delete delete keep\n"
    );
}

#[tokio::test]
async fn scripts_can_time_out_and_names_are_checked() {
    let (_dir, layout) = layout();
    let s = unique_secs();
    write_script(&layout.job_script("a", "post-start"), &format!("sleep {s}"));
    let runner = ScriptRunner::new(layout).with_timeout(Some(Duration::from_millis(300)));
    let err = tokio::time::timeout(
        LIMIT,
        runner.run("post-start", &jobs(&["a"]), &BTreeMap::new()),
    )
    .await
    .unwrap()
    .unwrap_err();
    assert!(err.to_string().contains("timed out"), "{err}");
    assert!(live_processes(&["sleep", &s.to_string()]).is_empty());
    assert!(matches!(
        runner.run("../x", &jobs(&["a"]), &BTreeMap::new()).await,
        Err(ScriptsError::InvalidName(_))
    ));
    assert!(matches!(
        runner
            .run("post-start", &jobs(&[".."]), &BTreeMap::new())
            .await,
        Err(ScriptsError::InvalidName(_))
    ));
}

fn params() -> DrainParams {
    let old = DrainSpec {
        jobs: jobs(&["a"]),
        configuration_hash: "h1".into(),
        packages: BTreeMap::from([("p".into(), "1".into())]),
        persistent_disk: 1024,
    };
    let new = DrainSpec {
        configuration_hash: "h2".into(),
        packages: BTreeMap::from([("p".into(), "2".into()), ("q".into(), "3".into())]),
        persistent_disk: 2048,
        ..old.clone()
    };
    DrainParams::update(&old, &new)
}

fn drainer(layout: &Layout) -> Drainer {
    Drainer::new(layout.clone()).with_second(Duration::from_millis(50))
}

#[tokio::test]
async fn drain_waits_the_seconds_printed() {
    let (dir, layout) = layout();
    let rec = dir.path().join("drain-args");
    write_script(
        &layout.job_script("a", "drain"),
        &format!(
            "echo \"$* | $BOSH_JOB_STATE | $BOSH_JOB_NEXT_STATE\" >> {}\necho 4",
            rec.display()
        ),
    );
    let started = Instant::now();
    let report = tokio::time::timeout(
        LIMIT,
        drainer(&layout).run(&jobs(&["a", "nodrain"]), &params()),
    )
    .await
    .unwrap()
    .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(report.len(), 1);
    assert_eq!(report[0].job, "a");
    assert_eq!(report[0].results, [4]);
    assert_eq!(report[0].waited_secs, 4);
    assert_eq!(
        std::fs::read_to_string(&rec).unwrap(),
        "job_changed hash_changed p q | {\"persistent_disk\":1024} | {\"persistent_disk\":2048}\n"
    );
}

#[tokio::test]
async fn dynamic_drain_reruns_with_job_check_status() {
    let (dir, layout) = layout();
    let rec = dir.path().join("drain-args");
    let count = dir.path().join("count");
    write_script(
        &layout.job_script("a", "drain"),
        &format!(
            "echo \"$* | ${{BOSH_JOB_NEXT_STATE-unset}}\" >> {rec}\n\
             n=$(cat {count} 2>/dev/null || echo 0); n=$((n+1)); echo $n > {count}\n\
             if [ $n -lt 3 ]; then echo -2; else echo 0; fi",
            rec = rec.display(),
            count = count.display()
        ),
    );
    let report = tokio::time::timeout(LIMIT, drainer(&layout).run(&jobs(&["a"]), &params()))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report[0].results, [-2, -2, 0]);
    assert_eq!(report[0].waited_secs, 4);
    assert_eq!(
        std::fs::read_to_string(&rec).unwrap(),
        "job_changed hash_changed p q | {\"persistent_disk\":2048}\n\
         job_check_status hash_unchanged | unset\n\
         job_check_status hash_unchanged | unset\n"
    );
}

#[tokio::test]
async fn failing_drain_scripts_fail_with_their_output() {
    let (dir, layout) = layout();
    let meet = dir.path();
    write_script(
        &layout.job_script("bad", "drain"),
        &format!(
            "{}\necho 5; echo boom >&2; exit 1",
            rendezvous(meet, "bad", "good")
        ),
    );
    write_script(
        &layout.job_script("good", "drain"),
        &format!("{}\necho 0", rendezvous(meet, "good", "bad")),
    );
    write_script(
        &layout.job_script("chatty", "drain"),
        "echo 'draining...'; echo 0",
    );
    let err = tokio::time::timeout(
        LIMIT,
        drainer(&layout).run(&jobs(&["bad", "good", "chatty"]), &params()),
    )
    .await
    .unwrap()
    .unwrap_err();
    let DrainError::Failed { failed, succeeded } = &err else {
        panic!("{err}");
    };
    assert_eq!(succeeded, &["good"]);
    let names: Vec<&str> = failed.iter().map(|f| f.job.as_str()).collect();
    assert_eq!(names, ["bad", "chatty"]);
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "2 of 3 drain scripts failed. Failed Jobs: bad, chatty. Successful Jobs: good."
        ),
        "{msg}"
    );
    assert!(
        msg.contains("exited with status 1, stdout: '5', stderr: 'boom'"),
        "{msg}"
    );
    assert!(
        msg.contains("did not return a signed integer, stdout: 'draining...\n0'"),
        "{msg}"
    );
}

#[tokio::test]
async fn cancelled_drain_kills_the_script() {
    let (_dir, layout) = layout();
    let s = unique_secs();
    write_script(
        &layout.job_script("a", "drain"),
        &format!("sleep {s}; echo 0"),
    );
    let d = drainer(&layout);
    let p = params();
    let list = jobs(&["a"]);
    let cancel = tokio::time::sleep(Duration::from_millis(300));
    let err = tokio::time::timeout(LIMIT, d.run_cancellable(&list, &p, cancel))
        .await
        .unwrap()
        .unwrap_err();
    assert!(
        err.to_string().contains("cancelled by user request"),
        "{err}"
    );
    assert!(live_processes(&["sleep", &s.to_string()]).is_empty());
}
