//! The director configuration file, read into serde types that mirror it ([`DirectorFile`],
//! unknown keys refused as they are usually typos), then resolved into a [`DirectorConfig`]:
//! paths made absolute, PEM read and checked, the CPI program found. Every error names its key
//! by its dotted path (`nats.ca_private_key`) and never quotes a value. Keys and CPI
//! properties are held as [`Secret`]s and never printed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

use kubosh_base::pki::Ca;
use kubosh_cloud::Secret;
use kubosh_engine::EngineConfig;
use kubosh_transport::agent::MbusTls;
use kubosh_transport::tls::TlsError;

/// The director configuration file is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or is not YAML.
    #[error("director config {file}: {message}")]
    File {
        /// The file.
        file: String,
        /// Why.
        message: String,
    },
    /// A key is missing, unknown or has a bad value.
    #[error("director config {file}: {key}: {message}")]
    Key {
        /// The file.
        file: String,
        /// The key, dotted (`nats.ca_private_key`).
        key: String,
        /// What is wrong (never the value of a secret).
        message: String,
    },
}

/// A problem with one key, before the file name is attached.
#[derive(Debug)]
pub struct KeyError {
    /// The key, dotted.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

fn key_error(key: impl Into<String>, message: impl Into<String>) -> KeyError {
    KeyError {
        key: key.into(),
        message: message.into(),
    }
}

/// The file as written: every section and key it may have. `null` is the same as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DirectorFile {
    /// `state_dir` (required).
    pub state_dir: Option<String>,
    /// `cpi` (required).
    pub cpi: Option<CpiFile>,
    /// `cpi_types`: the CPI programs a CPI config's `type` may name, by type.
    pub cpi_types: Option<BTreeMap<String, CpiFile>>,
    /// `nats` (required).
    pub nats: Option<NatsFile>,
    /// `blobstore` (required).
    pub blobstore: Option<BlobstoreFile>,
    /// `engine`.
    pub engine: Option<EngineFile>,
    /// `health`.
    pub health: Option<HealthFile>,
    /// `trusted_certs`.
    pub trusted_certs: Option<String>,
    /// `snapshots`.
    pub snapshots: Option<SnapshotsFile>,
    /// `enable_cpi_resize_disk`.
    pub enable_cpi_resize_disk: Option<bool>,
    /// `enable_cpi_update_disk`.
    pub enable_cpi_update_disk: Option<bool>,
}

/// `cpi:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpiFile {
    /// `[program, args...]`, or one program.
    #[serde(default, deserialize_with = "command_line")]
    pub command: Option<Vec<String>>,
    /// Per-call time limit.
    pub timeout_seconds: Option<u64>,
    /// CPI context properties.
    pub properties: Option<Secret<Map<String, Value>>>,
    /// A YAML (or JSON) file with more properties, merged over `properties`.
    pub properties_path: Option<String>,
    /// What the cloud behind it takes, when known (none by default: kubosh learns it from
    /// the cloud's answers).
    pub limits: Option<CpiLimitsFile>,
}

/// `cpi.limits`: limits kubosh keeps to exactly.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CpiLimitsFile {
    /// At most this many `create_vm` calls start per second.
    pub create_vm_per_second: Option<f64>,
    /// At most this many CPI calls run at once.
    pub max_in_flight: Option<usize>,
}

/// `nats:`. Each PEM is given inline or as `<key>_path`, not both.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsFile {
    /// The server URL (required).
    pub url: Option<String>,
    pub ca_certificate: Option<String>,
    pub ca_certificate_path: Option<String>,
    pub ca_private_key: Option<Secret<String>>,
    pub ca_private_key_path: Option<String>,
    pub director_certificate: Option<String>,
    pub director_certificate_path: Option<String>,
    pub director_private_key: Option<Secret<String>>,
    pub director_private_key_path: Option<String>,
    pub hm_certificate: Option<String>,
    pub hm_certificate_path: Option<String>,
    pub hm_private_key: Option<Secret<String>>,
    pub hm_private_key_path: Option<String>,
    /// `nats.authorization`: confine each agent to its own subjects.
    pub authorization: Option<NatsAuthorizationSection>,
}

/// `nats.authorization:` the nats-server `authorization` block kubosh keeps
/// ([`kubosh_engine::agent_access::NatsAuthorizationFile`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NatsAuthorizationSection {
    /// The file nats-server's configuration includes (required).
    pub file: Option<String>,
    /// nats-server's `pid_file`, signalled to reload after each change; without it the file
    /// is only written (something else reloads the server).
    pub pid_file: Option<String>,
}

/// `blobstore:`: `{local: {path}}`, the only provider for now.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlobstoreFile {
    /// `local`.
    pub local: Option<LocalBlobstoreFile>,
}

/// `blobstore.local`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LocalBlobstoreFile {
    /// The directory (required).
    pub path: Option<String>,
}

/// `engine:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineFile {
    /// The Director's `agent_wait_timeout`.
    pub agent_wait_timeout_seconds: Option<u64>,
    /// How long recovery waits for an interrupted VM's agent.
    pub recovery_wait_seconds: Option<u64>,
    /// Update all AZs of a group at once.
    pub parallel_azs: Option<bool>,
}

