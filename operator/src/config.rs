//! The operator's settings ([`Config`]) and its command line ([`Cli`]), whose flags and
//! environment variables are the contract with the Helm chart.

use std::net::SocketAddr;
use std::time::Duration;

use clap::builder::BoolishValueParser;
use k8s_openapi::api::core::v1::{EnvVar, ResourceRequirements};

use crate::render::{GatewayAuth, GatewaySettings, default_image};

/// Operator settings, as `run` takes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Ledger URL, copied into each gateway namespace's `sluice-ledger` Secret and read
    /// by the operator for status.
    pub ledger_url: String,
    /// What every gateway Deployment runs.
    pub gateway: GatewaySettings,
    /// How often statuses are refreshed from the ledger.
    pub status_interval: Duration,
    /// Leader election: the Lease's namespace, or `None` to run without election.
    pub leader_election: Option<String>,
    /// This replica's name (Lease holder, event reporter instance).
    pub identity: Option<String>,
    /// Address of `/metrics` and `/healthz`; `None` serves nothing.
    pub listen: Option<SocketAddr>,
    /// Watch this namespace only; `None` watches all.
    pub namespace: Option<String>,
    /// Serve the status page (docs/design.md §10) on the listener, with runbook links
    /// into this URL of docs/operate.md; `None` serves none.
    pub status_page: Option<String>,
}

impl Config {
    /// Defaults for everything but the ledger URL (no listener, no election).
    pub fn new(ledger_url: impl Into<String>) -> Self {
        Config {
            ledger_url: ledger_url.into(),
            gateway: GatewaySettings::defaults(),
            status_interval: Duration::from_secs(30),
            leader_election: None,
            identity: None,
            listen: None,
            namespace: None,
            status_page: None,
        }
    }
}

/// `sluice-operator`'s flags (each also read from the environment variable shown).
#[derive(clap::Parser, Debug, Clone)]
#[command(
    name = "sluice-operator",
    version,
    about = "Reconciles sluice ModelRoutes into gateway Deployments and writes status"
)]
pub struct Cli {
    /// Ledger URL: postgres://… (sqlite://PATH for tests).
    #[arg(long, env = "SLUICE_LEDGER_URL")]
    pub ledger_url: String,
    /// Gateway container image.
    #[arg(long, env = "SLUICE_GATEWAY_IMAGE", default_value = default_image())]
    pub gateway_image: String,
    /// Gateway replicas per group.
    #[arg(long, env = "SLUICE_GATEWAY_REPLICAS", default_value_t = 2)]
    pub gateway_replicas: i32,
    /// Gateway client authentication.
    #[arg(long, env = "SLUICE_GATEWAY_AUTH", value_enum, default_value = "keys")]
    pub gateway_auth: GatewayAuth,
    /// Gateway container resources, as the JSON of a core/v1 ResourceRequirements
    /// (default: requests cpu 100m, memory 64Mi; limits memory 256Mi).
    #[arg(long, env = "SLUICE_GATEWAY_RESOURCES", value_parser = parse_resources)]
    pub gateway_resources: Option<ResourceRequirements>,
    /// Extra environment of every gateway container, as the JSON of a list of core/v1
    /// EnvVar: an egress proxy (HTTPS_PROXY, NO_PROXY), a CA bundle (SSL_CERT_FILE),
    /// RUST_LOG. The variables the operator sets itself cannot be overridden.
    #[arg(long, env = "SLUICE_GATEWAY_ENV", value_parser = parse_env)]
    pub gateway_env: Option<GatewayEnv>,
    /// How often statuses are refreshed from the ledger.
    #[arg(long, env = "SLUICE_STATUS_INTERVAL", default_value = "30s", value_parser = parse_interval)]
    pub status_interval: Duration,
    /// Elect a leader through the Lease `sluice-operator` (true/false).
    #[arg(long, env = "SLUICE_LEADER_ELECTION", value_parser = BoolishValueParser::new(), num_args = 0..=1,
          default_value = "false", default_missing_value = "true")]
    pub leader_election: bool,
    /// Namespace of the Lease.
    #[arg(long, env = "POD_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// Address of `/metrics` and `/healthz`.
    #[arg(long, env = "SLUICE_OPERATOR_LISTEN", default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Watch this namespace only (default: all namespaces).
    #[arg(long, env = "SLUICE_WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Serve the status page at `/status` on the listener (true/false).
    #[arg(long, env = "SLUICE_STATUS_PAGE", value_parser = BoolishValueParser::new(), num_args = 0..=1,
          default_value = "false", default_missing_value = "true")]
    pub status_page: bool,
    /// Where the status page's runbook links point: the URL of docs/operate.md.
    #[arg(long, env = "SLUICE_RUNBOOKS_URL", default_value = sluice_status::DEFAULT_RUNBOOKS)]
    pub runbooks_url: String,
}

impl Cli {
    /// The settings these flags stand for; `identity` names this replica (the pod name)
    /// and `default_namespace` is the client's, used for the Lease when no namespace is
    /// given.
    pub fn into_config(self, identity: Option<String>, default_namespace: &str) -> Config {
        Config {
            ledger_url: self.ledger_url,
            gateway: GatewaySettings {
                image: self.gateway_image,
                replicas: self.gateway_replicas,
                auth: self.gateway_auth,
                resources: self.gateway_resources.unwrap_or_else(crate::render::default_resources),
                env: self.gateway_env.map(|e| e.0).unwrap_or_default(),
            },
            status_interval: self.status_interval,
            leader_election: self
                .leader_election
                .then(|| self.lease_namespace.unwrap_or_else(|| default_namespace.into())),
            identity,
            listen: Some(self.listen),
            namespace: self.namespace.filter(|n| !n.is_empty()),
            status_page: self.status_page.then_some(self.runbooks_url),
        }
    }
}

