//! `kubosh instances`: `bosh instances [--ps] [--vitals] [--details]` for deployments made
//! with `kubosh deploy`: each instance with its process state, AZ and addresses; with
//! `--ps` each of its processes; with `--vitals` its machine's load, CPU, memory, swap and
//! disks (and each process's uptime, CPU and memory), from its agent's `get_state ["full"]`.
//! The table is bosh-cli's ([`super::table`]).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Args;

use super::deploy::{Failure, run_command};
use super::table::{Table, stdout_is_tty};
use kubosh_bosh::agent::protocol::{DiskVitals, MemVitals, Process, Vitals};
use kubosh_director::DirectorConfig;
use kubosh_engine::instances::InstanceInfo;

/// Arguments of `kubosh instances`.
#[derive(Debug, Args)]
pub struct InstancesArgs {
    /// The director configuration file (state directory, CPI, NATS, blobstore).
    #[arg(short = 'd', long = "director", value_name = "DIRECTOR.yml")]
    pub director: PathBuf,
    /// The deployment; without it, every deployment of the director.
    pub name: Option<String>,
    #[command(flatten)]
    pub shown: Shown,
    /// Print for a terminal (title, header, count) even when stdout is not one.
    #[arg(long)]
    pub tty: bool,
}

/// What `bosh instances` shows besides each instance: its processes (`--ps`), the vitals,
/// the details, only what is not running (`--failing`).
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub struct Shown {
    /// Show each instance's processes.
    #[arg(short = 'p', long = "ps")]
    pub processes: bool,
    /// Show the machines' and the processes' vitals.
    #[arg(long)]
    pub vitals: bool,
    /// Show the desired state, VM CID, disk CIDs, agent id, index and bootstrap flag.
    #[arg(short = 'i', long)]
    pub details: bool,
    /// Show only instances (and processes) that are not running.
    #[arg(long)]
    pub failing: bool,
}

/// Runs `kubosh instances`.
pub fn run(args: &InstancesArgs) -> ExitCode {
    run_command(async { instances(args).await.map(|text| (text, ExitCode::SUCCESS)) })
}

async fn instances(args: &InstancesArgs) -> Result<String, Failure> {
    let config = DirectorConfig::load(&args.director).map_err(|e| e.to_string())?;
    let names = match &args.name {
        Some(name) if config.deployment_dir(name).is_dir() => vec![name.clone()],
        Some(name) => return Err(format!("Deployment '{name}' doesn't exist").into()),
        None => config.deployment_names()?,
    };
    let cpis = config.saved_cpi_config()?;
    let tty = args.tty || stdout_is_tty();
    let mut out = String::new();
    for name in names {
        let events = Arc::new(kubosh_engine::NoEvents);
        let engine = config.engine(&name, events, false, cpis.clone()).await?;
        let infos = engine.instance_infos().await.map_err(|e| e.to_string())?;
        if !out.is_empty() && tty {
            out.push('\n');
        }
        out.push_str(&table(&name, &infos, &args.shown).render(tty));
    }
    if tty {
        out.push_str("\nSucceeded\n");
    }
    Ok(out)
}

/// The deployment's table, with the columns `args` ask for.
pub(super) fn table(name: &str, infos: &[InstanceInfo], args: &Shown) -> Table {
    let columns = Columns(args);
    let mut sections = Vec::new();
    for info in infos {
        if args.failing && is_running(info) {
            continue;
        }
        let mut rows = vec![columns.instance(name, info)];
        if args.processes {
            let shown = info
                .processes
                .iter()
                .filter(|p| !args.failing || p.state != "running");
            rows.extend(shown.map(|p| columns.process(p)));
        }
        sections.push(rows);
    }
    Table {
        title: format!("Deployment '{name}'"),
        content: "instances".into(),
        header: columns.header(),
        sections,
        sort: true,
    }
}

/// bosh-cli's `VMInfo.InstanceState`: the agent's state, but nothing for a running
/// instance whose processes are not listed (when its agent said so: an `Instance` whose
/// details were not read yet has no vitals either, and shows its state).
fn instance_state(info: &InstanceInfo) -> &str {
    let details_read = info.vitals.is_some();
    if info.process_state != "running" || !info.processes.is_empty() || !details_read {
        &info.process_state
    } else {
        ""
    }
}

fn is_running(info: &InstanceInfo) -> bool {
    instance_state(info) == "running" && info.processes.iter().all(|p| p.state == "running")
}

/// Which columns, in bosh-cli's order (`InstanceTable.AsValues`).
struct Columns<'a>(&'a Shown);

