//! Building a release from a BOSH release directory, as `bosh create-release --force`
//! does for a dev release (bosh-cli `releasedir/`, `release/{job,pkg,license}/dir_reader.go`).
//!
//! ```text
//! config/final.yml        name (or final_name)
//! config/blobs.yml        blobs/ paths with size and sha (optional here)
//! jobs/<job>/spec         job.MF; plus monit, templates/<src>, properties_schema.json
//! packages/<pkg>/spec     name, dependencies, files, excluded_files, no_compression
//! packages/<pkg>/packaging
//! src/, blobs/            package files, matched by the spec globs
//! LICENSE*, NOTICE*       the license
//! ```
//!
//! Fingerprints follow bosh-cli exactly (see [`super::fingerprint`]): a job's files are
//! `job.MF` (the spec), `monit`, `properties_schema.json` and `templates/<src>` for each
//! template (symlinks followed); a package's are `packaging` (no mode) and every file under
//! `src/` or `blobs/` a `files` glob matches minus the `excluded_files` matches, the first
//! match of a relative path winning (symlinks kept as links), plus its dependency names. Job
//! and package versions are their fingerprints.
//!
//! Differences from bosh-cli, on purpose: nothing is written into the release directory (no
//! `.dev_builds`, no `dev_releases` index; the version is `--version` or the next dev
//! version after what `dev_releases/` and `releases/` record, `0+dev.1` in a fresh
//! directory), blobs are never downloaded (a blob listed in `config/blobs.yml` must be in
//! `blobs/`), files in `blobs/` that `config/blobs.yml` does not list are ignored (bosh-cli
//! deletes them), and `pre_packaging` scripts (deprecated) are refused. Archives are built in
//! memory and deterministically, so the same directory gives byte-identical tarballs.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::fingerprint::{FingerprintFile, fingerprint, sha256_digest};
use super::glob::{Glob, GlobError};
use super::manifest::{
    JobRef, JobSpec, LicenseRef, PackageRef, PackageSpec, ReleaseManifest, parse_yaml,
};
use super::tarball::TarWriter;
use super::{GraphError, Job, License, Package, PackageArchive, Release, graph};
use kubosh_base::digest::MultiDigest;

/// A release directory that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// A file or directory could not be read.
    #[error("cannot read '{path}': {message}")]
    Io {
        /// The path.
        path: String,
        /// The system's explanation.
        message: String,
    },
    /// A YAML document of the directory is invalid.
    #[error("invalid {file}: {message}")]
    Document {
        /// The file, relative to the release directory.
        file: String,
        /// The explanation.
        message: String,
    },
    /// No release name: neither `--name` nor `config/final.yml`.
    #[error("{0}")]
    Name(String),
    /// A job directory named differently from its spec.
    #[error("job directory '{dir}' does not match job name '{name}' in spec")]
    JobDirMismatch {
        /// The directory name.
        dir: String,
        /// The spec's name.
        name: String,
    },
    /// A job file listed in the spec is absent.
    #[error("job '{job}': cannot read template '{template}': {message}")]
    MissingTemplate {
        /// The job.
        job: String,
        /// The template source path.
        template: String,
        /// The system's explanation.
        message: String,
    },
    /// A job needs a package the directory does not have.
    #[error("job '{job}' needs package '{package}', which is not in packages/")]
    UnknownPackage {
        /// The job.
        job: String,
        /// The package.
        package: String,
    },
    /// Two packages or jobs with the same name.
    #[error("two {kind}s are named '{name}'")]
    Duplicate {
        /// `job` or `package`.
        kind: &'static str,
        /// The name.
        name: String,
    },
    /// A package without its `packaging` script.
    #[error("package '{package}': expected to find '{path}'")]
    MissingPackaging {
        /// The package.
        package: String,
        /// The missing script.
        path: String,
    },
    /// A package with a `pre_packaging` script.
    #[error("package '{0}': pre_packaging scripts are not supported (deprecated in BOSH)")]
    PrePackaging(String),
    /// `packaging` or `pre_packaging` selected by `files`.
    #[error("package '{package}': special file '{file}' must not be included via 'files'")]
    SpecialFileInFiles {
        /// The package.
        package: String,
        /// `packaging` or `pre_packaging`.
        file: String,
    },
    /// A `files` glob that matches nothing.
    #[error("package '{package}': missing files for pattern '{pattern}'")]
    NoFiles {
        /// The package.
        package: String,
        /// The glob.
        pattern: String,
    },
    /// A malformed glob.
    #[error("package '{package}': {source}")]
    Glob {
        /// The package.
        package: String,
        /// The problem.
        #[source]
        source: GlobError,
    },
    /// A blob listed in `config/blobs.yml` that is absent or has other contents.
    #[error("blob '{path}': {message}")]
    Blob {
        /// The blob path under `blobs/`.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// Missing dependencies or a cycle among packages.
    #[error("{0}")]
    Graph(#[from] GraphError),
    /// Building an archive failed.
    #[error("cannot build the archive of {what}: {message}")]
    Archive {
        /// Which archive.
        what: String,
        /// The explanation.
        message: String,
    },
}

/// What `kubosh release create` may override.
#[derive(Debug, Clone, Default)]
pub struct CreateOptions {
    /// Release name instead of `config/final.yml`'s.
    pub name: Option<String>,
    /// Release version instead of the next dev version.
    pub version: Option<String>,
}

fn io_err(path: &Path) -> impl Fn(std::io::Error) -> CreateError + '_ {
    move |e| CreateError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    }
}

