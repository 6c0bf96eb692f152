//! The state file on disk (bosh-cli's format, [`crate::model::state`]), saved after
//! every single change as bosh-cli's repositories do, but atomically (a temporary file
//! renamed into place, synced), so a kill never leaves half a file.
//!
//! Next to it, kubosh keeps its intents (`<state file>.kubosh-intents`): what it asked the
//! cloud to create before the answer, and so the CID, was saved. bosh-cli's format has no
//! place for them and bosh-cli ignores the extra file; a run finds what a killed run left
//! through them (`recover.rs`).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::EnvError;
use crate::model::EnvState;

/// Something asked of the cloud whose result is not in the state file yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum EnvIntent {
    /// `create_vm` for this agent id.
    CreateVm {
        /// The new VM's agent id.
        agent_id: String,
    },
    /// `create_disk` sent with this request id.
    CreateDisk {
        /// The call's `context.request_id`.
        request_id: String,
    },
    /// `create_stemcell` of this stemcell, sent with this request id.
    CreateStemcell {
        /// `name/version`.
        stemcell: String,
        /// The call's `context.request_id`.
        #[serde(default)]
        request_id: String,
    },
}

/// The state file and its intents.
#[derive(Debug)]
pub struct StateFile {
    path: PathBuf,
    state: EnvState,
    intents: Vec<EnvIntent>,
}

impl StateFile {
    /// Loads `path` (none ⇒ an empty state); a state without a director id gets one and is
    /// saved at once, as bosh-cli's first load does.
    pub fn load(path: &Path) -> Result<StateFile, EnvError> {
        let state = match std::fs::read(path) {
            Ok(bytes) => EnvState::from_bytes(&bytes).map_err(|e| EnvError::State {
                path: path.to_path_buf(),
                reason: e.to_string(),
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => EnvState::default(),
            Err(e) => return Err(EnvError::io(path, e)),
        };
        let intents_path = intents_path(path);
        let intents = match std::fs::read(&intents_path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let mut file = StateFile {
            path: path.to_path_buf(),
            state,
            intents,
        };
        if file.state.director_id.is_empty() {
            file.update(|s| s.director_id = kubosh_base::ids::uuid_v4())?;
        }
        Ok(file)
    }

    /// Whether a state file exists at `path`.
    pub fn exists(path: &Path) -> bool {
        path.is_file()
    }

    /// The state.
    pub fn state(&self) -> &EnvState {
        &self.state
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Applies one change and saves the file.
    pub fn update(&mut self, change: impl FnOnce(&mut EnvState)) -> Result<(), EnvError> {
        let mut next = self.state.clone();
        change(&mut next);
        write(&self.path, &next.to_bytes())?;
        self.state = next;
        Ok(())
    }

    /// Pending intents, oldest first.
    pub fn intents(&self) -> &[EnvIntent] {
        &self.intents
    }

    /// Records an intent before the cloud is asked.
    pub fn add_intent(&mut self, intent: EnvIntent) -> Result<(), EnvError> {
        let mut next = self.intents.clone();
        next.push(intent);
        self.save_intents(next)
    }

    /// Forgets an intent (its result is in the state, or it is settled).
    pub fn remove_intent(&mut self, intent: &EnvIntent) -> Result<(), EnvError> {
        let next: Vec<EnvIntent> = self
            .intents
            .iter()
            .filter(|i| *i != intent)
            .cloned()
            .collect();
        self.save_intents(next)
    }

    fn save_intents(&mut self, next: Vec<EnvIntent>) -> Result<(), EnvError> {
        let path = intents_path(&self.path);
        if next.is_empty() {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(EnvError::io(&path, e)),
            }
        } else {
            let bytes = serde_json::to_vec_pretty(&next).unwrap_or_default();
            write(&path, &bytes)?;
        }
        self.intents = next;
        Ok(())
    }

    /// Removes the state file and its intents (delete-env, as bosh-cli removes the file).
    pub fn remove(&mut self) -> Result<(), EnvError> {
        for path in [intents_path(&self.path), self.path.clone()] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(EnvError::io(&path, e)),
            }
        }
        Ok(())
    }
}

/// `<state file>.kubosh-intents`.
pub fn intents_path(state: &Path) -> PathBuf {
    let mut name = state.file_name().unwrap_or_default().to_os_string();
    name.push(".kubosh-intents");
    state.with_file_name(name)
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), EnvError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    std::fs::create_dir_all(&dir).map_err(|e| EnvError::io(&dir, e))?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    kubosh_engine::state::replace_bytes(&dir, &name, bytes).map_err(|e| EnvError::io(path, e))?;
    // bosh-cli's file is world-readable (0666 less the umask); the state holds no secret.
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_first_load_saves_a_director_id_and_intents_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("env-state.json");
        let mut file = StateFile::load(&path).unwrap();
        let id = file.state().director_id.clone();
        assert_eq!(id.len(), 36);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\n    \"director_id\": "), "{text}");
        assert!(!text.ends_with('\n'));
        let intent = EnvIntent::CreateVm {
            agent_id: "a".into(),
        };
        file.add_intent(intent.clone()).unwrap();
        let again = StateFile::load(&path).unwrap();
        assert_eq!(again.state().director_id, id);
        assert_eq!(again.intents(), std::slice::from_ref(&intent));
        file.remove_intent(&intent).unwrap();
        assert!(!intents_path(&path).exists());
        file.update(|s| s.current_vm_cid = "vm-1".into()).unwrap();
        assert_eq!(
            StateFile::load(&path).unwrap().state().current_vm_cid,
            "vm-1"
        );
        file.remove().unwrap();
        assert!(!path.exists());
    }
}
