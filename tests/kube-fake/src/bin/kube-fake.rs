//! `kube-fake --kubeconfig-out PATH [--listen 127.0.0.1:0] [--with-sluice-crds] [--request-log PATH]`
//!
//! Serves a fake Kubernetes API server on a free port, writes a kubeconfig for it, prints
//! `listening on http://ADDR` on stderr, and stops on SIGTERM or SIGINT (then writes the
//! request log as JSON if `--request-log` was given).

use std::path::PathBuf;
use std::process::ExitCode;

use sluice_kube_fake::FakeApiServer;

const USAGE: &str =
    "usage: kube-fake --kubeconfig-out PATH [--listen 127.0.0.1:0] [--with-sluice-crds] [--request-log PATH]";

struct Args {
    kubeconfig_out: PathBuf,
    listen: String,
    with_sluice_crds: bool,
    request_log: Option<PathBuf>,
}

fn parse_args() -> Result<Args, String> {
    let mut kubeconfig_out = None;
    let mut listen = "127.0.0.1:0".to_string();
    let mut with_sluice_crds = false;
    let mut request_log = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (a.clone(), None),
        };
        let mut value =
            |name: &str| inline.clone().or_else(|| args.next()).ok_or_else(|| format!("{name} needs a value\n{USAGE}"));
        match flag.as_str() {
            "--kubeconfig-out" => kubeconfig_out = Some(PathBuf::from(value("--kubeconfig-out")?)),
            "--listen" => listen = value("--listen")?,
            "--request-log" => request_log = Some(PathBuf::from(value("--request-log")?)),
            "--with-sluice-crds" => with_sluice_crds = true,
            "-h" | "--help" => return Err(USAGE.to_string()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    let kubeconfig_out = kubeconfig_out.ok_or_else(|| format!("--kubeconfig-out is required\n{USAGE}"))?;
    Ok(Args { kubeconfig_out, listen, with_sluice_crds, request_log })
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .init();
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let fake = if args.with_sluice_crds { FakeApiServer::with_sluice_crds() } else { FakeApiServer::new() };
    let served = match fake.serve(&args.listen).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("kube-fake: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = served.write_kubeconfig(&args.kubeconfig_out) {
        eprintln!("kube-fake: cannot write {}: {e}", args.kubeconfig_out.display());
        return ExitCode::FAILURE;
    }
    eprintln!("listening on {}", served.url());
    wait_for_signal().await;
    served.shutdown().await;
    if let Some(path) = args.request_log {
        let log = serde_json::to_vec_pretty(&fake.requests()).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, log) {
            eprintln!("kube-fake: cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {},
                _ = int.recv() => {},
            }
        }
        _ => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