fn read_text(path: &Path) -> Result<String, CreateError> {
    std::fs::read_to_string(path).map_err(io_err(path))
}

/// Builds the release in `dir`.
pub fn create(dir: &Path, opts: &CreateOptions) -> Result<Release, CreateError> {
    let name = match &opts.name {
        Some(n) => n.clone(),
        None => default_name(dir)?,
    };
    let version = match &opts.version {
        Some(v) => v.clone(),
        None => next_dev_version(dir, &name)?,
    };
    let final_config = read_final_config(dir)?;
    let blobs = read_blobs(dir)?;

    let mut packages: Vec<(PackageSpec, Package)> = Vec::new();
    for pkg_dir in subdirs(&dir.join("packages"))? {
        let built = build_package(dir, &pkg_dir, &blobs)?;
        if packages.iter().any(|(s, _)| s.name == built.0.name) {
            return Err(CreateError::Duplicate {
                kind: "package",
                name: built.0.name,
            });
        }
        packages.push(built);
    }
    graph::compile_order(
        packages
            .iter()
            .map(|(s, _)| (s.name.as_str(), s.dependencies.as_slice())),
    )?;
    packages.sort_by(|a, b| a.0.name.cmp(&b.0.name));

    let mut jobs: Vec<Job> = Vec::new();
    for job_dir in subdirs(&dir.join("jobs"))? {
        let job = build_job(&job_dir)?;
        if jobs.iter().any(|j| j.name == job.name) {
            return Err(CreateError::Duplicate {
                kind: "job",
                name: job.name,
            });
        }
        for p in &job.spec.packages {
            if !packages.iter().any(|(s, _)| &s.name == p) {
                return Err(CreateError::UnknownPackage {
                    job: job.name.clone(),
                    package: p.clone(),
                });
            }
        }
        jobs.push(job);
    }
    jobs.sort_by(|a, b| a.name.cmp(&b.name));

    let license = build_license(dir)?;
    let (commit_hash, uncommitted_changes) = git_state(dir);

    let manifest = ReleaseManifest {
        name,
        version,
        commit_hash,
        uncommitted_changes,
        jobs: jobs
            .iter()
            .map(|j| JobRef {
                name: j.name.clone(),
                version: j.version.clone(),
                fingerprint: Some(j.fingerprint.clone()),
                sha1: j.digest.to_string(),
                packages: j.spec.packages.clone(),
            })
            .collect(),
        packages: packages
            .iter()
            .map(|(_, p)| PackageRef {
                name: p.name.clone(),
                version: p.version.clone(),
                fingerprint: Some(p.fingerprint.clone()),
                sha1: p.digest.to_string(),
                dependencies: p.dependencies.clone(),
            })
            .collect(),
        compiled_packages: Vec::new(),
        license: license.as_ref().map(|l| LicenseRef {
            version: l.version.clone(),
            fingerprint: Some(l.fingerprint.clone()),
            sha1: l.digest.to_string(),
        }),
        no_compression: final_config.no_compression,
    };
    Ok(Release {
        manifest,
        jobs,
        packages: packages.into_iter().map(|(_, p)| p).collect(),
        compiled_packages: Vec::new(),
        license,
    })
}