impl Columns<'_> {
    fn header(&self) -> Vec<String> {
        let mut h = vec!["Instance"];
        if self.0.processes {
            h.push("Process");
        }
        h.extend(["Process State", "AZ", "IPs", "Deployment"]);
        if self.0.details {
            h.extend([
                "State",
                "VM CID",
                "VM Type",
                "Disk CIDs",
                "Agent ID",
                "Index",
            ]);
            h.extend(["Bootstrap", "Ignore"]);
        }
        if self.0.vitals {
            h.extend([
                "VM Created At",
                "Uptime",
                "Load\n(1m, 5m, 15m)",
                "CPU\nTotal",
            ]);
            h.extend([
                "CPU\nUser",
                "CPU\nSys",
                "CPU\nWait",
                "Memory\nUsage",
                "Swap\nUsage",
            ]);
            h.extend([
                "System\nDisk Usage",
                "Ephemeral\nDisk Usage",
                "Persistent\nDisk Usage",
            ]);
        }
        h.into_iter().map(String::from).collect()
    }

    fn instance(&self, deployment: &str, info: &InstanceInfo) -> Vec<String> {
        let mut row = vec![format!("{}/{}", info.group, info.id)];
        if self.0.processes {
            row.push(String::new());
        }
        row.extend([
            instance_state(info).to_string(),
            info.az.clone().unwrap_or_default(),
            info.ips.join("\n"),
            deployment.to_string(),
        ]);
        if self.0.details {
            row.extend([
                info.state.clone(),
                info.vm_cid.clone().unwrap_or_default(),
                String::new(),
                info.disk_cids.join("\n"),
                info.agent_id.clone().unwrap_or_default(),
                info.index.to_string(),
                info.bootstrap.to_string(),
                "false".into(),
            ]);
        }
        if self.0.vitals {
            row.extend(machine_vitals(info.vitals.as_ref()));
        }
        row
    }

    fn process(&self, p: &Process) -> Vec<String> {
        let mut row = vec![String::new(), p.name.clone(), p.state.clone()];
        row.extend(["", "", ""].map(String::from));
        if self.0.details {
            row.extend(std::iter::repeat_n(String::new(), 8));
        }
        if self.0.vitals {
            let number = |n: Option<&serde_json::Number>| n.and_then(serde_json::Number::as_f64);
            let uptime = number(p.uptime.as_ref().and_then(|u| u.secs.as_ref()));
            let cpu = number(p.cpu.as_ref().and_then(|c| c.total.as_ref()));
            let mem = p.mem.as_ref();
            let memory = match (
                number(mem.and_then(|m| m.percent.as_ref())),
                number(mem.and_then(|m| m.kb.as_ref())),
            ) {
                (Some(percent), Some(kb)) => format!("{percent:.1}% ({})", si_bytes(kb * 1000.0)),
                _ => String::new(),
            };
            row.push(String::new());
            row.push(uptime.map(|s| duration(s as u64)).unwrap_or_default());
            row.push(String::new());
            row.push(cpu.map(|c| format!("{c:.1}%")).unwrap_or_default());
            row.extend(["", "", ""].map(String::from));
            row.push(memory);
            row.extend(["", "", "", ""].map(String::from));
        }
        row
    }
}

/// The machine's vitals, from `VM Created At` to `Persistent Disk Usage`.
fn machine_vitals(vitals: Option<&Vitals>) -> Vec<String> {
    let Some(v) = vitals else {
        return vec![String::new(); 12];
    };
    let percent = |s: Option<&String>| {
        s.filter(|s| !s.is_empty())
            .map(|s| format!("{s}%"))
            .unwrap_or_default()
    };
    let cpu = v.cpu.as_ref();
    let disk = |name: &str| disk_usage(v.disk.as_ref().and_then(|d| d.get(name)));
    vec![
        String::new(),
        (v.uptime.as_ref().and_then(|u| u.secs))
            .map(duration)
            .unwrap_or_default(),
        v.load.as_ref().map(|l| l.join(", ")).unwrap_or_default(),
        String::new(),
        percent(cpu.and_then(|c| c.user.as_ref())),
        percent(cpu.and_then(|c| c.sys.as_ref())),
        percent(cpu.and_then(|c| c.wait.as_ref())),
        memory(v.mem.as_ref()),
        memory(v.swap.as_ref()),
        disk("system"),
        disk("ephemeral"),
        disk("persistent"),
    ]
}

/// bosh-cli's `ValueMemSize`: `12% (1.2 GB)`.
fn memory(m: Option<&MemVitals>) -> String {
    let Some(m) = m else {
        return String::new();
    };
    match (
        m.percent.as_deref(),
        m.kb.as_deref().and_then(|kb| kb.parse::<u64>().ok()),
    ) {
        (Some(percent), Some(kb)) if !percent.is_empty() => {
            format!("{percent}% ({})", si_bytes(kb as f64 * 1000.0))
        }
        _ => String::new(),
    }
}

/// bosh-cli's `ValueDiskSize`: `41% (12i%)`.
fn disk_usage(d: Option<&DiskVitals>) -> String {
    match d.map(|d| (d.percent.as_deref(), d.inode_percent.as_deref())) {
        Some((Some(p), Some(i))) if !p.is_empty() && !i.is_empty() => format!("{p}% ({i}i%)"),
        _ => String::new(),
    }
}

/// bosh-cli's `ValueUptime`: `1d 2h 3m 4s`.
fn duration(secs: u64) -> String {
    let (d, h, m, s) = (secs / 86_400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    format!("{d}d {h}h {m}m {s}s")
}

/// go-humanize's `Bytes` (SI units): `9 B`, `1.2 kB`, `34 MB`.
fn si_bytes(bytes: f64) -> String {
    const SIZES: [&str; 7] = ["B", "kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 10.0 {
        return format!("{bytes:.0} B");
    }
    let e = (bytes.ln() / 1000f64.ln()).floor().min(6.0);
    let value = (bytes / 1000f64.powf(e) * 10.0 + 0.5).floor() / 10.0;
    let unit = SIZES[e as usize];
    if value < 10.0 {
        format!("{value:.1} {unit}")
    } else {
        format!("{value:.0} {unit}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_as_bosh_cli_writes_them() {
        assert_eq!(duration(93_784), "1d 2h 3m 4s");
        assert_eq!(si_bytes(5.0), "5 B");
        assert_eq!(si_bytes(1_234_000.0), "1.2 MB");
        assert_eq!(si_bytes(82_854_982.0), "83 MB");
        let m = MemVitals {
            kb: Some("2048".into()),
            percent: Some("12".into()),
        };
        assert_eq!(memory(Some(&m)), "12% (2.0 MB)");
        let d = DiskVitals {
            percent: Some("41".into()),
            inode_percent: Some("12".into()),
        };
        assert_eq!(disk_usage(Some(&d)), "41% (12i%)");
    }
}
