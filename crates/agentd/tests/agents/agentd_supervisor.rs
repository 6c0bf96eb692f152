//! The supervisor runs real job processes from real monit files.

use crate::agentd_common;

use std::time::Duration;

use agentd_common::*;
use kubosh_agentd::layout::Layout;
use kubosh_agentd::supervisor::{JobState, ProcessState, Supervisor, SupervisorConfig};

const LIMIT: Duration = Duration::from_secs(20);

fn config(layout: &Layout) -> SupervisorConfig {
    let mut c = SupervisorConfig::new(layout.clone());
    c.tick = Duration::from_millis(100);
    c.start_timeout = Duration::from_secs(10);
    c.stop_timeout = Duration::from_secs(5);
    c.kill_grace = Duration::from_secs(1);
    c.foreground_grace = Duration::from_millis(300);
    c.restart_backoff = Duration::from_millis(100);
    c.restart_backoff_max = Duration::from_secs(1);
    c
}

fn layout() -> (tempfile::TempDir, Layout) {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    layout.create().unwrap();
    (dir, layout)
}

fn state_of(sup: &Supervisor, name: &str) -> ProcessState {
    sup.status()
        .processes
        .iter()
        .find(|p| p.name == name)
        .map(|p| p.state)
        .unwrap()
}

#[tokio::test]
async fn runs_an_http_server_restarts_it_and_stops_it() {
    let (_dir, layout) = layout();
    let port = free_port();
    let run = layout.job_run_dir("web");
    let pidfile = run.join("web.pid");
    let monit = format!(
        r#"
check process web
  with pidfile {pid}
  start program "/bin/sh -c 'mkdir -p {run}; echo $$ > {pid}; exec python3 -m http.server {port} --bind 127.0.0.1'"
    with timeout 10 seconds
  stop program "/bin/sh -c 'kill $(cat {pid})'"
  group vcap
  if failed port {port} then restart
"#,
        pid = pidfile.display(),
        run = run.display(),
    );
    write_file(&layout.job_monit_file("web"), &monit, 0o644);

    let sup = Supervisor::new(config(&layout));
    let warnings = sup.load_jobs(&["web".to_string()]).await.unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(state_of(&sup, "web"), ProcessState::Unknown);
    sup.start().await.unwrap();
    assert_eq!(sup.status().job_state, JobState::Starting);

    wait_for(LIMIT, "web running", || {
        (sup.status().job_state == JobState::Running).then_some(())
    })
    .await;
    let answer = wait_for(LIMIT, "an HTTP answer", || http_get(port)).await;
    assert!(answer.contains("200"), "{answer}");
    let first = sup.pid("web").unwrap();
    assert_eq!(
        std::fs::read_to_string(&pidfile).unwrap().trim(),
        first.to_string()
    );

    // get_state's shape.
    let status = sup.status();
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["job_state"], "running");
    assert_eq!(json["processes"][0]["name"], "web");
    assert_eq!(json["processes"][0]["state"], "running");
    wait_for(LIMIT, "vitals", || {
        let p = sup.status().processes.remove(0);
        (p.mem.kb.is_some_and(|kb| kb > 0) && p.uptime.secs.is_some()).then_some(())
    })
    .await;

    // Killed: restarted.
    unsafe { libc::kill(first, libc::SIGKILL) };
    let second = wait_for(LIMIT, "a new web process", || {
        sup.pid("web")
            .filter(|&p| p != first && state_of(&sup, "web") == ProcessState::Running)
    })
    .await;
    assert_ne!(first, second);
    let answer = wait_for(LIMIT, "an HTTP answer after restart", || http_get(port)).await;
    assert!(answer.contains("200"), "{answer}");

    // Stopped: nothing left.
    let port_arg = port.to_string();
    tokio::time::timeout(LIMIT, sup.stop())
        .await
        .unwrap()
        .unwrap();
    let status = sup.status();
    assert_eq!(status.job_state, JobState::Stopped);
    assert_eq!(status.processes[0].state, ProcessState::Unknown);
    assert!(layout.monit_stopped_file().exists());
    assert!(live_processes(&["http.server", &port_arg]).is_empty());
    assert!(http_get(port).is_none());

    // Started again.
    sup.start().await.unwrap();
    assert!(!layout.monit_stopped_file().exists());
    wait_for(LIMIT, "web running again", || {
        (sup.status().job_state == JobState::Running).then_some(())
    })
    .await;
    wait_for(LIMIT, "an HTTP answer after start", || http_get(port)).await;
    tokio::time::timeout(LIMIT, sup.shutdown())
        .await
        .unwrap()
        .unwrap();
    assert!(live_processes(&["http.server", &port_arg]).is_empty());
}