/// `config/final.yml` (public config) keys kubosh uses.
#[derive(Debug, Default, Deserialize)]
struct FinalConfig {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    final_name: Option<String>,
    #[serde(default)]
    no_compression: Option<bool>,
}

struct FinalSettings {
    no_compression: bool,
}

fn load_final(dir: &Path) -> Result<FinalConfig, CreateError> {
    let path = dir.join("config/final.yml");
    if !path.is_file() {
        return Ok(FinalConfig::default());
    }
    let text = read_text(&path)?;
    let parsed: Option<FinalConfig> =
        parse_yaml(&text, "config/final.yml").map_err(|message| CreateError::Document {
            file: "config/final.yml".into(),
            message,
        })?;
    Ok(parsed.unwrap_or_default())
}

fn read_final_config(dir: &Path) -> Result<FinalSettings, CreateError> {
    Ok(FinalSettings {
        no_compression: load_final(dir)?.no_compression.unwrap_or(false),
    })
}

/// bosh-cli's `FSConfig.Name`: `name`, else `final_name`, not both.
fn default_name(dir: &Path) -> Result<String, CreateError> {
    let c = load_final(dir)?;
    let name = c.name.filter(|n| !n.is_empty());
    let final_name = c.final_name.filter(|n| !n.is_empty());
    match (name, final_name) {
        (Some(_), Some(_)) => Err(CreateError::Name(
            "expected 'name' or 'final_name' but not both in config/final.yml".into(),
        )),
        (Some(n), None) | (None, Some(n)) => Ok(n),
        (None, None) => Err(CreateError::Name(
            "expected non-empty 'name' in config/final.yml (or pass --name)".into(),
        )),
    }
}

