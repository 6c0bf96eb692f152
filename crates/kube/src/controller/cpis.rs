//! The namespace's `CpiConfig` resources as the engine's named clouds: merged in name
//! order, their `((variables))` filled in from each one's `varsFrom`, validated, and each CPI
//! made into a cloud by the director's installed CPI types ([`CloudMaker`]).
//!
//! A missing Secret makes whatever needs the clouds wait; a config that does not validate
//! stalls it (`InvalidCpiConfig`). Property values come from Secrets: they are collected to
//! be scrubbed from every message, as a deployment's variables are.

use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::inputs::{InputError, Unready, vars_from};
use crate::api::CpiConfig as CpiConfigResource;
use kubosh_core::manifest::CpiConfig;
use kubosh_core::ops::MissingVars;
use kubosh_engine::clouds::{CloudMaker, NamedClouds};

/// The namespace's CPI config, ready to use.
#[derive(Debug, Clone, Default)]
pub struct CpiInputs {
    /// The merged, interpolated, validated CPI config (empty without `CpiConfig`s).
    pub config: CpiConfig,
    /// Every value its variables took from Secrets.
    pub secrets: Vec<String>,
}

/// The CPI config of `configs` (the `CpiConfig`s of `namespace`), or why it cannot be had.
pub async fn read(
    client: &kube::Client,
    namespace: &str,
    configs: &[CpiConfigResource],
) -> Result<Result<CpiInputs, Unready>, InputError> {
    let mut used: Vec<&CpiConfigResource> = configs.iter().collect();
    used.sort_by_key(|c| c.name_any());
    let mut documents = Vec::new();
    let mut secrets = Vec::new();
    let mut waiting = Vec::new();
    let mut problems = Vec::new();
    for config in used {
        let name = config.name_any();
        let mut missing = Vec::new();
        let vars = vars_from(
            client,
            namespace,
            &config.spec.vars_from,
            &mut missing,
            &mut secrets,
        )
        .await?;
        waiting.extend(
            missing
                .into_iter()
                .map(|line| format!("cpi config {name}: {line}")),
        );
        let document =
            serde_json::to_value(&config.spec.config).map_err(|source| InputError::Document {
                what: "cpi config",
                source,
            })?;
        match kubosh_core::ops::interpolate(&document, &vars, MissingVars::Error) {
            Ok(document) => documents.push((name, document)),
            Err(e) => problems.push(format!("cpi config '{name}': {e}")),
        }
    }
    if !waiting.is_empty() {
        return Ok(Err(Unready::Waiting(waiting)));
    }
    let scrub = |text: String| kubosh_base::secret::scrub(&text, &secrets);
    match kubosh_core::validate::merge_cpi_configs(&documents) {
        Ok(config) if problems.is_empty() => Ok(Ok(CpiInputs {
            config: config.document,
            secrets,
        })),
        Ok(_) => Ok(Err(invalid(problems.into_iter().map(scrub).collect()))),
        Err(found) => {
            problems.extend(found.to_string().lines().map(String::from));
            Ok(Err(invalid(problems.into_iter().map(scrub).collect())))
        }
    }
}

fn invalid(problems: Vec<String>) -> Unready {
    Unready::Invalid {
        reason: "InvalidCpiConfig",
        problems,
    }
}

/// The named clouds of `namespace` (its `CpiConfig`s read now), made by `maker`; what keeps
/// them from being had, as one message (secrets scrubbed).
pub async fn named_clouds(
    client: &kube::Client,
    namespace: &str,
    maker: &dyn CloudMaker,
) -> Result<NamedClouds, String> {
    let configs = Api::<CpiConfigResource>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await
        .map_err(|e| format!("cannot read the CpiConfigs: {e}"))?;
    let inputs = match read(client, namespace, &configs.items).await {
        Ok(Ok(inputs)) => inputs,
        Ok(Err(unready)) => return Err(unready.to_string()),
        Err(e) => return Err(e.to_string()),
    };
    make(inputs, maker)
}

/// The clouds of `inputs`' CPIs, made by `maker`.
pub fn make(inputs: CpiInputs, maker: &dyn CloudMaker) -> Result<NamedClouds, String> {
    let secrets = inputs.secrets;
    NamedClouds::make(inputs.config, maker)
        .map_err(|errors| kubosh_base::secret::scrub(&errors, &secrets))
}
