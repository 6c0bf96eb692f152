//! The clouds a director drives: its own CPI (AZs that name none, and everything recorded
//! before a CPI config existed) and the named CPIs of its CPI config, each serving the AZs
//! that name it (`azs[].cpi`). VM, disk, stemcell and intent records keep the name of the CPI
//! that made them, so every later call goes to the cloud that holds the thing; a CPI's
//! `migrated_from` makes what was recorded under an earlier name its own.

use std::collections::BTreeMap;
use std::sync::Arc;

use kubosh_cloud::Cloud;
use kubosh_core::manifest::{CloudConfig, Cpi, CpiConfig};

use crate::{Engine, EngineError};

/// Makes the cloud of a named CPI: the installed CPI program its `type` names, with its
/// `properties` in every request's context. The director configuration knows which
/// programs are installed; a CPI config only chooses among them.
pub trait CloudMaker: Send + Sync {
    /// The cloud of `cpi`, or why there is none.
    fn make(&self, cpi: &Cpi) -> Result<Arc<dyn Cloud>, String>;
}

/// The CPI config's named CPIs with their clouds (empty: only the director's own CPI).
#[derive(Clone, Default)]
pub struct NamedClouds {
    config: CpiConfig,
    clouds: BTreeMap<String, Arc<dyn Cloud>>,
}

/// A named cloud could not be made or found.
#[derive(Debug, thiserror::Error)]
pub enum CloudsError {
    /// The director has no CPI program of the CPI's type.
    #[error("CPI '{cpi}' cannot be used: {reason}")]
    Make {
        /// The CPI's name.
        cpi: String,
        /// Why (the maker's words).
        reason: String,
    },
    /// Something recorded under a CPI that the CPI config no longer defines (nor names in a
    /// `migrated_from`).
    #[error(
        "{what} was made by CPI '{cpi}', which the CPI config no longer defines (defined: {defined}); restore it, or name '{cpi}' in the migrated_from of the CPI that now serves that cloud"
    )]
    Unknown {
        /// What was recorded, e.g. `VM vm-1`.
        what: String,
        /// The CPI's recorded name.
        cpi: String,
        /// The CPIs the config defines.
        defined: String,
    },
}

impl std::fmt::Debug for NamedClouds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NamedClouds")
            .field("cpis", &self.config.names())
            .finish()
    }
}

/// The maker of a director that installs no CPI types: every named CPI is refused.
pub struct NoCpiTypes;

impl CloudMaker for NoCpiTypes {
    fn make(&self, cpi: &Cpi) -> Result<Arc<dyn Cloud>, String> {
        Err(format!(
            "its type '{}' is not a CPI this director installs (it installs none: add cpi_types to the director configuration)",
            cpi.kind
        ))
    }
}

impl NamedClouds {
    /// The clouds of every CPI of `config`, made by `maker`; every CPI that cannot be made at
    /// once, a line each.
    pub fn make(config: CpiConfig, maker: &dyn CloudMaker) -> Result<NamedClouds, String> {
        let mut clouds = BTreeMap::new();
        let mut errors = Vec::new();
        for cpi in &config.cpis {
            match maker.make(cpi) {
                Ok(cloud) => {
                    clouds.insert(cpi.name.clone(), cloud);
                }
                Err(reason) => errors.push(CloudsError::Make {
                    cpi: cpi.name.clone(),
                    reason,
                }),
            }
        }
        if errors.is_empty() {
            Ok(NamedClouds { config, clouds })
        } else {
            let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
            Err(lines.join("\n"))
        }
    }

    /// Named clouds as they are (tests and the simulated world): `config`'s CPIs, each with
    /// its cloud from `clouds` (a CPI without one is left out).
    pub fn of(config: CpiConfig, clouds: BTreeMap<String, Arc<dyn Cloud>>) -> NamedClouds {
        NamedClouds { config, clouds }
    }

    /// The cloud now holding what was recorded under CPI `recorded` (its own, or that of a
    /// CPI migrated from it).
    pub fn cloud(&self, recorded: &str) -> Option<Arc<dyn Cloud>> {
        let serving = self.serving(Some(recorded)).ok()??;
        self.clouds.get(&serving.name).cloned()
    }

