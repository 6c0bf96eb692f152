//! Registering a controller process that runs outside the cluster (`kubosh up`, tests) with
//! kube-apiserver's aggregation layer: a Service without selector, the EndpointSlice naming
//! the process's address (what the aggregator routes by), and the `APIService` of the ops
//! API trusting the CA of its serving certificate. In a cluster the chart does the same with a Service
//! selecting the controller's Pods.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::{
    APIService, APIServiceSpec, ServiceReference,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams};

use super::{GROUP, VERSION};

/// The name of the ops API's Service.
pub const SERVICE: &str = "kubosh-ops";

/// The DNS name kube-apiserver verifies the ops API's serving certificate against.
pub fn service_dns_name(namespace: &str) -> String {
    format!("{SERVICE}.{namespace}.svc")
}

/// Registers the ops API served at `address:port` under `namespace`'s Service
/// [`SERVICE`], its certificate signed by `ca_pem` (`None`: the controller makes its own and
/// writes its CA into the `APIService`), and waits (at most `within`) until kube-apiserver
/// says it is available.
pub async fn register_local(
    client: &kube::Client,
    namespace: &str,
    address: IpAddr,
    port: u16,
    ca_pem: Option<&str>,
    within: Duration,
) -> Result<(), String> {
    let apply = PatchParams::apply("kubosh").force();
    let (service, slice, api_service) = objects(namespace, address, port, ca_pem);
    let failed = |what: &str, e: kube::Error| format!("cannot register the ops API ({what}): {e}");
    let services: Api<Service> = Api::namespaced(client.clone(), namespace);
    (services
        .patch(SERVICE, &apply, &Patch::Apply(&service))
        .await)
        .map_err(|e| failed("Service", e))?;
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), namespace);
    (slices.patch(SERVICE, &apply, &Patch::Apply(&slice)).await)
        .map_err(|e| failed("EndpointSlice", e))?;
    let api_services: Api<APIService> = Api::all(client.clone());
    let name = super::api_service_name();
    (api_services
        .patch(&name, &apply, &Patch::Apply(&api_service))
        .await)
        .map_err(|e| failed("APIService", e))?;
    let deadline = Instant::now() + within;
    loop {
        let current = (api_services.get(&name).await).map_err(|e| failed("APIService", e))?;
        let available = (current.status.as_ref())
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
        if available.is_some_and(|c| c.status == "True") {
            return Ok(());
        }
        if Instant::now() > deadline {
            let why = available
                .and_then(|c| c.message.clone())
                .unwrap_or_default();
            return Err(format!("the APIService {name} is not available: {why}"));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The Service, its EndpointSlice at `address:port`, and the APIService.
fn objects(
    namespace: &str,
    address: IpAddr,
    port: u16,
    ca_pem: Option<&str>,
) -> (Service, EndpointSlice, APIService) {
    let meta = |name: &str| ObjectMeta {
        name: Some(name.to_string()),
        namespace: Some(namespace.to_string()),
        ..ObjectMeta::default()
    };
    let service = Service {
        metadata: meta(SERVICE),
        spec: Some(ServiceSpec {
            ports: Some(vec![ServicePort {
                name: Some("https".into()),
                port: 443,
                target_port: Some(IntOrString::Int(port.into())),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    };
    let port = i32::from(port);
    let mut slice_meta = meta(SERVICE);
    slice_meta.labels = Some(
        [(
            "kubernetes.io/service-name".to_string(),
            SERVICE.to_string(),
        )]
        .into(),
    );
    let slice = EndpointSlice {
        metadata: slice_meta,
        address_type: if address.is_ipv4() { "IPv4" } else { "IPv6" }.into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![address.to_string()],
            ..Endpoint::default()
        }]),
        ports: Some(vec![k8s_openapi::api::discovery::v1::EndpointPort {
            name: Some("https".into()),
            port: Some(port),
            ..Default::default()
        }]),
    };
    let api_service = APIService {
        metadata: ObjectMeta {
            name: Some(super::api_service_name()),
            ..ObjectMeta::default()
        },
        spec: Some(APIServiceSpec {
            group: Some(GROUP.into()),
            version: Some(VERSION.into()),
            service: Some(ServiceReference {
                namespace: Some(namespace.into()),
                name: Some(SERVICE.into()),
                port: Some(443),
            }),
            ca_bundle: ca_pem.map(|pem| ByteString(pem.as_bytes().to_vec())),
            group_priority_minimum: 1000,
            version_priority: 15,
            insecure_skip_tls_verify: None,
        }),
        ..APIService::default()
    };
    (service, slice, api_service)
}