fn parse_resources(text: &str) -> Result<ResourceRequirements, String> {
    serde_json::from_str(text).map_err(|e| format!("not the JSON of a ResourceRequirements: {e}"))
}

/// The value of `--gateway-env` (one JSON list, not a repeated flag).
#[derive(Clone, Debug)]
pub struct GatewayEnv(pub Vec<EnvVar>);

fn parse_env(text: &str) -> Result<GatewayEnv, String> {
    let env: Vec<EnvVar> = serde_json::from_str(text).map_err(|e| format!("not the JSON of a list of EnvVar: {e}"))?;
    for var in &env {
        if var.name.is_empty() {
            return Err("an EnvVar has an empty name".into());
        }
        if crate::render::OWN_GATEWAY_ENV.contains(&var.name.as_str()) {
            return Err(format!("{:?} is set by the operator and cannot be overridden", var.name));
        }
    }
    Ok(GatewayEnv(env))
}

fn parse_interval(text: &str) -> Result<Duration, String> {
    let d = sluice_crds::duration::parse(text)?;
    if d.is_zero() { Err("must be longer than zero".into()) } else { Ok(d) }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("sluice-operator").chain(args.iter().copied()))
    }

    #[test]
    fn defaults_are_the_chart_contract() {
        let cli = parse(&["--ledger-url", "postgres://db/sluice"]).unwrap();
        let config = cli.into_config(Some("op-0".into()), "sluice-system");
        assert_eq!(config.ledger_url, "postgres://db/sluice");
        assert_eq!(config.gateway.image, format!("ghcr.io/sluice-dev/sluice-gateway:{}", env!("CARGO_PKG_VERSION")));
        assert_eq!(config.gateway.replicas, 2);
        assert_eq!(config.gateway.auth, GatewayAuth::Keys);
        assert_eq!(config.gateway.resources, crate::render::default_resources());
        assert_eq!(config.status_interval, Duration::from_secs(30));
        assert_eq!(config.leader_election, None);
        assert_eq!(config.listen, Some("0.0.0.0:8080".parse().unwrap()));
        assert_eq!(config.namespace, None);
        assert_eq!(config.identity.as_deref(), Some("op-0"));
    }

    #[test]
    fn every_flag_parses() {
        let cli = parse(&[
            "--ledger-url=postgres://db/sluice",
            "--gateway-image=registry.local/gw:1",
            "--gateway-replicas=3",
            "--gateway-auth=none",
            r#"--gateway-resources={"limits":{"memory":"1Gi"}}"#,
            r#"--gateway-env=[{"name":"HTTPS_PROXY","value":"http://proxy.internal:3128"}]"#,
            "--status-interval=10s",
            "--leader-election",
            "--lease-namespace=ops",
            "--listen=127.0.0.1:9090",
            "--namespace=team-a",
        ])
        .unwrap();
        let config = cli.into_config(None, "default");
        assert_eq!(config.gateway.image, "registry.local/gw:1");
        assert_eq!(config.gateway.replicas, 3);
        assert_eq!(config.gateway.auth, GatewayAuth::None);
        assert_eq!(config.gateway.resources.limits.unwrap()["memory"].0, "1Gi");
        assert_eq!(config.gateway.env[0].name, "HTTPS_PROXY");
        assert_eq!(config.gateway.env[0].value.as_deref(), Some("http://proxy.internal:3128"));
        assert_eq!(config.status_interval, Duration::from_secs(10));
        assert_eq!(config.leader_election.as_deref(), Some("ops"));
        assert_eq!(config.listen, Some("127.0.0.1:9090".parse().unwrap()));
        assert_eq!(config.namespace.as_deref(), Some("team-a"));
    }

    #[test]
    fn leader_election_takes_an_explicit_boolean_and_defaults_the_lease_namespace() {
        let off = parse(&["--ledger-url=x", "--leader-election=false"]).unwrap().into_config(None, "ns");
        assert_eq!(off.leader_election, None);
        let on = parse(&["--ledger-url=x", "--leader-election=true"]).unwrap().into_config(None, "ns");
        assert_eq!(on.leader_election.as_deref(), Some("ns"));
    }

    #[test]
    fn bad_values_are_refused_with_the_reason() {
        let err = parse(&["--ledger-url=x", r#"--gateway-env=[{"name":"SLUICE_LEDGER_URL","value":"x"}]"#])
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"SLUICE_LEDGER_URL\" is set by the operator"), "{err}");
        let err = parse(&["--ledger-url=x", r#"--gateway-env={"name":"A"}"#]).unwrap_err().to_string();
        assert!(err.contains("not the JSON of a list of EnvVar"), "{err}");
        let err = parse(&["--ledger-url=x", "--gateway-resources=cpu"]).unwrap_err().to_string();
        assert!(err.contains("not the JSON of a ResourceRequirements"), "{err}");
        let err = parse(&["--ledger-url=x", "--gateway-auth=basic"]).unwrap_err().to_string();
        assert!(err.contains("keys") && err.contains("none"), "{err}");
        let err = parse(&["--ledger-url=x", "--status-interval=0s"]).unwrap_err().to_string();
        assert!(err.contains("longer than zero"), "{err}");
        assert!(parse(&[]).is_err(), "--ledger-url is required");
    }
}
