//! What the Director does with rendered jobs (`bosh-protocols.md` §4.11,
//! `core/templates/rendered_job_instance.rb`, `rendered_job_template.rb`,
//! `job_template_renderer.rb`):
//!
//! - every job gets a generated `.bosh/links.json` listing the links it provides;
//! - the instance's **configuration hash** is one SHA1 fed, for each job sorted by name,
//!   with `monit` + job name + for each file sorted by source path its contents and
//!   destination; the **template hash** of a job is SHA1(`monit` + contents of its files
//!   sorted by source path). Only instances whose configuration hash changed are updated;
//! - the **rendered templates archive** is a gzipped tar with `<job>/monit` and
//!   `<job>/<destination>` for every file, which the agent installs.
//!
//! The archive is deterministic (sorted entries, fixed mtime, owner and modes), so equal
//! rendered output gives equal bytes and one content-addressed blob.

use std::io::Write;

use indexmap::IndexMap;
use serde::Serialize;
use sha1::{Digest as _, Sha1};

use super::{RenderedFile, RenderedJob};
use kubosh_base::digest::to_hex;

/// Source (and destination) path of the generated links file.
pub const LINKS_JSON: &str = ".bosh/links.json";

/// One provided link in `.bosh/links.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProvidedLinkEntry {
    /// The link's canonical name (its alias when `as` is given).
    pub name: String,
    /// The link type.
    #[serde(rename = "type")]
    pub kind: String,
    /// The link group's id in the DNS tables.
    pub group: String,
}

/// The text of `.bosh/links.json`: the entries sorted by group, pretty-printed as Ruby's
/// `JSON.pretty_generate` does, with a final newline.
pub fn links_json(entries: &[ProvidedLinkEntry]) -> String {
    let mut sorted = entries.to_vec();
    sorted.sort_by(|a, b| a.group.cmp(&b.group));
    let mut text = serde_json::to_string_pretty(&sorted).unwrap_or_else(|_| "[]".into());
    text.push('\n');
    text
}

/// Adds `.bosh/links.json` to a rendered job, as the Director does after rendering.
pub fn add_links_json(job: &mut RenderedJob, entries: &[ProvidedLinkEntry]) {
    job.files.retain(|f| f.source_path != LINKS_JSON);
    job.files.push(RenderedFile {
        source_path: LINKS_JSON.into(),
        destination: LINKS_JSON.into(),
        content: links_json(entries),
    });
}

fn files_by_source(job: &RenderedJob) -> Vec<&RenderedFile> {
    let mut files: Vec<&RenderedFile> = job.files.iter().collect();
    files.sort_by(|a, b| a.source_path.as_bytes().cmp(b.source_path.as_bytes()));
    files
}

/// The configuration hash of an instance's rendered jobs (SHA1 hex).
pub fn configuration_hash(jobs: &[RenderedJob]) -> String {
    let mut sorted: Vec<&RenderedJob> = jobs.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut digest = Sha1::new();
    for job in sorted {
        digest.update(job.monit.as_bytes());
        digest.update(job.name.as_bytes());
        for f in files_by_source(job) {
            digest.update(f.content.as_bytes());
            digest.update(f.destination.as_bytes());
        }
    }
    to_hex(&digest.finalize())
}

/// The template hash of one rendered job (SHA1 hex).
pub fn template_hash(job: &RenderedJob) -> String {
    let mut digest = Sha1::new();
    digest.update(job.monit.as_bytes());
    for f in files_by_source(job) {
        digest.update(f.content.as_bytes());
    }
    to_hex(&digest.finalize())
}

/// `template_hashes` of the apply spec: job name to [`template_hash`], in job order.
pub fn template_hashes(jobs: &[RenderedJob]) -> IndexMap<String, String> {
    jobs.iter()
        .map(|j| (j.name.clone(), template_hash(j)))
        .collect()
}

/// Why an archive could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// A destination path that would leave the job's directory.
    #[error("job {job}: destination {destination:?} is not a relative path inside the job")]
    BadDestination {
        /// The job.
        job: String,
        /// The destination.
        destination: String,
    },
    /// Two jobs with the same name.
    #[error("job {0} is rendered twice")]
    DuplicateJob(String),
    /// Writing the archive failed.
    #[error("writing the rendered templates archive: {0}")]
    Io(#[from] std::io::Error),
}

fn safe_destination(job: &str, destination: &str) -> Result<(), ArchiveError> {
    let bad = destination.is_empty()
        || destination.starts_with('/')
        || destination
            .split('/')
            .any(|c| c.is_empty() || c == "." || c == "..");
    if bad || job.is_empty() || job.contains('/') || job == "." || job == ".." {
        return Err(ArchiveError::BadDestination {
            job: job.to_string(),
            destination: destination.to_string(),
        });
    }
    Ok(())
}