/// `health:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HealthFile {
    /// Seconds to listen to heartbeats (required).
    pub listen_for: Option<u64>,
    /// Seconds an agent may send no heartbeat before it counts as silent (default 60).
    pub agent_timeout: Option<u64>,
}

/// `snapshots:` (the Director's spelling).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotsFile {
    /// Snapshot an instance's disks when an update stops it.
    pub enabled: Option<bool>,
}

/// `cpi.command`: a list of strings (numbers taken as their text) or one string.
fn command_line<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    use serde::de::Error;
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(program)) => Ok(Some(vec![program])),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|v| match v {
                Value::String(s) => Ok(s),
                Value::Number(n) => Ok(n.to_string()),
                _ => Err(D::Error::custom("every element must be a string")),
            })
            .collect::<Result<_, _>>()
            .map(Some),
        Some(_) => Err(D::Error::custom("expected a list: [program, args...]")),
    }
}

/// Serde's message for one key, in this file's words and without the value it found.
fn key_message(serde_message: &str) -> String {
    if let Some(rest) = serde_message.strip_prefix("unknown field ") {
        let known = rest
            .split_once(", expected ")
            .map(|(_, known)| known.trim_start_matches("one of ").replace('`', ""));
        return match known {
            Some(known) => format!("unknown key (known here: {known})"),
            None => "unknown key".into(),
        };
    }
    let mismatch =
        serde_message.starts_with("invalid type: ") || serde_message.starts_with("invalid value: ");
    if let Some((_, expected)) = serde_message.split_once(", expected ").filter(|_| mismatch) {
        let expected = match expected {
            "a boolean" => "true or false",
            "u64" => "a whole number of seconds",
            e if e.starts_with("struct ") || e == "a map" => "a map",
            e => e,
        };
        return format!("expected {expected}");
    }
    serde_message.to_string()
}

/// How the CPI is run.
#[derive(Debug, Clone)]
pub struct CpiSettings {
    /// The program, resolved.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Per-call time limit.
    pub timeout: Duration,
    /// Context properties.
    pub properties: Secret<Map<String, Value>>,
    /// The limits configured for its cloud.
    pub limits: kubosh_cloud::CloudLimits,
}

/// How the director reaches the message bus and signs agents' certificates.
#[derive(Debug, Clone)]
pub struct NatsSettings {
    /// The server URL.
    pub url: String,
    /// The CA certificate, PEM.
    pub ca_certificate: String,
    /// The CA, with its private key, that signs agents' client certificates.
    pub ca: Arc<Ca>,
    /// The director's client certificate, PEM.
    pub director_certificate: String,
    /// Its private key, PEM.
    pub director_private_key: Secret<String>,
    /// The health monitor's client certificate and key, PEM, if the file gives them.
    pub hm_identity: Option<(String, Secret<String>)>,
    /// Where the agents' permissions go, when they are confined (`nats.authorization`).
    pub authorization: Option<AuthorizationSettings>,
}

/// `nats.authorization`, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationSettings {
    /// The authorization file nats-server includes.
    pub file: PathBuf,
    /// nats-server's pid file.
    pub pid_file: Option<PathBuf>,
    /// The director certificate's subject, as nats-server maps it to a user.
    pub director_subject: String,
    /// The health monitor's.
    pub hm_subject: String,
}

/// Heartbeats for `kubosh deploy` (`health:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HealthSettings {
    /// How long a deploy listens to heartbeats before it decides (`listen_for`, seconds):
    /// an agent heard in that time and reporting `running` is not asked for its state. Agents
    /// heartbeat every 30 s, so less than that may miss some (they are then asked).
    pub listen_for: Duration,
    /// How long an agent may send no heartbeat before it counts as silent (`agent_timeout`,
    /// seconds; the health monitor's 60 by default): once listened that long, a silent
    /// agent is not asked (3 x 45 s of timeouts); `--fix` recreates its VM, without it the
    /// deploy fails at once naming it.
    pub agent_timeout: Duration,
}

/// Engine settings of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineSettings {
    /// How long a new VM's agent gets to answer.
    pub agent_wait_timeout: Duration,
    /// How long recovery waits for the agent of an interrupted VM creation.
    pub recovery_wait: Duration,
    /// Update all AZs of a group at once.
    pub parallel_azs: bool,
}

/// How the engine treats persistent disks (the Director's `snapshots.enabled`,
/// `enable_cpi_resize_disk` and `enable_cpi_update_disk`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskSettings {
    /// Snapshot an instance's disks when an update stops it.
    pub snapshots_enabled: bool,
    /// Grow disks with `resize_disk`.
    pub enable_cpi_resize_disk: bool,
    /// Change disks with `update_disk`.
    pub enable_cpi_update_disk: bool,
}

