//! `sluice-operator`: parses the flags, sets up logging and the Kubernetes client, and
//! runs [`sluice_operator::run`].

use anyhow::Context as _;
use clap::Parser;
use sluice_operator::Cli;
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn")))
        .init();
    let cli = Cli::parse();
    let client =
        kube::Client::try_default().await.context("building the Kubernetes client (kubeconfig or in-cluster)")?;
    let identity = std::env::var("POD_NAME").or_else(|_| std::env::var("HOSTNAME")).ok();
    let config = cli.into_config(identity, client.default_namespace());
    sluice_operator::run(client, config).await?;
    Ok(())
}
