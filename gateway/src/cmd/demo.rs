//! `sluice-gateway demo`: three chaos upstreams, a gateway on the quickstart manifests
//! and open-loop traffic, through four acts: healthy, the primary region fails, it
//! recovers, the second provider throttles. Every second a line shows who served,
//! failovers with their reasons and latency; a summary and the error budgets close it.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::chaos::{ChaosState, Script};
use crate::cmd::serve::{ServeArgs, build, spawn_loops};

mod report;
mod traffic;

use report::{Report, Style};
use traffic::Sample;

/// Options of `demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// Length of the demo.
    #[arg(long, default_value = "40s", value_parser = crate::cmd::serve::parse_duration)]
    pub duration: Duration,
    /// Requests per second sent to the gateway (open loop).
    #[arg(long, default_value_t = 20)]
    pub rate: u32,
    /// Disable colours even on a terminal.
    #[arg(long)]
    pub no_colour: bool,
}

const UPSTREAMS: &str = include_str!("../../../examples/quickstart/upstreams.yaml");
const ROUTES: &str = include_str!("../../../examples/quickstart/routes.yaml");
const BUDGETS: &str = include_str!("../../../examples/quickstart/budgets.yaml");

/// The upstreams of the quickstart, their placeholder URLs and how fast they answer.
const CAST: [(&str, &str, u64); 3] = [
    ("anthropic-us-east-1", "http://127.0.0.1:9101/v1", 40),
    ("anthropic-eu-west-1", "http://127.0.0.1:9102/v1", 90),
    ("openai-us", "http://127.0.0.1:9103/v1", 60),
];

/// One act of the demo: from which fraction of the run, its title, and what the chaos
/// upstreams do (index into [`CAST`], script).
struct Act {
    from: f64,
    title: &'static str,
    faults: &'static [(usize, Fault)],
}

#[derive(Clone, Copy)]
enum Fault {
    Status503,
    Throttle,
}

const ACTS: [Act; 5] = [
    Act { from: 0.0, title: "all healthy", faults: &[] },
    Act { from: 0.2, title: "us-east-1 answers 503", faults: &[(0, Fault::Status503)] },
    Act { from: 0.45, title: "us-east-1 recovered", faults: &[] },
    Act { from: 0.65, title: "openai-us throttles (429)", faults: &[(2, Fault::Throttle)] },
    Act { from: 0.8, title: "all healthy", faults: &[] },
];

fn healthy(first_byte_ms: u64) -> Script {
    Script { first_byte_ms: Some(first_byte_ms), chunks: Some(8), chunk_ms: Some(10), ..Script::default() }
}

fn script_for(first_byte_ms: u64, fault: Option<Fault>) -> Script {
    match fault {
        None => healthy(first_byte_ms),
        Some(Fault::Status503) => Script { status: Some(503), first_byte_ms: Some(5), ..Script::default() },
        Some(Fault::Throttle) => Script { status: Some(429), retry_after_ms: Some(300), fail_rate: Some(0.7), ..healthy(first_byte_ms) },
    }
}