/// The directories in `dir` (following symlinks), sorted; none when `dir` is absent.
fn subdirs(dir: &Path) -> Result<Vec<PathBuf>, CreateError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(io_err(dir))?.path();
        if path.is_dir() {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// One blob of `config/blobs.yml`.
#[derive(Debug, Deserialize)]
struct BlobEntry {
    #[serde(default)]
    sha: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

/// Paths (relative to `blobs/`) that `config/blobs.yml` lists, each checked on disk.
fn read_blobs(dir: &Path) -> Result<Vec<String>, CreateError> {
    let path = dir.join("config/blobs.yml");
    if !path.is_file() {
        return Ok(Vec::new());
    }
    let text = read_text(&path)?;
    let index: Option<BTreeMap<String, BlobEntry>> = parse_yaml(&text, "config/blobs.yml")
        .map_err(|message| CreateError::Document {
            file: "config/blobs.yml".into(),
            message,
        })?;
    let mut out = Vec::new();
    for (rel, entry) in index.unwrap_or_default() {
        let blob_err = |message: String| CreateError::Blob {
            path: rel.clone(),
            message,
        };
        if rel.split('/').any(|c| c == ".." || c.is_empty()) {
            return Err(blob_err("must be a safe relative path".into()));
        }
        let file = dir.join("blobs").join(&rel);
        let data = std::fs::read(&file).map_err(|e| {
            blob_err(format!(
                "cannot read {}: {e} (kubosh does not download blobs: run `bosh sync-blobs`)",
                file.display()
            ))
        })?;
        if let Some(size) = entry.size
            && size != data.len() as u64
        {
            return Err(blob_err(format!(
                "size is {} bytes, config/blobs.yml says {size}",
                data.len()
            )));
        }
        if let Some(sha) = entry.sha.filter(|s| !s.is_empty()) {
            let digest: MultiDigest = sha.parse().map_err(|e| blob_err(format!("{e}")))?;
            digest.verify(&data).map_err(|e| blob_err(e.to_string()))?;
        }
        out.push(rel);
    }
    Ok(out)
}

/// A file found for an archive: where it is and how it enters the fingerprint.
struct Source {
    path: PathBuf,
    relative: String,
    /// Keep symlinks as links (packages) or follow them (jobs).
    follow: bool,
    /// Leave the mode out of the fingerprint.
    exempt: bool,
}

/// What an archive entry is.
enum Content {
    File { data: Vec<u8>, executable: bool },
    Link(PathBuf),
}

/// Reads `s` and computes its fingerprint chunk.
fn load(s: &Source) -> Result<(FingerprintFile, Content), std::io::Error> {
    let meta = std::fs::symlink_metadata(&s.path)?;
    let mode = meta.permissions().mode();
    let (file, content) = if meta.file_type().is_symlink() && !s.follow {
        let target = std::fs::read_link(&s.path)?;
        (
            FingerprintFile::symlink(&s.relative, &target),
            Content::Link(target),
        )
    } else {
        let data = std::fs::read(&s.path)?;
        // Mode from lstat, as bosh-cli: a followed symlink counts as executable (0777).
        let f = FingerprintFile::regular(&s.relative, &data, mode);
        let executable = std::fs::metadata(&s.path)?.permissions().mode() & 0o100 != 0;
        (f, Content::File { data, executable })
    };
    Ok((if s.exempt { file.without_mode() } else { file }, content))
}

/// Fingerprint and deterministic archive of `sources`.
fn archive(
    sources: &[Source],
    extra_chunks: &[String],
    plain: bool,
    what: &str,
) -> Result<(String, Vec<u8>), CreateError> {
    let mut files = Vec::new();
    let mut contents = BTreeMap::new();
    for s in sources {
        let (f, c) = load(s).map_err(io_err(&s.path))?;
        files.push(f);
        contents.insert(s.relative.clone(), c);
    }
    let fp = fingerprint(&files, extra_chunks);
    let arch_err = |e: std::io::Error| CreateError::Archive {
        what: what.to_string(),
        message: e.to_string(),
    };
    let mut w = TarWriter::new();
    for (rel, c) in &contents {
        match c {
            Content::File { data, executable } => w.file(rel, data, *executable),
            Content::Link(target) => w.symlink(rel, &target.to_string_lossy()),
        }
        .map_err(arch_err)?;
    }
    Ok((fp, w.finish(plain).map_err(arch_err)?))
}

fn digest_of(data: &[u8]) -> MultiDigest {
    sha256_digest(data)
        .parse()
        .expect("a sha256 digest string always parses")
}

fn build_job(job_dir: &Path) -> Result<Job, CreateError> {
    let spec_path = job_dir.join("spec");
    let dir_name = job_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = read_text(&spec_path)?;
    let spec: JobSpec = parse_yaml(&text, "spec").map_err(|message| CreateError::Document {
        file: format!("jobs/{dir_name}/spec"),
        message,
    })?;
    if spec.name != dir_name {
        return Err(CreateError::JobDirMismatch {
            dir: dir_name,
            name: spec.name,
        });
    }
    let mut sources = vec![Source {
        path: spec_path,
        relative: "job.MF".into(),
        follow: true,
        exempt: false,
    }];
    for extra in ["monit", "properties_schema.json"] {
        let p = job_dir.join(extra);
        if p.exists() {
            sources.push(Source {
                path: p,
                relative: extra.into(),
                follow: true,
                exempt: false,
            });
        }
    }
    for src in spec.templates.keys() {
        let path = job_dir.join("templates").join(src);
        if let Err(e) = std::fs::metadata(&path) {
            return Err(CreateError::MissingTemplate {
                job: spec.name.clone(),
                template: src.clone(),
                message: e.to_string(),
            });
        }
        sources.push(Source {
            path,
            relative: format!("templates/{src}"),
            follow: true,
            exempt: false,
        });
    }
    let (fp, archive) = archive(&sources, &[], false, &format!("job '{}'", spec.name))?;
    let files = super::tarball::read_all(&archive).unwrap_or_default();
    let monit = files
        .get("monit")
        .map(|m| String::from_utf8_lossy(m).into_owned());
    let templates = spec
        .templates
        .keys()
        .filter_map(|k| {
            files
                .get(&format!("templates/{k}"))
                .map(|d| (k.clone(), d.to_vec()))
        })
        .collect();
    let properties_schema = files
        .get("properties_schema.json")
        .and_then(|d| serde_json::from_slice(d).ok());
    Ok(Job {
        name: spec.name.clone(),
        version: fp.clone(),
        fingerprint: fp,
        digest: digest_of(&archive),
        spec,
        monit,
        extra_monit: BTreeMap::new(),
        templates,
        properties_schema,
        archive,
    })
}

/// Every path under `base` (relative, `/`-separated), files, symlinks and directories,
/// without following symlinked directories.
fn walk(base: &Path) -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let mut stack = vec![(String::new(), base.to_path_buf())];
    while let Some((rel, path)) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&path) else {
            continue;
        };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let r = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let p = entry.path();
            if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                stack.push((r.clone(), p.clone()));
            }
            out.push((r, p));
        }
    }
    out.sort();
    out
}