/// A director configuration file, read and checked.
#[derive(Debug, Clone)]
pub struct DirectorConfig {
    /// The file's directory (absolute): relative paths' base and the CPI's working directory.
    pub base_dir: PathBuf,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The CPI.
    pub cpi: CpiSettings,
    /// The CPI programs a CPI config's `type` may name (the Director's installed CPI jobs),
    /// by type.
    pub cpi_types: BTreeMap<String, CpiSettings>,
    /// The message bus.
    pub nats: NatsSettings,
    /// The local blobstore's directory.
    pub blobstore_dir: PathBuf,
    /// Engine settings.
    pub engine: EngineSettings,
    /// Heartbeats for deploys, if wanted.
    pub health: Option<HealthSettings>,
    /// `trusted_certs`: CA certificates (PEM) every new VM's agent is told to trust.
    pub trusted_certs: String,
    /// Persistent disk settings.
    pub disks: DiskSettings,
}

impl DirectorConfig {
    /// Reads and checks the file at `path`, key material included (the CA key must belong to
    /// the CA certificate; the director's identity must load).
    pub fn load(path: &Path) -> Result<DirectorConfig, ConfigError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::File {
            file: file.clone(),
            message: format!("cannot read: {e}"),
        })?;
        let value =
            kubosh_base::yaml::parse_value(&text, &file).map_err(|e| ConfigError::File {
                file: file.clone(),
                message: e.to_string(),
            })?;
        let base_dir = std::path::absolute(path)
            .ok()
            .and_then(|p| p.parent().map(Path::to_path_buf))
            .ok_or_else(|| ConfigError::File {
                file: file.clone(),
                message: "cannot tell its directory".into(),
            })?;
        DirectorConfig::from_value(&value, &base_dir).map_err(|e| ConfigError::Key {
            file,
            key: e.key,
            message: e.message,
        })
    }

    /// Reads a parsed file whose relative paths are relative to `base_dir`.
    pub fn from_value(value: &Value, base_dir: &Path) -> Result<DirectorConfig, KeyError> {
        if !value.is_object() {
            return Err(key_error("(top level)", "expected a map"));
        }
        let file: DirectorFile = serde_path_to_error::deserialize(value)
            .map_err(|e| key_error(e.path().to_string(), key_message(&e.inner().to_string())))?;
        DirectorConfig::resolve(file, base_dir)
    }

    /// Checks what the types cannot and makes the file's values usable: required keys,
    /// paths against `base_dir`, PEM read and loaded, the CPI program found.
    pub fn resolve(file: DirectorFile, base_dir: &Path) -> Result<DirectorConfig, KeyError> {
        let state_dir = base_dir.join(required_text("state_dir", file.state_dir)?);
        let cpi = cpi_settings("cpi", required("cpi", file.cpi)?, base_dir)?;
        let mut cpi_types = BTreeMap::new();
        for (kind, file) in file.cpi_types.unwrap_or_default() {
            let settings = cpi_settings(&format!("cpi_types.{kind}"), file, base_dir)?;
            cpi_types.insert(kind, settings);
        }
        let nats = nats_settings(required("nats", file.nats)?, base_dir)?;
        let blobstore = required("blobstore", file.blobstore)?;
        let local = blobstore.local.ok_or_else(|| {
            key_error(
                "blobstore.local",
                "is required (the only blobstore provider for now)",
            )
        })?;
        let blobstore_dir = base_dir.join(required_text("blobstore.local.path", local.path)?);
        let engine = engine_settings(file.engine.unwrap_or_default());
        let health = match file.health {
            Some(h) => Some(HealthSettings {
                listen_for: Duration::from_secs(
                    h.listen_for
                        .ok_or_else(|| key_error("health.listen_for", "is required (seconds)"))?,
                ),
                agent_timeout: Duration::from_secs(h.agent_timeout.unwrap_or(60)),
            }),
            None => None,
        };
        let trusted_certs = optional_text("trusted_certs", file.trusted_certs)?.unwrap_or_default();
        let disks = DiskSettings {
            snapshots_enabled: file.snapshots.and_then(|s| s.enabled).unwrap_or(false),
            enable_cpi_resize_disk: file.enable_cpi_resize_disk.unwrap_or(false),
            enable_cpi_update_disk: file.enable_cpi_update_disk.unwrap_or(false),
        };
        Ok(DirectorConfig {
            base_dir: base_dir.to_path_buf(),
            state_dir,
            cpi,
            cpi_types,
            nats,
            blobstore_dir,
            engine,
            health,
            trusted_certs,
            disks,
        })
    }

    /// Where the state of deployment `name` is kept.
    pub fn deployment_dir(&self, name: &str) -> PathBuf {
        self.state_dir.join("deployments").join(name)
    }

    /// The deployments this director keeps state for (deployed, or deleted with orphaned
    /// disks left), sorted.
    pub fn deployment_names(&self) -> Result<Vec<String>, String> {
        let dir = self.state_dir.join("deployments");
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(format!("cannot read {}: {e}", dir.display())),
        };
        let mut names: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        names.sort();
        Ok(names)
    }

    /// Where the task history is kept ([`crate::tasks`]).
    pub fn tasks_dir(&self) -> PathBuf {
        self.state_dir.join("tasks")
    }

    /// Where extracted stemcells are kept.
    pub fn stemcells_dir(&self) -> PathBuf {
        self.state_dir.join("stemcells")
    }
}
fn required<T>(key: &str, value: Option<T>) -> Result<T, KeyError> {
    value.ok_or_else(|| key_error(key, "is required"))
}

