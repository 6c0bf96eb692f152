//! Variables as the controller keeps them: everything of `kubosh_engine::variables`
//! (re-exported) and [`SecretStore`], one Kubernetes Secret per variable.

pub mod kube_store;

pub use kube_store::SecretStore;
pub use kubosh_engine::variables::*;
