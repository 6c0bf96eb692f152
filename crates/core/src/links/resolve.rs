//! Binding every consumed link to its provider (`links/links_manager.rb`
//! `#resolve_deployment_links`), with the messages of `links/links_error_builder.rb`.

use super::model::{Binding, JobSpecs, OtherDeployment, ProviderRef, Resolution, Target};
use super::parse::{Consumer, parse};
use crate::manifest::DeploymentManifest;
use crate::validate::{Document, Problems, Validated};

/// Resolves every link the deployment `manifest` consumes.
///
/// - `specs` gives each job's spec (its `provides` and `consumes`), by release and job name;
/// - `others` are the other deployments of the namespace with their providers (the
///   `deployment` key of a consumed link must name one of them, and only their `shared`
///   providers match).
///
/// The deployment's name is `manifest.name` (empty if unset). Every problem is reported, each
/// with its manifest path; unknown `provides`/`consumes` keys are warnings, as the Director
/// only logs them. Messages are the Director's, one per failed link (the Director wraps them
/// in "Failed to resolve links from deployment '…'. See errors below:").
pub fn resolve(
    manifest: &DeploymentManifest,
    specs: &dyn JobSpecs,
    others: &[OtherDeployment],
) -> Result<Validated<Resolution>, Problems> {
    let deployment = manifest.name.as_deref().unwrap_or_default();
    let mut problems = Problems::default();
    let parsed = parse(manifest, deployment, specs, others, &mut problems);
    let mut bindings = Vec::new();
    for consumer in &parsed.consumers {
        if let Some(target) = bind(
            consumer,
            deployment,
            &parsed.providers,
            others,
            &mut problems,
        ) {
            bindings.push(Binding {
                consumer: consumer.site.clone(),
                target,
                network: consumer.network.clone(),
                ip_addresses: consumer.ip_addresses,
            });
        }
    }
    if problems.has_errors() {
        return Err(problems);
    }
    Ok(Validated {
        document: Resolution {
            bindings,
            providers: parsed.providers,
        },
        warnings: problems,
    })
}

/// `resolve_consumer_intent_and_generate_link`: the target of one consumer, or `None` with
/// the problem recorded.
fn bind(
    consumer: &Consumer,
    deployment: &str,
    own: &[ProviderRef],
    others: &[OtherDeployment],
    problems: &mut Problems,
) -> Option<Target> {
    if let Some(manual) = &consumer.manual {
        return Some(Target::Manual(manual.clone()));
    }
    let found = candidates(consumer, deployment, own, others);
    let explicit = consumer.site.explicit;
    // An optional link may stay unresolved, unless the manifest names it (and does not
    // block it).
    if found.is_empty() && consumer.site.optional && (!explicit || consumer.blocked) {
        return Some(if consumer.blocked {
            Target::Blocked
        } else {
            Target::Unresolved
        });
    }
    if found.len() != 1 {
        problems.error(
            Document::Manifest,
            consumer.site.path.clone(),
            link_error(consumer, &found, None),
        );
        return None;
    }
    let provider = found[0];
    if explicit
        && let Some(network) = &consumer.network
        && !provider.networks.contains(network)
    {
        problems.error(
            Document::Manifest,
            consumer.site.path.key("network"),
            link_error(consumer, &found, Some(network)),
        );
        return None;
    }
    Some(Target::Provider(provider.clone()))
}

/// `provider_intents_for_consumer_intent`.
fn candidates<'a>(
    consumer: &Consumer,
    deployment: &str,
    own: &'a [ProviderRef],
    others: &'a [OtherDeployment],
) -> Vec<&'a ProviderRef> {
    if consumer.blocked {
        return Vec::new();
    }
    let (providers, cross) = match &consumer.from_deployment {
        Some(d) if d != deployment => match others.iter().find(|o| &o.name == d) {
            Some(o) => (o.providers.as_slice(), true),
            None => return Vec::new(),
        },
        _ => (own, false),
    };
    providers
        .iter()
        .filter(|p| p.link_type == consumer.site.link_type)
        .filter(|p| !consumer.site.explicit || (p.name == consumer.name && (!cross || p.shared)))
        .filter(|p| p.consumable)
        .collect()
}

