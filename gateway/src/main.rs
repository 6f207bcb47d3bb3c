//! The `sluice-gateway` binary: serve, chaos, admin, budgets, demo.

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

// The request path allocates many short-lived buffers; mimalloc cuts the allocator's
// share of each request's instructions (see bench/PROFILE.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "sluice-gateway", version, about = "An LLM gateway that keeps your API up when providers fail")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format.
    #[arg(long, global = true, value_enum, default_value = "text", env = "SLUICE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the OpenAI-compatible API from manifests or an operator snapshot.
    Serve(Box<sluice_gateway::cmd::serve::ServeArgs>),
    /// Run a scriptable fake OpenAI upstream for tests, demos and game days.
    Chaos(sluice_gateway::cmd::chaos::ChaosArgs),
    /// Manage accounts and API keys in the ledger.
    Admin(sluice_gateway::cmd::admin::AdminArgs),
    /// Show error-budget consumption, like `kubectl get errorbudgets`.
    Budgets(sluice_gateway::cmd::budgets::BudgetsArgs),
    /// Chaos upstreams, a gateway and live traffic: watch failover happen.
    Demo(sluice_gateway::cmd::demo::DemoArgs),
}

fn init_tracing(format: LogFormat, default: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => {
            init_tracing(cli.log_format, "info");
            sluice_gateway::cmd::serve::run(*args).await
        }
        Command::Chaos(args) => {
            init_tracing(cli.log_format, "info");
            sluice_gateway::cmd::chaos::run(args).await
        }
        Command::Admin(args) => {
            init_tracing(cli.log_format, "warn");
            sluice_gateway::cmd::admin::run(args).await
        }
        Command::Budgets(args) => {
            init_tracing(cli.log_format, "warn");
            sluice_gateway::cmd::budgets::run(args).await
        }
        Command::Demo(args) => {
            init_tracing(cli.log_format, "error");
            sluice_gateway::cmd::demo::run(args).await
        }
    }
}