/// Runs the demo.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let style = Style::new(std::io::stdout().is_terminal() && !args.no_colour);
    let dir = std::env::temp_dir().join(format!("sluice-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = run_in(&args, &dir, &style).await;
    let _ = std::fs::remove_dir_all(&dir);
    result
}

async fn run_in(args: &DemoArgs, dir: &Path, style: &Style) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    // Chaos upstreams on free ports.
    let mut chaos = Vec::new();
    let mut upstreams = UPSTREAMS.to_string();
    for (_, placeholder, first_byte) in CAST {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let state = ChaosState::with_script(healthy(first_byte)).map_err(|e| anyhow::anyhow!("{e}"))?;
        tokio::spawn(crate::chaos::serve(listener, state.clone()));
        upstreams = upstreams.replace(placeholder, &format!("http://{addr}/v1"));
        chaos.push(state);
    }
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    std::fs::write(manifests.join("upstreams.yaml"), upstreams)?;
    std::fs::write(manifests.join("routes.yaml"), ROUTES)?;
    std::fs::write(manifests.join("budgets.yaml"), BUDGETS)?;
    let secrets = dir.join("secrets");
    for (secret, value) in [("anthropic-key", "sk-demo-anthropic"), ("openai-key", "sk-demo-openai")] {
        std::fs::create_dir_all(secrets.join(secret))?;
        std::fs::write(secrets.join(secret).join("apiKey"), value)?;
    }
    let ledger_url = format!("sqlite://{}", dir.join("ledger.db").display());
    let serve_args = ServeArgs {
        manifests: vec![manifests.clone()],
        snapshot: None,
        listen: "127.0.0.1:0".parse()?,
        ledger: ledger_url.clone(),
        secrets_dir: Some(secrets),
        auth: crate::server::AuthMode::Keys,
        max_body_bytes: 1024 * 1024,
        reload_interval: Duration::from_secs(1),
        health_window: Duration::from_secs(60),
        flush_interval: Duration::from_secs(2),
        reservation_ttl: Duration::from_secs(300),
        body_timeout: crate::server::state::DEFAULT_BODY_TIMEOUT,
        shutdown_delay: Duration::ZERO,
        gateway_id: Some("demo".into()),
    };
    let gw = build(&serve_args).await?;
    let ledger = gw.ledger.clone().context("the demo gateway has a ledger")?;
    let opening = 20 * sluice_ledger::NANOS_PER_USD;
    ledger.create_account("demo", opening).await?;
    let key = ledger.create_key("demo").await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let loops = spawn_loops(gw.clone(), &serve_args, "demo".into());
    let server = tokio::spawn(crate::server::serve_http(listener, crate::server::router(gw.clone()), futures::future::pending()));

    writeln!(out, "{}", style.bold("sluice demo"))?;
    writeln!(out, "  gateway   http://{addr}/v1   (ledger {ledger_url}, account \"demo\" with $20.00)")?;
    for ((name, _, fb), _) in CAST.iter().zip(&chaos) {
        writeln!(out, "  upstream  {name:<20} chaos provider, first byte ~{fb}ms")?;
    }
    writeln!(
        out,
        "  traffic   {} req/s for {}s: claude-opus-4 (us-east-1 primary, eu-west-1 backup; half of it streamed) and gpt-4o",
        args.rate,
        args.duration.as_secs()
    )?;
    writeln!(out)?;
    out.flush()?;

    let (tx, mut rx) = mpsc::unbounded_channel::<Sample>();
    let start = Instant::now();
    let driver = tokio::spawn(traffic::drive(format!("http://{addr}/v1"), key, args.rate, args.duration, start, tx));
    let mut report = Report::new(CAST.map(|(n, _, _)| n));
    let mut act_idx = usize::MAX;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    report.header(&mut out, style)?;
    let mut second = 0u64;
    loop {
        // Switch acts on schedule.
        let progress = start.elapsed().as_secs_f64() / args.duration.as_secs_f64();
        let current = ACTS.iter().rposition(|a| progress >= a.from).unwrap_or(0);
        if current != act_idx {
            act_idx = current;
            for (i, (_, _, fb)) in CAST.iter().enumerate() {
                let fault = ACTS[current].faults.iter().find(|(u, _)| *u == i).map(|(_, f)| *f);
                if let Some(state) = chaos.get(i) {
                    state.set_script(script_for(*fb, fault)).map_err(|e| anyhow::anyhow!("{e}"))?;
                }
            }
        }
        tokio::select! {
            _ = tick.tick() => {
                second += 1;
                while let Ok(s) = rx.try_recv() {
                    report.add(s);
                }
                report.line(&mut out, style, second, ACTS[act_idx].title)?;
                out.flush()?;
            }
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
        if driver.is_finished() && rx.is_empty() && start.elapsed() >= args.duration {
            break;
        }
    }
    // Late answers (streams in flight at the end).
    while let Some(s) = rx.recv().await {
        report.add(s);
    }
    gw.sli.flush(&ledger).await?;
    let account = ledger.account("demo").await?.context("the demo account exists")?;
    report.summary(&mut out, style, opening - account.balance_nanos)?;
    let runtime = gw.current.get().context("config is loaded")?;
    let mut rows = Vec::new();
    for b in &runtime.snapshot.budgets {
        rows.push((b, crate::cmd::budgets::evaluate(&ledger, b).await?));
    }
    writeln!(out)?;
    writeln!(out, "{}", style.bold("Error budgets (what `kubectl get errorbudgets` shows in a cluster)"))?;
    write!(out, "{}", crate::cmd::budgets::table(&rows, style.colour))?;
    loops.abort();
    server.abort();
    Ok(())
}
