//! The Kubernetes layer against one real etcd + kube-apiserver per binary (a namespace per
//! test): CRDs, the Helm chart and the plain manifests, Release/Stemcell reconcilers, Lease
//! locks, Secret variables, the control plane's own setup and teardown, and the GitOps
//! health of a deployment as Argo CD and kstatus judge it.

mod artifacts;
mod chart;
mod client;
mod control_plane;
mod crd_apiserver;
mod crds;
mod events;
mod gitops;
mod helm;
mod lock;
mod registry;
mod state;
mod support;
mod teardown;
mod testbins;
mod variables;
