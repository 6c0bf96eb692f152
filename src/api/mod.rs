//! The Kubernetes API of kubosh: group `kubosh.io`, version `v1alpha1`.

/// All CustomResourceDefinitions kubosh serves, as one multi-document YAML text.
pub fn crds_yaml() -> Result<String, crate::yaml::YamlError> {
    Ok(String::new())
}

/// All CustomResourceDefinitions kubosh serves.
pub fn crds() -> Result<Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>, crate::yaml::YamlError>{
    Ok(Vec::new())
}