/// bosh-cli's `isPackageableFile`: not a directory, and (unless a symlink) not reached
/// through a symlinked directory.
fn packageable(path: &Path, base: &Path, rel: &str) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return false;
    };
    if meta.is_dir() {
        return false;
    }
    if meta.file_type().is_symlink() {
        return true;
    }
    match (std::fs::canonicalize(path), std::fs::canonicalize(base)) {
        (Ok(real), Ok(real_base)) => real == real_base.join(rel),
        _ => false,
    }
}

fn build_package(
    release_dir: &Path,
    pkg_dir: &Path,
    blobs: &[String],
) -> Result<(PackageSpec, Package), CreateError> {
    let dir_name = pkg_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let text = read_text(&pkg_dir.join("spec"))?;
    let spec: PackageSpec = parse_yaml(&text, "spec").map_err(|message| CreateError::Document {
        file: format!("packages/{dir_name}/spec"),
        message,
    })?;
    let packaging = pkg_dir.join("packaging");
    if !packaging.exists() {
        return Err(CreateError::MissingPackaging {
            package: spec.name.clone(),
            path: packaging.display().to_string(),
        });
    }
    if pkg_dir.join("pre_packaging").exists() {
        return Err(CreateError::PrePackaging(spec.name.clone()));
    }
    let glob_err = |source| CreateError::Glob {
        package: spec.name.clone(),
        source,
    };
    let src_dir = release_dir.join("src");
    let blobs_dir = release_dir.join("blobs");
    let src_files = walk(&src_dir);
    let blob_files: Vec<(String, PathBuf)> = blobs
        .iter()
        .map(|b| (b.clone(), blobs_dir.join(b)))
        .collect();

    // Relative path -> (path, base), the first match winning, in glob order.
    let mut selected: BTreeMap<String, PathBuf> = BTreeMap::new();
    for pattern in &spec.files {
        let glob = Glob::new(pattern).map_err(glob_err)?;
        let mut found = false;
        for (files, base) in [(&src_files, &src_dir), (&blob_files, &blobs_dir)] {
            for (rel, path) in files {
                if glob.is_match(rel) && packageable(path, base, rel) {
                    found = true;
                    selected.entry(rel.clone()).or_insert_with(|| path.clone());
                }
            }
        }
        if !found {
            return Err(CreateError::NoFiles {
                package: spec.name.clone(),
                pattern: pattern.clone(),
            });
        }
    }
    for pattern in &spec.excluded_files {
        let glob = Glob::new(pattern).map_err(glob_err)?;
        selected.retain(|rel, _| !glob.is_match(rel));
    }
    for special in ["packaging", "pre_packaging"] {
        if selected.contains_key(special) {
            return Err(CreateError::SpecialFileInFiles {
                package: spec.name.clone(),
                file: special.into(),
            });
        }
    }

    let mut sources = vec![Source {
        path: packaging,
        relative: "packaging".into(),
        follow: false,
        exempt: true,
    }];
    sources.extend(selected.into_iter().map(|(relative, path)| Source {
        path,
        relative,
        follow: false,
        exempt: false,
    }));
    let (fp, archive) = archive(
        &sources,
        &spec.dependencies,
        spec.no_compression,
        &format!("package '{}'", spec.name),
    )?;
    let package = Package {
        name: spec.name.clone(),
        version: fp.clone(),
        fingerprint: fp,
        digest: digest_of(&archive),
        dependencies: spec.dependencies.clone(),
        archive: PackageArchive::Bytes(archive),
    };
    Ok((spec, package))
}

/// `LICENSE*` and `NOTICE*` at the top of the directory: basenames, no modes.
fn build_license(dir: &Path) -> Result<Option<License>, CreateError> {
    let mut sources = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(io_err(dir))?;
    let mut names: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("LICENSE") || n.starts_with("NOTICE"))
        .collect();
    names.sort();
    for n in names {
        let path = dir.join(&n);
        if path.is_file() {
            sources.push(Source {
                path,
                relative: n,
                follow: false,
                exempt: true,
            });
        }
    }
    if sources.is_empty() {
        return Ok(None);
    }
    let (fp, archive) = archive(&sources, &[], false, "the license")?;
    Ok(Some(License {
        version: fp.clone(),
        fingerprint: fp,
        digest: digest_of(&archive),
        archive,
    }))
}

