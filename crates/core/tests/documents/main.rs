//! Manifests, cloud configs, ops files and links against the validation corpus and real-world
//! manifests (`../shared/fixtures/real-world/`); pure, no component started.

mod invalid_manifests;
mod links;
mod manifest_roundtrip;
mod ops;
mod real_world;
mod real_world_manifests;
mod validate_never_panics;
