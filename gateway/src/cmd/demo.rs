//! `sluice-gateway demo`: the quickstart's founding routes on chaos upstreams that speak
//! each provider's protocol and check its credentials, a gateway on the quickstart
//! manifests, and open-loop traffic (Chat Completions, Messages and Responses, as the
//! OpenAI SDKs, Claude Code and Codex send them) through five acts: healthy; Anthropic overloaded
//! (529), so Claude is served from Vertex AI; Anthropic back; OpenAI throttles (429), so
//! gpt-4o is served from Azure; healthy. Every second a line shows which upstream served,
//! failovers with their reasons and latency; a summary, the bill and the error budgets
//! close it.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use sluice_chaos::ChaosState;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::cmd::serve::{ServeArgs, build, spawn_loops};
use crate::health::Circuit;

mod cast;
mod report;
mod traffic;

use cast::{ACTS, CAST};
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

/// The upstreams whose circuit breaker is not closed, e.g. `anthropic open`.
fn breakers(gw: &crate::server::state::Gateway) -> String {
    let Some(runtime) = gw.current.get() else { return String::new() };
    let now = tokio::time::Instant::now();
    CAST.iter()
        .filter_map(|m| {
            let state = match runtime.upstreams.get(&format!("default/{}", m.name))?.health.circuit(now) {
                Circuit::Closed => return None,
                Circuit::Open => "open",
                Circuit::HalfOpen => "half-open",
            };
            Some(format!("{} {state}", m.name))
        })
        .collect::<Vec<_>>()
        .join(", ")
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
    // One chaos upstream per quickstart Upstream, on free ports; the placeholders in
    // the manifests and in the service-account key's token_uri point at them.
    let mut listeners = Vec::new();
    for _ in &CAST {
        listeners.push(TcpListener::bind("127.0.0.1:0").await?);
    }
    let mut ports = Vec::new();
    for (member, listener) in CAST.iter().zip(&listeners) {
        ports.push((member.placeholder, format!("http://{}", listener.local_addr()?)));
    }
    let substitute = |text: &str| ports.iter().fold(text.to_string(), |t, (from, to)| t.replace(from, to));
    let vertex_key = cast::vertex_key(&substitute);
    let mut chaos = Vec::new();
    for (member, listener) in CAST.iter().zip(listeners) {
        let state = ChaosState::with_auth(member.auth(&vertex_key)?);
        state.set_script(cast::healthy(member.first_byte_ms)).map_err(|e| anyhow::anyhow!("{e}"))?;
        tokio::spawn(sluice_chaos::serve(listener, state.clone()));
        chaos.push(state);
    }
    let manifests = dir.join("manifests");
    std::fs::create_dir_all(&manifests)?;
    std::fs::write(manifests.join("upstreams.yaml"), substitute(UPSTREAMS))?;
    std::fs::write(manifests.join("routes.yaml"), ROUTES)?;
    std::fs::write(manifests.join("budgets.yaml"), BUDGETS)?;
    let secrets = dir.join("secrets");
    cast::write_secrets(&secrets, &vertex_key)?;
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
        grant_validity: Duration::from_secs(30),
        grant_max: 10 * sluice_ledger::NANOS_PER_USD,
        limit_lease_max: 20,
        cache_max_bytes: crate::cache::DEFAULT_MAX_BYTES,
        cache_redis: None,
        settle_window: Duration::from_millis(2),
        body_timeout: crate::server::state::DEFAULT_BODY_TIMEOUT,
        shutdown_delay: Duration::ZERO,
        gateway_id: Some("demo".into()),
        traces: Default::default(),
    };
    let gw = build(&serve_args).await?;
    let ledger = gw.billing.ledger.clone().context("the demo gateway has a ledger")?;
    let opening = 20 * sluice_ledger::NANOS_PER_USD;
    ledger.create_account("demo", opening).await?;
    let key = ledger.create_key("demo").await?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let loops = spawn_loops(gw.clone(), &serve_args, "demo".into());
    let server = tokio::spawn(crate::server::serve_http(
        listener,
        crate::server::router(gw.clone()),
        futures::future::pending(),
    ));

    writeln!(out, "{}", style.bold("sluice demo"))?;
    writeln!(out, "  gateway   http://{addr}/v1   (ledger {ledger_url}, account \"demo\" with $20.00)")?;
    for (member, (_, url)) in CAST.iter().zip(&ports) {
        let checks = match member.credential {
            cast::Credential::ApiKey(secret, _) => format!("checks the API key in Secret {secret}"),
            cast::Credential::ServiceAccount => "checks Google tokens for the vertex-sa service account".to_string(),
        };
        writeln!(
            out,
            "  upstream  {:<16} {:<17} {url:<23} ~{}ms, {checks}",
            member.name, member.protocol, member.first_byte_ms
        )?;
    }
    writeln!(
        out,
        "  traffic   {} req/s for {}s: claude-opus-4 (anthropic, vertex backup; half streamed), gpt-4o (openai, azure backup), gemini-2.5-pro",
        args.rate,
        args.duration.as_secs()
    )?;
    writeln!(out)?;
    out.flush()?;

    let (tx, mut rx) = mpsc::unbounded_channel::<Sample>();
    let start = Instant::now();
    let driver = tokio::spawn(traffic::drive(format!("http://{addr}/v1"), key, args.rate, args.duration, start, tx));
    let mut report = Report::new(&CAST);
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
            for (i, (member, state)) in CAST.iter().zip(&chaos).enumerate() {
                let fault = ACTS[current].faults.iter().find(|(u, _)| *u == i).map(|(_, f)| *f);
                state.set_script(cast::script_for(member.first_byte_ms, fault)).map_err(|e| anyhow::anyhow!("{e}"))?;
            }
        }
        tokio::select! {
            _ = tick.tick() => {
                second += 1;
                while let Ok(s) = rx.try_recv() {
                    report.add(s);
                }
                report.line(&mut out, style, second, ACTS[act_idx].title, &breakers(&gw))?;
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
    gw.books.sli.flush(&ledger).await?;
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