/// bosh-cli's `LastCommitSHA` and `MustNotBeDirty`: `non-git` outside a git work tree,
/// `empty` before the first commit.
fn git_state(dir: &Path) -> (String, bool) {
    let git = |args: &[&str]| {
        std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .stdin(std::process::Stdio::null())
            .output()
            .ok()
    };
    let inside = git(&["rev-parse", "--git-dir"]).is_some_and(|o| o.status.success());
    if !inside {
        return ("non-git".into(), false);
    }
    let hash = match git(&["rev-parse", "--short", "HEAD"]) {
        Some(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        _ => "empty".into(),
    };
    let dirty = git(&["status", "--porcelain=1"]).is_some_and(|o| {
        o.status.success() && !String::from_utf8_lossy(&o.stdout).trim().is_empty()
    });
    (hash, dirty)
}

/// The next dev version: after the newest of `dev_releases/<name>/index.yml` and
/// `releases/<name>/index.yml`, `+dev.N` incremented (or started at `dev.1`).
fn next_dev_version(dir: &Path, name: &str) -> Result<String, CreateError> {
    #[derive(Deserialize)]
    struct Index {
        #[serde(default)]
        builds: Option<BTreeMap<String, Build>>,
    }
    #[derive(Deserialize)]
    struct Build {
        #[serde(deserialize_with = "super::manifest::string_like")]
        version: String,
    }
    let mut versions = Vec::new();
    for kind in ["dev_releases", "releases"] {
        let path = dir.join(kind).join(name).join("index.yml");
        if !path.is_file() {
            continue;
        }
        let text = read_text(&path)?;
        let index: Option<Index> =
            parse_yaml(&text, "index.yml").map_err(|message| CreateError::Document {
                file: format!("{kind}/{name}/index.yml"),
                message,
            })?;
        for b in index
            .and_then(|i| i.builds)
            .unwrap_or_default()
            .into_values()
        {
            versions.push(b.version);
        }
    }
    let latest = versions.iter().max_by(|a, b| compare_versions(a, b));
    Ok(match latest {
        None => "0+dev.1".into(),
        Some(v) => increment_dev(v),
    })
}

/// Splits `1.2+dev.3` into (release segments, post-release dev number).
fn split_version(v: &str) -> (Vec<u64>, Option<u64>) {
    let (release, post) = match v.split_once('+') {
        Some((r, p)) => (r, Some(p)),
        None => (v, None),
    };
    let release = release
        .split(['.', '-'])
        .map(|s| s.parse().unwrap_or(0))
        .collect();
    let dev = post
        .and_then(|p| p.strip_prefix("dev."))
        .and_then(|n| n.parse().ok());
    (release, dev)
}

fn compare_versions(a: &str, b: &str) -> std::cmp::Ordering {
    let (ra, da) = split_version(a);
    let (rb, db) = split_version(b);
    let len = ra.len().max(rb.len());
    for i in 0..len {
        let o = ra.get(i).unwrap_or(&0).cmp(rb.get(i).unwrap_or(&0));
        if o.is_ne() {
            return o;
        }
    }
    // A final version sorts before its dev builds (`1` < `1+dev.1`).
    da.unwrap_or(0).cmp(&db.unwrap_or(0))
}

fn increment_dev(v: &str) -> String {
    let release = v.split_once('+').map_or(v, |(r, _)| r);
    let (_, dev) = split_version(v);
    format!("{release}+dev.{}", dev.unwrap_or(0) + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_versions_increment_like_bosh_cli() {
        assert_eq!(increment_dev("0+dev.1"), "0+dev.2");
        assert_eq!(increment_dev("3"), "3+dev.1");
        assert_eq!(increment_dev("1.2+dev.9"), "1.2+dev.10");
        let mut v = vec!["0+dev.2", "0+dev.10", "1", "0+dev.9"];
        v.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(v, ["0+dev.2", "0+dev.9", "0+dev.10", "1"]);
    }

    #[test]
    fn a_fresh_directory_starts_at_dev_1() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(next_dev_version(dir.path(), "x").unwrap(), "0+dev.1");
        std::fs::create_dir_all(dir.path().join("dev_releases/x")).unwrap();
        std::fs::write(
            dir.path().join("dev_releases/x/index.yml"),
            "builds:\n  a: {version: 0+dev.4}\n  b: {version: 0+dev.7}\nformat-version: \"2\"\n",
        )
        .unwrap();
        assert_eq!(next_dev_version(dir.path(), "x").unwrap(), "0+dev.8");
    }
}
