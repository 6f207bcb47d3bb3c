//! The group Deployment: `sluice-gateway serve --snapshot …` with the ConfigMap, the
//! referenced Secrets and the ledger URL wired in.
//!
//! Config changes do not touch the Deployment (the gateway reloads the mounted file);
//! a change of the *set* of referenced secret names/keys changes the pod-template
//! annotation [`SECRETS_HASH_ANNOTATION`] and so rolls the pods, because a projected
//! volume's item list is fixed when the pod starts.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::apps::v1::{Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment};
use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapVolumeSource, Container, ContainerPort, EnvVar, EnvVarSource, HTTPGetAction, KeyToPath,
    ObjectFieldSelector, PodSecurityContext, PodSpec, PodTemplateSpec, Probe, ProjectedVolumeSource, SeccompProfile,
    SecretKeySelector, SecretProjection, SecurityContext, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sha2::{Digest, Sha256};
use sluice_crds::Snapshot;

use super::{
    GATEWAY_PORT, GatewaySettings, Group, LEDGER_SECRET, LEDGER_SECRET_KEY, SECRETS_DIR, SECRETS_HASH_ANNOTATION,
    SNAPSHOT_DIR, SNAPSHOT_KEY, object_name,
};

/// The UID the gateway runs as (the `nonroot` user of distroless/chainguard images);
/// set so that `runAsNonRoot` can be verified whatever the image's `USER` says.
const RUN_AS: i64 = 65_532;

/// Every `(secret, key)` the group's upstreams read, sorted: API keys, service-account
/// JSON keys and AWS access keys ([`Snapshot::secret_refs`]).
pub fn secret_refs(snapshot: &Snapshot) -> BTreeSet<(String, String)> {
    snapshot.secret_refs()
}

/// Hash of the set of referenced secret names and keys (not of their values): the first
/// 16 hex digits of SHA-256 over `secret/key` lines.
pub fn secrets_hash(refs: &BTreeSet<(String, String)>) -> String {
    let mut hasher = Sha256::new();
    for (secret, key) in refs {
        hasher.update(secret.as_bytes());
        hasher.update(b"/");
        hasher.update(key.as_bytes());
        hasher.update(b"\n");
    }
    hasher.finalize().iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// Deployment `sluice-gateway-<group>`; `None` when the group serves no route.
pub fn desired_deployment(group: &Group<'_>, settings: &GatewaySettings) -> Option<Deployment> {
    if !group.serves() {
        return None;
    }
    let refs = secret_refs(group.snapshot);
    let annotations = BTreeMap::from([
        ("prometheus.io/scrape".to_string(), "true".to_string()),
        ("prometheus.io/port".to_string(), GATEWAY_PORT.to_string()),
        ("prometheus.io/path".to_string(), "/metrics".to_string()),
        (SECRETS_HASH_ANNOTATION.to_string(), secrets_hash(&refs)),
    ]);
    Some(Deployment {
        metadata: group.metadata(),
        spec: DeploymentSpec {
            replicas: Some(settings.replicas),
            selector: LabelSelector { match_labels: Some(group.selector()), ..LabelSelector::default() },
            // Surge first: a gateway group never drops below its replica count on a roll.
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".into()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(group.labels()),
                    annotations: Some(annotations),
                    ..ObjectMeta::default()
                }),
                spec: Some(pod_spec(group, settings, &refs)),
            },
            ..DeploymentSpec::default()
        },
        ..Deployment::default()
    })
}

/// How long a terminating gateway waits for its Service to stop sending it new
/// connections (`--shutdown-delay`) before it closes its listener.
const SHUTDOWN_DELAY: &str = "5s";

/// How long a terminating gateway may take in all: the delay above, then the requests in
/// flight, long streams included (the default 30 s would cut them at every rollout).
const TERMINATION_GRACE_SECONDS: i64 = 300;

