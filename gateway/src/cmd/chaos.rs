//! `sluice-gateway chaos`: the scriptable fake upstream of [`sluice_chaos`] on a port of
//! its own (docs/design.md §6): its flags and run loop.

use anyhow::Context as _;
use sluice_chaos::{AwsKeys, ChaosAuth, ChaosState, DEFAULT_TOKEN_TTL, GoogleAuth, ServiceAccount, serve};
use tokio::net::TcpListener;

use crate::server::shutdown_signal;

/// `sluice-gateway chaos` arguments.
#[derive(Clone, Debug, clap::Args)]
pub struct ChaosArgs {
    /// Address to listen on; port 0 picks a free port (logged once bound).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:9090")]
    pub listen: String,
    /// The key every API-key protocol must send (OpenAI and Bedrock Bearer,
    /// Azure `api-key`, Anthropic `x-api-key`, Gemini `x-goog-api-key`);
    /// unset: any key, or none, is accepted.
    #[arg(long, value_name = "KEY", env = "SLUICE_CHAOS_API_KEY")]
    pub api_key: Option<String>,
    /// Bedrock requests must be SigV4-signed with this access key id ...
    #[arg(long, value_name = "ID", requires = "aws_secret_access_key")]
    pub aws_access_key_id: Option<String>,
    /// ... and this secret key.
    #[arg(long, value_name = "SECRET", env = "SLUICE_CHAOS_AWS_SECRET_ACCESS_KEY", requires = "aws_access_key_id")]
    pub aws_secret_access_key: Option<String>,
    /// Vertex AI requests must carry an access token issued by this upstream
    /// (`POST /token` or the metadata server).
    #[arg(long)]
    pub gcp_tokens: bool,
    /// A service-account JSON key whose JWT assertions `POST /token`
    /// accepts (its public half is used); implies `--gcp-tokens`.
    #[arg(long, value_name = "FILE")]
    pub gcp_service_account: Option<std::path::PathBuf>,
    /// `expires_in` of issued access tokens, in seconds.
    #[arg(long, value_name = "SECS", default_value_t = DEFAULT_TOKEN_TTL.as_secs())]
    pub token_ttl: u64,
}

impl ChaosArgs {
    /// The credentials these flags ask the upstream to check.
    pub fn auth(&self) -> anyhow::Result<ChaosAuth> {
        let aws = match (&self.aws_access_key_id, &self.aws_secret_access_key) {
            (Some(id), Some(secret)) => Some(AwsKeys { access_key_id: id.clone(), secret_access_key: secret.clone() }),
            _ => None,
        };
        let service_account = match &self.gcp_service_account {
            Some(path) => {
                let json = std::fs::read(path).with_context(|| format!("chaos: cannot read {}", path.display()))?;
                let account = ServiceAccount::from_key_json(&json)
                    .map_err(|e| anyhow::anyhow!("chaos: {}: {e}", path.display()))?;
                Some(account)
            }
            None => None,
        };
        let google = (self.gcp_tokens || service_account.is_some())
            .then(|| GoogleAuth { service_account, token_ttl: std::time::Duration::from_secs(self.token_ttl) });
        Ok(ChaosAuth { api_key: self.api_key.clone(), aws, google })
    }
}

/// `sluice-gateway chaos`: binds, logs `listening on http://ADDR` (also on
/// stderr, for tests that pass port 0) and serves until SIGINT or SIGTERM.
pub async fn run(args: ChaosArgs) -> anyhow::Result<()> {
    let auth = args.auth()?;
    let listener =
        TcpListener::bind(&args.listen).await.with_context(|| format!("chaos: cannot listen on {}", args.listen))?;
    let addr = listener.local_addr().context("chaos: no local address")?;
    tracing::info!("listening on http://{addr}");
    eprintln!("listening on http://{addr}");
    // Hung requests never finish, so no graceful drain: stop on the signal.
    tokio::select! {
        served = serve(listener, ChaosState::with_auth(auth)) => served.context("chaos: server failed")?,
        () = shutdown_signal() => tracing::info!("chaos: shutting down"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        chaos: ChaosArgs,
    }

    #[test]
    fn listen_defaults_to_port_9090() {
        let cli = Cli::parse_from(["chaos"]);
        assert_eq!(cli.chaos.listen, "127.0.0.1:9090");
        let cli = Cli::parse_from(["chaos", "--listen", "127.0.0.1:0"]);
        assert_eq!(cli.chaos.listen, "127.0.0.1:0");
        let auth = cli.chaos.auth().unwrap();
        assert!(auth.api_key.is_none() && auth.aws.is_none() && auth.google.is_none());
        let cli = Cli::parse_from([
            "chaos",
            "--api-key",
            "k",
            "--aws-access-key-id",
            "AKID",
            "--aws-secret-access-key",
            "s",
            "--gcp-tokens",
            "--token-ttl",
            "5",
        ]);
        let auth = cli.chaos.auth().unwrap();
        assert_eq!(auth.api_key.as_deref(), Some("k"));
        assert_eq!(auth.aws.unwrap().access_key_id, "AKID");
        assert_eq!(auth.google.unwrap().token_ttl, std::time::Duration::from_secs(5));
        assert!(Cli::try_parse_from(["chaos", "--aws-access-key-id", "AKID"]).is_err());
    }
}
