//! A release with a package graph as real releases have (`graph::random_graph`) and one job
//! per instance group, each needing its own share of the packages, for the deploy benchmark
//! (issue 29): a group's packages can be ready long before another's.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use kubosh_artifacts::release::{CreateOptions, Release, create::create};

use super::graph::{Graph, Rng, random_graph};

/// The release, its package graph (package `i` is named `p{i}`) and what each job needs.
pub struct Synthetic {
    pub release: Arc<Release>,
    pub graph: Graph,
    /// Each job's packages, dependencies included (indices into the graph).
    pub needs: BTreeMap<String, BTreeSet<usize>>,
}

/// The package's name in the release.
pub fn package_name(i: usize) -> String {
    format!("p{i}")
}

/// A release named `synthetic` (version 1) of `packages` packages drawn with `seed`, and a
/// job per `(name, direct packages)` of `jobs`, each listing that many packages drawn at
/// random and a `greeting` property.
pub fn synthetic_release(packages: usize, seed: u64, jobs: &[(&str, usize)]) -> Synthetic {
    let graph = random_graph(packages, seed);
    let dir = tempfile::tempdir().expect("a tempdir");
    let root = dir.path();
    write(root, "config/final.yml", "name: synthetic\n");
    for (i, deps) in graph.depends_on.iter().enumerate() {
        let name = package_name(i);
        let deps: Vec<String> = deps
            .iter()
            .map(|&d| format!("- {}", package_name(d)))
            .collect();
        let deps = if deps.is_empty() {
            " []".to_string()
        } else {
            format!("\n{}", deps.join("\n"))
        };
        write(
            root,
            &format!("packages/{name}/spec"),
            &format!("---\nname: {name}\ndependencies:{deps}\nfiles:\n- {name}/**/*\n"),
        );
        write(root, &format!("packages/{name}/packaging"), "set -e\n");
        write(root, &format!("src/{name}/source.txt"), &name);
    }
    let mut rng = Rng::new(seed ^ 0x5EED);
    let mut needs = BTreeMap::new();
    for &(job, direct) in jobs {
        let picked: BTreeSet<usize> = (0..direct)
            .map(|_| rng.range(0, packages as u64 - 1) as usize)
            .collect();
        let listed: Vec<String> = picked
            .iter()
            .map(|&p| format!("- {}", package_name(p)))
            .collect();
        write(
            root,
            &format!("jobs/{job}/spec"),
            &format!(
                "---\nname: {job}\ntemplates:\n  ctl.erb: bin/ctl\npackages:\n{}\n\
                 properties:\n  greeting:\n    default: hi\n",
                listed.join("\n")
            ),
        );
        write(
            root,
            &format!("jobs/{job}/monit"),
            &format!(
                "check process {job}\n  with pidfile /var/vcap/sys/run/{job}/{job}.pid\n  \
                 start program \"/var/vcap/jobs/{job}/bin/ctl start\"\n  \
                 stop program \"/var/vcap/jobs/{job}/bin/ctl stop\"\n  group vcap\n"
            ),
        );
        write(
            root,
            &format!("jobs/{job}/templates/ctl.erb"),
            "#!/bin/bash\n",
        );
        needs.insert(job.to_string(), closure(&graph, &picked));
    }
    let built = create(
        root,
        &CreateOptions {
            name: None,
            version: Some("1".into()),
        },
    )
    .expect("the synthetic release builds");
    let release = Release::from_bytes(&built.to_tarball().expect("a tarball"))
        .expect("the tarball reads back");
    let release = Arc::new(release);
    Synthetic {
        release,
        graph,
        needs,
    }
}

impl Synthetic {
    /// The package graph with only what the jobs `wanted` says need: the others take no
    /// time (a deploy compiles only what its jobs need).
    pub fn needed_graph(&self, wanted: impl Fn(&str) -> bool) -> Graph {
        let needed: BTreeSet<usize> = (self.needs.iter())
            .filter(|(job, _)| wanted(job))
            .flat_map(|(_, packages)| packages.iter().copied())
            .collect();
        let mut graph = self.graph.clone();
        for (i, seconds) in graph.seconds.iter_mut().enumerate() {
            if !needed.contains(&i) {
                *seconds = 0;
            }
        }
        graph
    }
}

/// `picked` and everything they depend on.
fn closure(graph: &Graph, picked: &BTreeSet<usize>) -> BTreeSet<usize> {
    let mut all = BTreeSet::new();
    let mut todo: Vec<usize> = picked.iter().copied().collect();
    while let Some(p) = todo.pop() {
        if all.insert(p) {
            todo.extend(&graph.depends_on[p]);
        }
    }
    all
}

fn write(root: &Path, path: &str, content: &str) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().expect("a parent")).expect("a directory");
    std::fs::write(&path, content).expect("a file");
}