/// A string that, when given, is not empty.
fn optional_text(key: &str, value: Option<String>) -> Result<Option<String>, KeyError> {
    match value {
        Some(s) if s.is_empty() => Err(key_error(key, "is empty")),
        other => Ok(other),
    }
}

fn required_text(key: &str, value: Option<String>) -> Result<String, KeyError> {
    required(key, optional_text(key, value)?)
}

/// The settings of the CPI at `key` (`cpi`, `cpi_types.<type>`).
fn cpi_settings(key: &str, file: CpiFile, base_dir: &Path) -> Result<CpiSettings, KeyError> {
    let command_key = format!("{key}.command");
    let command = required(&command_key, file.command)?;
    let Some((program, args)) = command.split_first() else {
        return Err(key_error(&command_key, "must name a program"));
    };
    let program = resolve_program(program, base_dir).map_err(|m| key_error(&command_key, m))?;
    let mut properties = (file.properties.as_ref()).map_or_else(Map::new, |p| p.expose().clone());
    let path_key = format!("{key}.properties_path");
    if let Some(path) = optional_text(&path_key, file.properties_path)? {
        properties.extend(properties_file(&path_key, &base_dir.join(path))?);
    }
    Ok(CpiSettings {
        program,
        args: args.to_vec(),
        timeout: Duration::from_secs(file.timeout_seconds.unwrap_or(600)),
        properties: Secret::new(properties),
        limits: cpi_limits(key, file.limits.unwrap_or_default())?,
    })
}

/// `<key>.limits`: each a positive number.
fn cpi_limits(key: &str, file: CpiLimitsFile) -> Result<kubosh_cloud::CloudLimits, KeyError> {
    if let Some(rate) = file.create_vm_per_second
        && !(rate.is_finite() && rate > 0.0)
    {
        let key = format!("{key}.limits.create_vm_per_second");
        return Err(key_error(&key, "must be a number above 0"));
    }
    if file.max_in_flight == Some(0) {
        let key = format!("{key}.limits.max_in_flight");
        return Err(key_error(&key, "must be at least 1"));
    }
    Ok(kubosh_cloud::CloudLimits {
        create_vm_per_second: file.create_vm_per_second,
        max_in_flight: file.max_in_flight,
    })
}

/// The map of a `properties_path` at `key`. Errors never quote the file's text.
fn properties_file(key: &str, path: &Path) -> Result<Map<String, Value>, KeyError> {
    let fail = |m: String| key_error(key, m);
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(format!("cannot read {}: {e}", path.display())))?;
    match kubosh_base::yaml::parse_value(&text, &path.display().to_string()) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(Value::Null) => Ok(Map::new()),
        _ => Err(fail(format!("{}: not a YAML map", path.display()))),
    }
}

