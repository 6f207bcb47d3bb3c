//! `sluice-gateway budgets`: error-budget consumption from the ledger's rollups, as a
//! table like `kubectl get errorbudgets`, or JSON.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use anyhow::Context;
use sluice_crds::snapshot::BudgetConfig;
use sluice_ledger::Ledger;
use sluice_ledger::budget::{BudgetReport, BudgetState};

/// Options of `budgets`.
#[derive(clap::Args, Debug, Clone)]
pub struct BudgetsArgs {
    /// Manifest files or directories holding the ErrorBudgets.
    #[arg(long, num_args = 1.., required = true)]
    pub manifests: Vec<PathBuf>,
    /// Ledger URL.
    #[arg(long, default_value = "sqlite://sluice.db", env = "SLUICE_LEDGER_URL")]
    pub ledger: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Evaluates one budget against the ledger, now (`Ledger::evaluate_budget`, as the
/// operator does for status).
pub async fn evaluate(ledger: &Ledger, b: &BudgetConfig) -> anyhow::Result<BudgetReport> {
    ledger.evaluate_budget(b, SystemTime::now()).await.with_context(|| format!("ErrorBudget {}", b.key))
}

/// Runs `budgets`.
pub async fn run(args: BudgetsArgs) -> anyhow::Result<()> {
    let manifests = sluice_crds::load_paths(&args.manifests);
    let resolved = sluice_crds::resolve(&manifests, &|_: &str, _: &str, _: &str| true);
    for p in resolved.errors() {
        tracing::warn!(problem = %p, "manifest problem");
    }
    let ledger = Ledger::connect(&args.ledger)
        .await
        .with_context(|| format!("opening the ledger {}", crate::cmd::serve::redact(&args.ledger)))?;
    let mut rows = Vec::new();
    for b in &resolved.snapshot.budgets {
        rows.push((b, evaluate(&ledger, b).await?));
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        let json: Vec<_> = rows
            .iter()
            .map(|(b, r)| serde_json::json!({"name": b.name, "namespace": b.namespace, "objective": b.objective, "window": sluice_crds::duration::format(Duration::from_millis(b.window_ms)), "status": r}))
            .collect();
        writeln!(out, "{}", serde_json::to_string_pretty(&json)?)?;
        return Ok(());
    }
    write!(out, "{}", table(&rows, std::io::stdout().is_terminal()))?;
    Ok(())
}

/// The `kubectl get errorbudgets`-like table.
pub fn table(rows: &[(&BudgetConfig, BudgetReport)], colour: bool) -> String {
    let header = ["NAME", "OBJECTIVE", "WINDOW", "BUDGET", "CONSUMED", "REMAINING", "BURN-1H", "EVENTS", "STATE"];
    let mut cells: Vec<Vec<String>> = vec![header.iter().map(|s| s.to_string()).collect()];
    for (b, r) in rows {
        let state = match r.state {
            BudgetState::Healthy => "Healthy",
            BudgetState::Burning => "Burning",
            BudgetState::Exhausted => "Exhausted",
        };
        cells.push(vec![
            b.name.clone(),
            b.objective.clone(),
            sluice_crds::duration::format(Duration::from_millis(b.window_ms)),
            r.budget.clone(),
            format!("{} ({}%)", r.consumed, r.consumed_percent),
            format!("{}%", r.remaining_percent),
            r.burn_rates.get("1h").cloned().unwrap_or_else(|| "-".into()),
            format!("{}/{}", r.total_events - r.good_events, r.total_events),
            state.to_string(),
        ]);
    }
    let widths: Vec<usize> = (0..header.len()).map(|i| cells.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            let padded = format!("{cell:<w$}", w = widths[i]);
            let painted = match (colour, cell.as_str()) {
                (true, "Healthy") => format!("\x1b[32m{padded}\x1b[0m"),
                (true, "Burning") => format!("\x1b[33m{padded}\x1b[0m"),
                (true, "Exhausted") => format!("\x1b[31m{padded}\x1b[0m"),
                _ => padded,
            };
            line.push_str(&painted);
            line.push_str("   ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
