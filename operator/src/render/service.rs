//! The group Service: port 80 (`http`) to the gateway pods' 8080.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{GATEWAY_PORT, Group};

/// Service `sluice-gateway-<group>`; `None` when the group serves no route.
pub fn desired_service(group: &Group<'_>) -> Option<Service> {
    if !group.serves() {
        return None;
    }
    Some(Service {
        metadata: group.metadata(),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            selector: Some(group.selector()),
            ports: Some(vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                target_port: Some(IntOrString::Int(GATEWAY_PORT)),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    })
}