/// The rendered templates archive (gzipped tar) of an instance's jobs.
pub fn rendered_templates_archive(jobs: &[RenderedJob]) -> Result<Vec<u8>, ArchiveError> {
    let mut entries: Vec<(String, &[u8])> = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for job in jobs {
        if !names.insert(job.name.as_str()) {
            return Err(ArchiveError::DuplicateJob(job.name.clone()));
        }
        safe_destination(&job.name, "monit")?;
        entries.push((format!("{}/monit", job.name), job.monit.as_bytes()));
        for f in &job.files {
            safe_destination(&job.name, &f.destination)?;
            entries.push((
                format!("{}/{}", job.name, f.destination),
                f.content.as_bytes(),
            ));
        }
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    // Directories first, each once, so extraction creates them with our modes.
    let mut dirs = std::collections::BTreeSet::new();
    for (path, _) in &entries {
        let mut prefix = String::new();
        for part in path
            .split('/')
            .collect::<Vec<_>>()
            .split_last()
            .map_or(&[][..], |(_, d)| d)
        {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(part);
            dirs.insert(prefix.clone());
        }
    }
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    for dir in &dirs {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, format!("{dir}/"), std::io::empty())?;
    }
    for (path, content) in entries {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o644);
        h.set_size(content.len() as u64);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, path, content)?;
    }
    let mut gz = tar.into_inner()?;
    gz.flush()?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::ReleaseRef;

    fn job(name: &str, monit: &str, files: &[(&str, &str, &str)]) -> RenderedJob {
        RenderedJob {
            name: name.into(),
            release: ReleaseRef {
                name: "r".into(),
                version: "1".into(),
            },
            monit: monit.into(),
            files: files
                .iter()
                .map(|(s, d, c)| RenderedFile {
                    source_path: (*s).into(),
                    destination: (*d).into(),
                    content: (*c).into(),
                })
                .collect(),
        }
    }

    #[test]
    fn configuration_hash_is_the_directors() {
        // The Director's algorithm spelled out: jobs by name, files by source path.
        let a = job(
            "b-job",
            "M2",
            &[("z.erb", "bin/z", "Z"), ("a.erb", "bin/a", "A")],
        );
        let b = job("a-job", "M1", &[("x.erb", "x", "X")]);
        let mut expected = Sha1::new();
        expected.update(b"M1a-jobXx");
        expected.update(b"M2b-jobAbin/aZbin/z");
        assert_eq!(
            configuration_hash(&[a.clone(), b.clone()]),
            to_hex(&expected.finalize())
        );
        // Order of the input does not matter.
        assert_eq!(
            configuration_hash(&[a.clone(), b.clone()]),
            configuration_hash(&[b, a.clone()])
        );
        assert_eq!(template_hash(&a), kubosh_base::digest::sha1_hex(b"M2AZ"));
    }

    #[test]
    fn links_json_is_ruby_pretty_json_sorted_by_group() {
        let entries = [
            ProvidedLinkEntry {
                name: "b".into(),
                kind: "t".into(),
                group: "2".into(),
            },
            ProvidedLinkEntry {
                name: "a".into(),
                kind: "t".into(),
                group: "1".into(),
            },
        ];
        assert_eq!(
            links_json(&entries),
            "[\n  {\n    \"name\": \"a\",\n    \"type\": \"t\",\n    \"group\": \"1\"\n  },\n  {\n    \"name\": \"b\",\n    \"type\": \"t\",\n    \"group\": \"2\"\n  }\n]\n"
        );
        assert_eq!(links_json(&[]), "[]\n");
        let mut j = job("web", "m", &[]);
        add_links_json(&mut j, &entries);
        add_links_json(&mut j, &entries);
        assert_eq!(j.files.len(), 1, "added once");
    }

    #[test]
    fn archives_are_deterministic_and_refuse_escapes() {
        let jobs = [job("web", "m", &[("a.erb", "bin/ctl", "#!/bin/sh\n")])];
        let one = rendered_templates_archive(&jobs).unwrap();
        assert_eq!(one, rendered_templates_archive(&jobs).unwrap());
        let mut names = Vec::new();
        let mut ar = tar::Archive::new(flate2::read::GzDecoder::new(&one[..]));
        for e in ar.entries().unwrap() {
            names.push(e.unwrap().path().unwrap().display().to_string());
        }
        assert_eq!(names, ["web/", "web/bin/", "web/bin/ctl", "web/monit"]);
        let bad = [job("web", "m", &[("a.erb", "../x", "")])];
        assert!(matches!(
            rendered_templates_archive(&bad),
            Err(ArchiveError::BadDestination { .. })
        ));
        let twice = [job("web", "m", &[]), job("web", "m", &[])];
        assert!(matches!(
            rendered_templates_archive(&twice),
            Err(ArchiveError::DuplicateJob(_))
        ));
    }
}