    /// The CPI now serving what was recorded under `recorded` (`None`: the director's own
    /// CPI): the CPI of that name, else one that was migrated from it. `Err` with the config's
    /// names when there is none.
    fn serving(&self, recorded: Option<&str>) -> Result<Option<&Cpi>, String> {
        let Some(recorded) = recorded else {
            return Ok(None);
        };
        (self.config.find(recorded))
            .or_else(|| self.config.cpis.iter().find(|c| c.owns(recorded)))
            .map(Some)
            .ok_or_else(|| self.config.names())
    }

    /// Whether what was recorded under CPI `recorded` is reachable through CPI `wanted` (the
    /// same cloud): the same name, or `wanted` was migrated from it (`""` in `migrated_from`
    /// names the director's own CPI).
    pub fn same(&self, recorded: Option<&str>, wanted: Option<&str>) -> bool {
        match (recorded, wanted) {
            (None, None) => true,
            (Some(r), Some(w)) if r == w => true,
            (recorded, Some(w)) => self
                .config
                .find(w)
                .is_some_and(|c| c.owns(recorded.unwrap_or_default())),
            (Some(_), None) => false,
        }
    }
}

/// The CPI serving AZ `az` of `cloud` (`None`: the director's own).
pub fn cpi_of_az(cloud: &CloudConfig, az: Option<&str>) -> Option<String> {
    let az = az?;
    cloud
        .azs
        .iter()
        .find(|a| a.name == az)
        .and_then(|a| a.cpi.clone())
}

impl Engine {
    /// The cloud holding what was recorded under CPI `cpi` (`None`: the director's own);
    /// `what` names the thing in the error when no CPI of the config serves it any more.
    pub(crate) fn cloud_of(
        &self,
        cpi: Option<&str>,
        what: &str,
    ) -> Result<&dyn Cloud, EngineError> {
        let unknown = |defined: String| CloudsError::Unknown {
            what: what.to_string(),
            cpi: cpi.unwrap_or_default().to_string(),
            defined,
        };
        match self.named_clouds.serving(cpi).map_err(unknown)? {
            None => Ok(self.cloud.as_ref()),
            Some(serving) => match self.named_clouds.clouds.get(&serving.name) {
                Some(cloud) => Ok(cloud.as_ref()),
                None => Err(unknown(self.named_clouds.config.names()).into()),
            },
        }
    }

    /// The cloud holding `disk`.
    pub(crate) fn disk_cloud(
        &self,
        disk: &crate::state::DiskRecord,
    ) -> Result<&dyn Cloud, EngineError> {
        self.cloud_of(disk.cpi.as_deref(), &format!("disk {}", disk.cid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(value: serde_json::Value) -> CpiConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_cpi_serves_its_own_name_and_the_names_it_was_migrated_from() {
        let named = NamedClouds::of(
            config(json!({"cpis": [
                {"name": "a", "type": "local"},
                {"name": "b", "type": "local", "migrated_from": [{"name": "old"}, {"name": ""}]},
            ]})),
            BTreeMap::new(),
        );
        assert!(named.same(None, None));
        assert!(named.same(Some("a"), Some("a")));
        assert!(named.same(Some("old"), Some("b")));
        assert!(named.same(None, Some("b")), "'' is the director's own CPI");
        assert!(!named.same(None, Some("a")));
        assert!(!named.same(Some("a"), None));
        assert!(!named.same(Some("a"), Some("b")));
        assert_eq!(named.serving(Some("old")).unwrap().unwrap().name, "b");
        assert_eq!(named.serving(Some("gone")).unwrap_err(), "a, b");
        assert!(named.serving(None).unwrap().is_none());
    }

    #[test]
    fn an_az_names_its_cpi() {
        let cloud: CloudConfig =
            serde_json::from_value(json!({"azs": [{"name": "z1"}, {"name": "z2", "cpi": "b"}]}))
                .unwrap();
        assert_eq!(cpi_of_az(&cloud, Some("z2")).as_deref(), Some("b"));
        assert_eq!(cpi_of_az(&cloud, Some("z1")), None);
        assert_eq!(cpi_of_az(&cloud, None), None);
    }
}
