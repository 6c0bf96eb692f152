//! What the demo prints once the deployment converged: the resources as `kubectl get`
//! shows them, each instance's answer, and how to reach the cluster.

use crate::cli::out::out;
use std::path::Path;

use kubosh_devenv::ControlPlane;

use super::apply::kubectl;
use super::errand::ErrandReport;
use super::progress::Converged;

/// The final report.
pub(super) struct Report {
    namespace: String,
    table: String,
    converged: Converged,
    errand: ErrandReport,
}

impl Report {
    /// Reads `kubectl get boshdeployments,instances` now.
    pub(super) fn new(
        cp: &ControlPlane,
        namespace: &str,
        converged: Converged,
        errand: ErrandReport,
    ) -> Report {
        let table = kubectl(cp, &["get", "boshdeployments,instances", "-n", namespace])
            .unwrap_or_else(|e| format!("{e}\n"));
        Report {
            namespace: namespace.to_string(),
            table,
            converged,
            errand,
        }
    }

    /// Prints it to stdout, with how to point kubectl at the cluster of `kubeconfig` and
    /// `where_things_are` (metrics, logs) last.
    pub(super) fn print(&self, kubeconfig: &Path, where_things_are: &str) {
        let mut text = String::from("\n$ kubectl get boshdeployments,instances\n");
        text.push_str(&self.table);
        if let Some(task) = &self.converged.last_task {
            text.push_str(&format!(
                "\nLast deploy task: {} ({:?}{})\n",
                task.id,
                task.state,
                task.duration_seconds
                    .map(|s| format!(", {s}s"))
                    .unwrap_or_default()
            ));
        }
        for a in &self.converged.answers {
            text.push_str(&format!(
                "\n$ curl http://{}:{}/      # {}\n{}",
                a.ip, a.port, a.name, a.body
            ));
            if !a.body.ends_with('\n') {
                text.push('\n');
            }
        }
        let errand = &self.errand;
        text.push_str(&format!(
            "\n$ kubectl create -f examples/local/smoke-tests.yaml      # the errand: {}\n{}\n",
            errand.name, errand.message
        ));
        for (instance, said) in &errand.outputs {
            text.push_str(&format!("{instance}:\n"));
            for line in said.lines() {
                text.push_str(&format!("  {line}\n"));
            }
        }
        if !errand.succeeded {
            text.push_str("The errand failed: `kubectl describe errandrun` tells more.\n");
        }
        text.push_str(&format!(
            "\nPoint kubectl at it (namespace {} is the default):\n  export KUBECONFIG={}\n  kubectl get boshdeployments,instances\n  kubectl describe boshdeployment hello\n  kubectl get errandruns\nRun the errand again: kubectl create -f examples/local/smoke-tests.yaml, or kubectl bosh run-errand hello smoke-tests\nLogs and a shell: kubectl bosh logs hello web/0, kubectl bosh ssh hello web/0\n  (kubectl bosh is kubosh as kubectl-bosh on PATH: ln -s \"$(command -v kubosh)\" ~/.local/bin/kubectl-bosh)\n\n{where_things_are}\n\n",
            self.namespace,
            kubeconfig.display(),
        ));
        out!("{text}");
    }
}