/// `LinksErrorBuilder.build_link_error`.
fn link_error(consumer: &Consumer, found: &[&ProviderRef], network: Option<&String>) -> String {
    let site = &consumer.site;
    let mut out = format!("Failed to resolve link '{}' with ", site.name);
    if site.name != consumer.name {
        out.push_str(&format!("alias '{}' and ", consumer.name));
    }
    out.push_str(&format!(
        "type '{}' from job '{}'",
        site.link_type, site.job
    ));
    if site.instance_group.is_empty() {
        out.push('.');
    } else {
        out.push_str(&format!(" in instance group '{}'.", site.instance_group));
    }
    out.push_str(if found.len() > 1 {
        " Multiple link providers found:"
    } else {
        " Details below:"
    });
    if found.is_empty() {
        out.push_str("\n    - No link providers found");
    }
    for p in found {
        out.push_str(&format!("\n    - Link provider '{}' ", p.original_name));
        if p.original_name != p.name {
            out.push_str(&format!("with alias '{}' ", p.name));
        }
        out.push_str(&format!(
            "from job '{}' in instance group '{}' in deployment '{}'",
            p.job, p.instance_group, p.deployment
        ));
        if let Some(n) = network {
            out.push_str(&format!(" does not belong to network '{n}'"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::links::ConsumerSite;
    use crate::validate::Path;

    fn consumer(name: &str, alias: &str) -> Consumer {
        Consumer {
            site: ConsumerSite {
                deployment: "d".into(),
                instance_group: "g".into(),
                job: "j".into(),
                release: "r".into(),
                name: name.into(),
                link_type: "t".into(),
                optional: false,
                explicit: true,
                path: Path::root(),
            },
            alias: alias.into(),
            name: alias.into(),
            blocked: false,
            manual: None,
            network: None,
            ip_addresses: None,
            from_deployment: None,
        }
    }

    fn provider(group: &str, name: &str) -> ProviderRef {
        ProviderRef {
            deployment: "d".into(),
            instance_group: group.into(),
            job: "p".into(),
            original_name: "l".into(),
            name: name.into(),
            link_type: "t".into(),
            shared: false,
            consumable: true,
            custom: false,
            property_names: vec![],
            networks: vec!["n".into()],
            default_network: Some("n".into()),
        }
    }

    #[test]
    fn error_texts_follow_the_links_error_builder() {
        let c = consumer("l", "l");
        assert_eq!(
            link_error(&c, &[], None),
            "Failed to resolve link 'l' with type 't' from job 'j' in instance group 'g'. Details below:\n    - No link providers found"
        );
        let (a, b) = (provider("a", "l"), provider("b", "x"));
        assert_eq!(
            link_error(&consumer("l", "x"), &[&a, &b], None),
            "Failed to resolve link 'l' with alias 'x' and type 't' from job 'j' in instance group 'g'. Multiple link providers found:\n    - Link provider 'l' from job 'p' in instance group 'a' in deployment 'd'\n    - Link provider 'l' with alias 'x' from job 'p' in instance group 'b' in deployment 'd'"
        );
        assert_eq!(
            link_error(&c, &[&a], Some(&"m".to_string())),
            "Failed to resolve link 'l' with type 't' from job 'j' in instance group 'g'. Details below:\n    - Link provider 'l' from job 'p' in instance group 'a' in deployment 'd' does not belong to network 'm'"
        );
    }

    #[test]
    fn candidates_follow_explicitness_sharing_and_consumability() {
        let mut disabled = provider("c", "l");
        disabled.consumable = false;
        let mut other_type = provider("e", "l");
        other_type.link_type = "u".into();
        let own = [provider("a", "l"), provider("b", "x"), disabled, other_type];
        let groups = |c: &Consumer, others: &[OtherDeployment]| -> Vec<String> {
            candidates(c, "d", &own, others)
                .iter()
                .map(|p| p.instance_group.clone())
                .collect()
        };
        let mut c = consumer("l", "l");
        assert_eq!(groups(&c, &[]), ["a"]);
        c.site.explicit = false;
        assert_eq!(groups(&c, &[]), ["a", "b"]);
        c.blocked = true;
        assert!(groups(&c, &[]).is_empty());

        let mut shared = provider("s", "l");
        shared.deployment = "o".into();
        shared.shared = true;
        let mut private = shared.clone();
        private.instance_group = "p".into();
        private.shared = false;
        let others = [OtherDeployment {
            name: "o".into(),
            providers: vec![shared, private],
        }];
        let mut c = consumer("l", "l");
        c.from_deployment = Some("o".into());
        assert_eq!(groups(&c, &others), ["s"]);
        // Naming one's own deployment is no cross-deployment link.
        c.from_deployment = Some("d".into());
        assert_eq!(groups(&c, &others), ["a"]);
    }
}