#[tokio::test]
async fn daemons_foreground_programs_and_dependency_order() {
    let (dir, layout) = layout();
    let order = dir.path().join("order");
    let run = layout.job_run_dir("app");
    let (s1, s2, s3) = (unique_secs(), unique_secs(), unique_secs());
    let monit = format!(
        r#"
check process app
  with pidfile {run}/app.pid
  start program "/bin/sh -c 'echo app >> {order}; exec sleep {s2}'"
  stop program "/bin/sh -c 'echo stop-app >> {order}'" with timeout 1 seconds
  group vcap
  depends on db
"#,
        run = run.display(),
        order = order.display(),
    );
    write_file(&layout.job_monit_file("app"), &monit, 0o644);
    let monit = format!(
        r#"
# A daemonizing start program: forks the service, writes its pid, exits.
check process db
  with pidfile {run}/db.pid
  start program "/bin/sh -c 'mkdir -p {run}; sleep 0.5; echo db >> {order}; sleep {s1} & echo $! > {run}/db.pid'"
  stop program "/bin/sh -c 'echo stop-db >> {order}; kill $(cat {run}/db.pid)'"
  group vcap
"#,
        run = run.display(),
        order = order.display(),
    );
    write_file(&layout.job_monit_file("db"), &monit, 0o644);
    // An extra *.monit file, with a service that has no pidfile at all.
    write_file(
        &layout.job_dir("db").join("bare.monit"),
        &format!("check process bare\n  start program \"exec sleep {s3}\"\n  group vcap\n"),
        0o644,
    );

    let sup = Supervisor::new(config(&layout));
    let warnings = sup
        .load_jobs(&["app".to_string(), "db".to_string()])
        .await
        .unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].message.contains("no pidfile"));
    let names: Vec<String> = sup.status().processes.into_iter().map(|p| p.name).collect();
    assert_eq!(names, ["db", "bare", "app"]);

    sup.start().await.unwrap();
    wait_for(LIMIT, "all running", || {
        (sup.status().job_state == JobState::Running).then_some(())
    })
    .await;
    let db_pid = sup.pid("db").unwrap();
    let s1_arg = s1.to_string();
    assert_eq!(live_processes(&["sleep", &s1_arg]), [db_pid]);
    // The foreground program (or the shell running it) is the service.
    let s2_arg = s2.to_string();
    let app_sleep = live_processes(&["sleep", &s2_arg]);
    assert_eq!(app_sleep.len(), 1);
    let app_pid = sup.pid("app").unwrap();
    let ppid = std::fs::read_to_string(format!("/proc/{}/stat", app_sleep[0])).unwrap();
    assert!(
        app_sleep[0] == app_pid || ppid.contains(&format!(") S {app_pid} ")),
        "{app_pid} {ppid}"
    );
    assert_eq!(std::fs::read_to_string(&order).unwrap(), "db\napp\n");

    tokio::time::timeout(LIMIT, sup.stop())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(&order).unwrap(),
        "db\napp\nstop-app\nstop-db\n"
    );
    for s in [s1, s2, s3] {
        let s = s.to_string();
        assert!(live_processes(&["sleep", &s]).is_empty(), "sleep {s} left");
    }
}