/// A program with a `/` is a path (relative to `base_dir`); otherwise it is looked up on
/// `PATH` now, since the CPI process gets the Director's fixed `PATH`.
fn resolve_program(program: &str, base_dir: &Path) -> Result<PathBuf, String> {
    if program.is_empty() {
        return Err("the program is empty".into());
    }
    if program.contains('/') {
        return Ok(base_dir.join(program));
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
        .ok_or_else(|| format!("'{program}' is not found on PATH"))
}

/// PEM text given inline (`nats.<key>`) or as a file (`nats.<key>_path`), at most one of
/// them; `None` when neither is given. Errors never quote the text.
fn optional_pem(
    key: &str,
    inline: Option<String>,
    path: Option<String>,
    base_dir: &Path,
) -> Result<Option<String>, KeyError> {
    let dotted = format!("nats.{key}");
    let path_key = format!("{key}_path");
    let text = match (
        optional_text(&dotted, inline)?,
        optional_text(&format!("nats.{path_key}"), path)?,
    ) {
        (Some(_), Some(_)) => {
            return Err(key_error(
                dotted,
                format!("give either {key} or {path_key}, not both"),
            ));
        }
        (Some(text), None) => text,
        (None, Some(path)) => {
            let path = base_dir.join(path);
            std::fs::read_to_string(&path).map_err(|e| {
                key_error(
                    format!("nats.{path_key}"),
                    format!("cannot read {}: {e}", path.display()),
                )
            })?
        }
        (None, None) => return Ok(None),
    };
    if !text.contains("-----BEGIN ") {
        return Err(key_error(dotted, "expected a PEM block"));
    }
    Ok(Some(text))
}

fn pem(
    key: &str,
    inline: Option<String>,
    path: Option<String>,
    base_dir: &Path,
) -> Result<String, KeyError> {
    optional_pem(key, inline, path, base_dir)?.ok_or_else(|| {
        key_error(
            format!("nats.{key}"),
            format!("is required (or {key}_path)"),
        )
    })
}

fn expose(secret: Option<Secret<String>>) -> Option<String> {
    secret.map(|s| s.expose().clone())
}

fn nats_settings(file: NatsFile, base_dir: &Path) -> Result<NatsSettings, KeyError> {
    let url = required_text("nats.url", file.url)?;
    let ca_certificate = pem(
        "ca_certificate",
        file.ca_certificate,
        file.ca_certificate_path,
        base_dir,
    )?;
    let ca_private_key = Secret::new(pem(
        "ca_private_key",
        expose(file.ca_private_key),
        file.ca_private_key_path,
        base_dir,
    )?);
    let ca = Ca::from_pem(&ca_certificate, ca_private_key.expose()).map_err(|e| {
        // Ca::from_pem words certificate problems "CA certificate: ...".
        let key = if e.to_string().starts_with("CA certificate") {
            "nats.ca_certificate"
        } else {
            "nats.ca_private_key"
        };
        key_error(key, e.to_string())
    })?;
    let hm_identity = hm_identity_settings(
        optional_pem(
            "hm_certificate",
            file.hm_certificate,
            file.hm_certificate_path,
            base_dir,
        )?,
        optional_pem(
            "hm_private_key",
            expose(file.hm_private_key),
            file.hm_private_key_path,
            base_dir,
        )?,
        &ca_certificate,
    )?;
    let settings = NatsSettings {
        url,
        ca_certificate,
        ca: Arc::new(ca),
        director_certificate: pem(
            "director_certificate",
            file.director_certificate,
            file.director_certificate_path,
            base_dir,
        )?,
        director_private_key: Secret::new(pem(
            "director_private_key",
            expose(file.director_private_key),
            file.director_private_key_path,
            base_dir,
        )?),
        hm_identity,
        authorization: None,
    };
    MbusTls::new(
        settings.ca_certificate.clone(),
        settings.director_certificate.clone(),
        settings.director_private_key.expose().clone(),
    )
    .client_config()
    .map_err(|e| {
        let key = match e {
            TlsError::NoCa | TlsError::BadCa(_) => "nats.ca_certificate",
            TlsError::NoCert => "nats.director_certificate",
            _ => "nats.director_private_key",
        };
        key_error(key, e.to_string())
    })?;
    let authorization = match file.authorization {
        Some(section) => Some(authorization_settings(section, &settings, base_dir)?),
        None => None,
    };
    Ok(NatsSettings {
        authorization,
        ..settings
    })
}

/// `nats.authorization`: the file, the pid file, and the subjects of the director's and
/// the health monitor's certificates (the HM's issued by the CA when not given).
fn authorization_settings(
    section: NatsAuthorizationSection,
    nats: &NatsSettings,
    base_dir: &Path,
) -> Result<AuthorizationSettings, KeyError> {
    let file = base_dir.join(required_text("nats.authorization.file", section.file)?);
    let pid_file =
        optional_text("nats.authorization.pid_file", section.pid_file)?.map(|p| base_dir.join(p));
    let director_subject = kubosh_base::pki::subject_dn(&nats.director_certificate)
        .map_err(|e| key_error("nats.director_certificate", e.to_string()))?;
    let hm_subject = match &nats.hm_identity {
        Some((cert, _)) => kubosh_base::pki::subject_dn(cert)
            .map_err(|e| key_error("nats.hm_certificate", e.to_string()))?,
        None => format!("CN={}", kubosh_transport::agent::health::HM_COMMON_NAME),
    };
    Ok(AuthorizationSettings {
        file,
        pid_file,
        director_subject,
        hm_subject,
    })
}

/// `hm_certificate` and `hm_private_key`: both or neither; they must load.
fn hm_identity_settings(
    cert: Option<String>,
    key: Option<String>,
    ca_certificate: &str,
) -> Result<Option<(String, Secret<String>)>, KeyError> {
    let (cert, key) = match (cert, key) {
        (None, None) => return Ok(None),
        (Some(cert), Some(key)) => (cert, key),
        (Some(_), None) => {
            return Err(key_error(
                "nats.hm_private_key",
                "is required with hm_certificate",
            ));
        }
        (None, Some(_)) => {
            return Err(key_error(
                "nats.hm_certificate",
                "is required with hm_private_key",
            ));
        }
    };
    MbusTls::new(ca_certificate, cert.clone(), key.clone())
        .client_config()
        .map_err(|e| {
            let name = match e {
                // The CA certificate is ca_certificate's problem, reported the same way.
                TlsError::NoCa | TlsError::BadCa(_) => "nats.ca_certificate",
                TlsError::NoCert => "nats.hm_certificate",
                _ => "nats.hm_private_key",
            };
            key_error(name, e.to_string())
        })?;
    Ok(Some((cert, Secret::new(key))))
}

fn engine_settings(file: EngineFile) -> EngineSettings {
    let defaults = EngineConfig::default();
    EngineSettings {
        agent_wait_timeout: file
            .agent_wait_timeout_seconds
            .map_or(defaults.agent_wait_timeout, Duration::from_secs),
        recovery_wait: file
            .recovery_wait_seconds
            .map_or(defaults.recovery_wait, Duration::from_secs),
        parallel_azs: file.parallel_azs.unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubosh_base::pki::Leaf;
    use serde_json::json;

    fn director_identity(ca: &Ca) -> kubosh_base::pki::CertifiedKey {
        ca.issue(&Leaf {
            common_name: "default.director.bosh-internal",
            client: true,
            ..Leaf::default()
        })
        .unwrap()
    }

    /// A valid file; the CA key is written to `<dir>/ca.key` (the CA is made with rcgen, as
    /// `pki::Ca` does not hand out its key).
    fn valid(dir: &Path) -> Value {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        let ca = Ca::from_pem(&cert.pem(), &key.serialize_pem()).unwrap();
        let director = director_identity(&ca);
        std::fs::write(dir.join("ca.key"), key.serialize_pem()).unwrap();
        json!({
            "state_dir": "state",
            "cpi": {"command": ["sh", "-c", "true"], "properties": {"password": "hunter22"}},
            "nats": {
                "url": "nats://127.0.0.1:4222",
                "ca_certificate": cert.pem(),
                "ca_private_key_path": "ca.key",
                "director_certificate": director.cert_pem,
                "director_private_key": director.key_pem,
            },
            "blobstore": {"local": {"path": "blobs"}},
        })
    }

    fn error(value: &Value, dir: &Path) -> String {
        match DirectorConfig::from_value(value, dir) {
            Ok(_) => panic!("accepted"),
            Err(e) => format!("{}: {}", e.key, e.message),
        }
    }

    /// Task ids increase across commands of one director, never shared by two at once.
    #[test]
    fn task_ids_increase_and_are_never_shared() {
        let dir = tempfile::tempdir().unwrap();
        let c = DirectorConfig::from_value(&valid(dir.path()), dir.path()).unwrap();
        assert_eq!(c.next_task_id().unwrap(), 1);
        assert_eq!(c.next_task_id().unwrap(), 2);
        let c = std::sync::Arc::new(c);
        let mut ids: Vec<u64> = (0..8)
            .map(|_| {
                let c = c.clone();
                std::thread::spawn(move || c.next_task_id().unwrap())
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .collect();
        ids.sort_unstable();
        assert_eq!(ids, (3..=10).collect::<Vec<u64>>());
    }

    #[test]
    fn nats_authorization_names_the_file_and_the_identities_subjects() {
        let dir = tempfile::tempdir().unwrap();
        let c = DirectorConfig::from_value(&valid(dir.path()), dir.path()).unwrap();
        assert_eq!(c.nats.authorization, None);
        assert!(c.agent_access().is_none(), "not confined unless asked");
        let mut v = valid(dir.path());
        v["nats"]["authorization"] = json!({"file": "nats/auth.json", "pid_file": "nats.pid"});
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(
            c.nats.authorization,
            Some(AuthorizationSettings {
                file: dir.path().join("nats/auth.json"),
                pid_file: Some(dir.path().join("nats.pid")),
                director_subject: "CN=default.director.bosh-internal".into(),
                hm_subject: "CN=default.hm.bosh-internal".into(),
            })
        );
        assert!(c.agent_access().is_some());
        v["nats"]["authorization"] = json!({"pid_file": "nats.pid"});
        assert_eq!(
            error(&v, dir.path()),
            "nats.authorization.file: is required"
        );
        v["nats"]["authorization"] = json!({"file": "a", "reload": true});
        assert!(
            error(&v, dir.path()).starts_with("nats.authorization"),
            "{}",
            error(&v, dir.path())
        );
    }

    #[test]
    fn a_valid_file_reads_with_paths_against_its_directory() {
        let dir = tempfile::tempdir().unwrap();
        let c = DirectorConfig::from_value(&valid(dir.path()), dir.path()).unwrap();
        assert_eq!(c.state_dir, dir.path().join("state"));
        assert_eq!(c.blobstore_dir, dir.path().join("blobs"));
        assert_eq!(
            c.deployment_dir("web"),
            dir.path().join("state/deployments/web")
        );
        assert!(c.cpi.program.is_absolute(), "{:?}", c.cpi.program);
        assert!(c.cpi.program.ends_with("sh"));
        assert_eq!(c.cpi.args, ["-c", "true"]);
        assert_eq!(c.cpi.timeout, Duration::from_secs(600));
        assert_eq!(
            c.engine,
            EngineSettings {
                agent_wait_timeout: Duration::from_secs(600),
                recovery_wait: Duration::from_secs(60),
                parallel_azs: false,
            }
        );
        assert_eq!(c.health, None);
        assert!(c.nats.hm_identity.is_none());
        let debug = format!("{c:?}");
        assert!(!debug.contains("hunter22"), "{debug}");
        assert!(!debug.contains("PRIVATE KEY"), "{debug}");
        assert_eq!(c.trusted_certs, "", "no trusted certificates unless given");
    }

    #[test]
    fn cpi_properties_from_a_file_are_merged_over_the_inline_ones() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = valid(dir.path());
        v["cpi"]["properties"] = json!({"region": "eu", "password": "hunter22"});
        std::fs::write(
            dir.path().join("creds.yml"),
            "password: s3cr3t-from-file\ntoken: t0k3n\n",
        )
        .unwrap();
        v["cpi"]["properties_path"] = json!("creds.yml");
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(
            c.cpi.properties.expose(),
            json!({"region": "eu", "password": "s3cr3t-from-file", "token": "t0k3n"})
                .as_object()
                .unwrap()
        );
        assert!(!format!("{c:?}").contains("s3cr3t-from-file"));
        std::fs::write(dir.path().join("creds.yml"), "- s3cr3t-in-a-list\n").unwrap();
        let e = error(&v, dir.path());
        assert!(e.starts_with("cpi.properties_path: "), "{e}");
        assert!(!e.contains("s3cr3t"), "{e}");
        v["cpi"]["properties_path"] = json!("missing.yml");
        assert!(error(&v, dir.path()).starts_with("cpi.properties_path: cannot read"));
    }

    #[test]
    fn trusted_certs_are_read_as_one_pem_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = valid(dir.path());
        let pem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        v["trusted_certs"] = json!(pem);
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(c.trusted_certs, pem);
        v["trusted_certs"] = json!(["not", "a", "string"]);
        assert!(error(&v, dir.path()).starts_with("trusted_certs: "));
    }

    #[test]
    fn every_error_names_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let base = valid(dir.path());
        // (JSON pointer, new value or None to remove, expected error)
        let cases: [(&str, Option<Value>, &str); 14] = [
            ("/statedir", Some(json!("x")), "statedir: unknown key"),
            ("/state_dir", None, "state_dir: is required"),
            ("/cpi/command", Some(json!([])), "cpi.command: must name"),
            (
                "/cpi/command",
                Some(json!(["no-such-cpi-program-xyz"])),
                "cpi.command: 'no-such-cpi-program-xyz' is not found on PATH",
            ),
            (
                "/cpi/timeout_seconds",
                Some(json!("ten")),
                "cpi.timeout_seconds: expected a whole number",
            ),
            (
                "/cpi/limits",
                Some(json!({"create_vm_per_second": 0})),
                "cpi.limits.create_vm_per_second: must be a number above 0",
            ),
            (
                "/cpi/limits",
                Some(json!({"max_in_flight": 0})),
                "cpi.limits.max_in_flight: must be at least 1",
            ),
            (
                "/nats/url",
                Some(json!(4222)),
                "nats.url: expected a string",
            ),
            (
                "/nats/ca_private_key",
                Some(json!("-----BEGIN X-----")),
                "nats.ca_private_key: give either ca_private_key or ca_private_key_path",
            ),
            (
                "/nats/ca_private_key_path",
                None,
                "nats.ca_private_key: is required (or ca_private_key_path)",
            ),
            (
                "/nats/ca_private_key_path",
                Some(json!("missing.key")),
                "nats.ca_private_key_path: cannot read",
            ),
            (
                "/nats/director_private_key",
                Some(json!("hunter22")),
                "nats.director_private_key: expected a PEM block",
            ),
            (
                "/blobstore",
                Some(json!({"s3": {}})),
                "blobstore.s3: unknown key",
            ),
            (
                "/engine",
                Some(json!({"parallel_azs": "yes"})),
                "engine.parallel_azs: expected true or false",
            ),
        ];
        for (pointer, value, expected) in cases {
            let mut v = base.clone();
            let (parent, key) = pointer.rsplit_once('/').unwrap();
            let parent = v.pointer_mut(parent).unwrap().as_object_mut().unwrap();
            match value {
                Some(value) => {
                    parent.insert(key.to_string(), value);
                }
                None => {
                    parent.remove(key);
                }
            }
            let e = error(&v, dir.path());
            assert!(e.starts_with(expected), "{e}\nexpected: {expected}");
        }
    }

    #[test]
    fn serde_errors_keep_the_files_words_and_never_quote_a_value() {
        let dir = tempfile::tempdir().unwrap();
        let base = valid(dir.path());
        let mut v = base.clone();
        v["cpi"]["properties"] = json!("hunter22");
        let e = error(&v, dir.path());
        assert_eq!(e, "cpi.properties: expected a map");
        let mut v = base.clone();
        v["engine"] = json!({"recovery_wait_seconds": -5});
        let e = error(&v, dir.path());
        assert_eq!(
            e,
            "engine.recovery_wait_seconds: expected a whole number of seconds"
        );
        let mut v = base.clone();
        v["cpi"]["command"] = json!({"program": "x"});
        assert_eq!(
            error(&v, dir.path()),
            "cpi.command: expected a list: [program, args...]"
        );
        v["cpi"]["command"] = json!(["x", {"y": 1}]);
        assert_eq!(
            error(&v, dir.path()),
            "cpi.command: every element must be a string"
        );
        assert_eq!(
            error(&json!(["state_dir"]), dir.path()),
            "(top level): expected a map"
        );
        // null is absent: an optional section, or a required one (then named as missing).
        let mut v = base.clone();
        v["engine"] = Value::Null;
        assert!(DirectorConfig::from_value(&v, dir.path()).is_ok());
        v["cpi"] = Value::Null;
        assert_eq!(error(&v, dir.path()), "cpi: is required");
    }

    #[test]
    fn disk_settings_read_as_the_director_spells_them() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = valid(dir.path());
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(c.disks, DiskSettings::default());
        v["snapshots"] = json!({"enabled": true});
        v["enable_cpi_resize_disk"] = json!(true);
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(
            c.disks,
            DiskSettings {
                snapshots_enabled: true,
                enable_cpi_resize_disk: true,
                enable_cpi_update_disk: false,
            }
        );
        v["snapshots"] = json!({"enabled": "yes"});
        assert!(error(&v, dir.path()).starts_with("snapshots.enabled: expected true or false"));
        v["snapshots"] = json!({"schedule": "0 0 * * *"});
        assert!(error(&v, dir.path()).starts_with("snapshots.schedule: unknown key"));
        v["snapshots"] = json!({"enabled": true});
        v["enable_cpi_update_disk"] = json!(1);
        assert!(
            error(&v, dir.path()).starts_with("enable_cpi_update_disk: expected true or false")
        );
    }

    #[test]
    fn a_ca_key_of_another_ca_is_refused_by_name_without_its_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = valid(dir.path());
        let (other_key, _) = kubosh_base::pki::key_pair_pem().unwrap();
        v["nats"]
            .as_object_mut()
            .unwrap()
            .remove("ca_private_key_path");
        v["nats"]["ca_private_key"] = json!(other_key);
        let e = error(&v, dir.path());
        assert!(e.starts_with("nats.ca_private_key: "), "{e}");
        assert!(!e.contains("PRIVATE KEY-----"), "{e}");
        let director = director_identity(&Ca::new("another-ca").unwrap());
        let mut v = valid(dir.path());
        v["nats"]["director_private_key"] = json!(director.key_pem);
        v["nats"]["director_certificate"] = json!(director.cert_pem);
        // A director identity of another CA still loads (the server decides); a key that is
        // not a key does not.
        assert!(DirectorConfig::from_value(&v, dir.path()).is_ok());
    }

    #[test]
    fn health_listens_with_the_hm_identity_given_or_issued_by_the_ca() {
        let dir = tempfile::tempdir().unwrap();
        let mut v = valid(dir.path());
        v["health"] = json!({"listen_for": 35});
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        assert_eq!(
            c.health,
            Some(HealthSettings {
                listen_for: Duration::from_secs(35),
                agent_timeout: Duration::from_secs(60),
            })
        );
        // No hm_certificate: one issued by the CA, which the director's TLS trusts.
        let issued = c.hm_tls().unwrap();
        assert_eq!(issued.ca_pem, c.nats.ca_certificate);
        issued.client_config().unwrap();

        let ca = Ca::from_pem(
            &c.nats.ca_certificate,
            &std::fs::read_to_string(dir.path().join("ca.key")).unwrap(),
        )
        .unwrap();
        let hm = ca
            .issue(&Leaf {
                common_name: kubosh_transport::agent::health::HM_COMMON_NAME,
                client: true,
                ..Leaf::default()
            })
            .unwrap();
        std::fs::write(dir.path().join("hm.key"), &hm.key_pem).unwrap();
        v["nats"]["hm_certificate"] = json!(hm.cert_pem);
        v["nats"]["hm_private_key_path"] = json!("hm.key");
        let c = DirectorConfig::from_value(&v, dir.path()).unwrap();
        let given = c.hm_tls().unwrap();
        assert_eq!(given.cert_pem.as_deref(), Some(hm.cert_pem.as_str()));
        assert!(!format!("{c:?}").contains("PRIVATE KEY"));

        let cases = [
            (json!({}), "health.listen_for: is required"),
            (
                json!({"listen_for": "5s"}),
                "health.listen_for: expected a whole number",
            ),
            (json!({"listen": 5}), "health.listen: unknown key"),
        ];
        for (health, expected) in cases {
            let mut v = valid(dir.path());
            v["health"] = health;
            let e = error(&v, dir.path());
            assert!(e.starts_with(expected), "{e}\nexpected: {expected}");
        }
        let mut v = valid(dir.path());
        v["nats"]["hm_certificate"] = json!(hm.cert_pem);
        let e = error(&v, dir.path());
        assert!(
            e.starts_with("nats.hm_private_key: is required with hm_certificate"),
            "{e}"
        );
        v["nats"]["hm_private_key"] = json!("-----BEGIN PRIVATE KEY-----\nnot a key\n");
        let e = error(&v, dir.path());
        assert!(e.starts_with("nats.hm_private_key: "), "{e}");
        assert!(!e.contains("not a key"), "{e}");
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("director.yml");
        std::fs::write(&path, "state_dir: [").unwrap();
        let e = DirectorConfig::load(&path).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("director config {}", path.display())),
            "{e}"
        );
        std::fs::write(&path, "state_dir: s\n").unwrap();
        let e = DirectorConfig::load(&path).unwrap_err().to_string();
        assert!(e.ends_with(": cpi: is required"), "{e}");
    }
}