fn pod_spec(group: &Group<'_>, settings: &GatewaySettings, refs: &BTreeSet<(String, String)>) -> PodSpec {
    PodSpec {
        termination_grace_period_seconds: Some(TERMINATION_GRACE_SECONDS),
        // The gateway never talks to the Kubernetes API.
        automount_service_account_token: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            seccomp_profile: Some(runtime_default()),
            ..PodSecurityContext::default()
        }),
        containers: vec![container(settings)],
        volumes: Some(vec![
            Volume {
                name: "snapshot".into(),
                config_map: Some(ConfigMapVolumeSource {
                    name: object_name(group.name),
                    items: Some(vec![KeyToPath {
                        key: SNAPSHOT_KEY.into(),
                        path: SNAPSHOT_KEY.into(),
                        mode: None,
                        user: None,
                    }]),
                    ..ConfigMapVolumeSource::default()
                }),
                ..Volume::default()
            },
            Volume {
                name: "secrets".into(),
                projected: Some(ProjectedVolumeSource {
                    sources: Some(secret_projections(refs)),
                    ..ProjectedVolumeSource::default()
                }),
                ..Volume::default()
            },
        ]),
        ..PodSpec::default()
    }
}

/// One projection per Secret, its keys as `<secret>/<key>` files. `optional`, so that a
/// missing Secret or key (reported on the Upstream's status, or left out on purpose like
/// `AWS_SESSION_TOKEN`) does not keep pods from starting; the gateway sends no credentials
/// for it until it appears.
fn secret_projections(refs: &BTreeSet<(String, String)>) -> Vec<VolumeProjection> {
    let mut by_secret: BTreeMap<&str, Vec<KeyToPath>> = BTreeMap::new();
    for (secret, key) in refs {
        by_secret.entry(secret).or_default().push(KeyToPath {
            key: key.clone(),
            path: format!("{secret}/{key}"),
            mode: None,
            user: None,
        });
    }
    by_secret
        .into_iter()
        .map(|(secret, items)| VolumeProjection {
            secret: Some(SecretProjection { name: secret.into(), items: Some(items), optional: Some(true) }),
            ..VolumeProjection::default()
        })
        .collect()
}

fn container(settings: &GatewaySettings) -> Container {
    let args = [
        "serve",
        "--snapshot",
        &format!("{SNAPSHOT_DIR}/{SNAPSHOT_KEY}"),
        "--secrets-dir",
        SECRETS_DIR,
        "--listen",
        &format!("0.0.0.0:{GATEWAY_PORT}"),
        "--auth",
        settings.auth.as_str(),
        "--shutdown-delay",
        SHUTDOWN_DELAY,
    ];
    let probe = |path: &str| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::String("http".into()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(10),
        ..Probe::default()
    };
    Container {
        name: "gateway".into(),
        image: Some(settings.image.clone()),
        args: Some(args.iter().map(|a| a.to_string()).collect()),
        env: Some(
            vec![
                EnvVar {
                    name: "SLUICE_LEDGER_URL".into(),
                    value_from: Some(EnvVarSource {
                        secret_key_ref: Some(SecretKeySelector {
                            name: LEDGER_SECRET.into(),
                            key: LEDGER_SECRET_KEY.into(),
                            optional: None,
                        }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                },
                EnvVar {
                    name: "POD_NAME".into(),
                    value_from: Some(EnvVarSource {
                        field_ref: Some(ObjectFieldSelector { field_path: "metadata.name".into(), api_version: None }),
                        ..EnvVarSource::default()
                    }),
                    ..EnvVar::default()
                },
            ]
            .into_iter()
            .chain(settings.env.iter().cloned())
            .collect(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("http".into()),
            container_port: GATEWAY_PORT,
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(probe("/readyz")),
        liveness_probe: Some(Probe { failure_threshold: Some(3), ..probe("/healthz") }),
        resources: Some(settings.resources.clone()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities { drop: Some(vec!["ALL".into()]), add: None }),
            seccomp_profile: Some(runtime_default()),
            ..SecurityContext::default()
        }),
        volume_mounts: Some(vec![
            VolumeMount {
                name: "snapshot".into(),
                mount_path: SNAPSHOT_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
            VolumeMount {
                name: "secrets".into(),
                mount_path: SECRETS_DIR.into(),
                read_only: Some(true),
                ..VolumeMount::default()
            },
        ]),
        ..Container::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile { type_: "RuntimeDefault".into(), localhost_profile: None }
}