#[tokio::test]
async fn unmonitored_processes_are_not_restarted() {
    let (_dir, layout) = layout();
    let s = unique_secs();
    write_file(
        &layout.job_monit_file("w"),
        &format!("check process w\n  start program \"exec sleep {s}\"\n  group vcap\n"),
        0o644,
    );
    let sup = Supervisor::new(config(&layout));
    sup.load_jobs(&["w".to_string()]).await.unwrap();
    sup.start().await.unwrap();
    let pid = wait_for(LIMIT, "w running", || {
        sup.pid("w")
            .filter(|_| state_of(&sup, "w") == ProcessState::Running)
    })
    .await;

    sup.unmonitor().await;
    assert_eq!(state_of(&sup, "w"), ProcessState::Unknown);
    assert_eq!(sup.status().job_state, JobState::Failing);
    unsafe { libc::kill(pid, libc::SIGKILL) };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let s_arg = s.to_string();
    assert!(live_processes(&["sleep", &s_arg]).is_empty());
    assert_eq!(state_of(&sup, "w"), ProcessState::Unknown);

    sup.start().await.unwrap();
    wait_for(LIMIT, "w restarted", || {
        sup.pid("w")
            .filter(|&p| p != pid && state_of(&sup, "w") == ProcessState::Running)
    })
    .await;
    drop(sup);
}

#[tokio::test]
async fn failing_start_programs_are_failing_and_retried() {
    let (dir, layout) = layout();
    let attempts = dir.path().join("attempts");
    write_file(
        &layout.job_monit_file("bad"),
        &format!(
            "check process bad\n  with pidfile /nonexistent/bad.pid\n  start program \"echo x >> {}; exit 3\"\n  group vcap\n",
            attempts.display()
        ),
        0o644,
    );
    let sup = Supervisor::new(config(&layout));
    sup.load_jobs(&["bad".to_string()]).await.unwrap();
    sup.start().await.unwrap();
    wait_for(LIMIT, "several attempts", || {
        let n = std::fs::read_to_string(&attempts)
            .unwrap_or_default()
            .lines()
            .count();
        (n >= 3).then_some(())
    })
    .await;
    assert_eq!(state_of(&sup, "bad"), ProcessState::Failing);
    assert_eq!(sup.status().job_state, JobState::Failing);
    let log = std::fs::read_to_string(layout.monit_service_log("bad")).unwrap_or_default();
    assert!(log.is_empty(), "{log}");
    tokio::time::timeout(LIMIT, sup.stop())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(sup.status().job_state, JobState::Stopped);
}

#[tokio::test]
async fn dropping_the_supervisor_leaves_no_process() {
    let (dir, layout) = layout();
    let (s1, s2) = (unique_secs(), unique_secs());
    let run = dir.path().join("run");
    write_file(
        &layout.job_monit_file("d"),
        &format!(
            "check process d1\n  with pidfile {run}/d1.pid\n  start program \"mkdir -p {run}; (sleep {s1} & sleep {s2}) & echo $! > {run}/d1.pid\"\n  group vcap\n",
            run = run.display()
        ),
        0o644,
    );
    let sup = Supervisor::new(config(&layout));
    sup.load_jobs(&["d".to_string()]).await.unwrap();
    sup.start().await.unwrap();
    wait_for(LIMIT, "d1 running", || {
        (sup.status().job_state == JobState::Running).then_some(())
    })
    .await;
    let (a1, a2) = (s1.to_string(), s2.to_string());
    assert_eq!(live_processes(&["sleep", &a1]).len(), 1);
    assert_eq!(live_processes(&["sleep", &a2]).len(), 1);
    drop(sup);
    wait_for(Duration::from_secs(5), "no process left", || {
        (live_processes(&["sleep", &a1]).is_empty() && live_processes(&["sleep", &a2]).is_empty())
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn bad_monit_files_name_file_and_line() {
    let (_dir, layout) = layout();
    write_file(
        &layout.job_monit_file("x"),
        "check process x\n  start program \"a\"\n  depends on y\n",
        0o644,
    );
    let sup = Supervisor::new(config(&layout));
    let err = sup.load_jobs(&["x".to_string()]).await.unwrap_err();
    assert!(err.to_string().starts_with("jobs/x/monit:3:"), "{err}");
    write_file(&layout.job_monit_file("x"), "check process\n", 0o644);
    let err = sup.load_jobs(&["x".to_string()]).await.unwrap_err();
    assert!(err.to_string().starts_with("jobs/x/monit:1:"), "{err}");
    // No monit file at all: no services, and that is running.
    std::fs::remove_file(layout.job_monit_file("x")).unwrap();
    sup.load_jobs(&["x".to_string()]).await.unwrap();
    assert_eq!(sup.status().job_state, JobState::Running);
}
