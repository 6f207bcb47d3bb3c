//! `sluice-gateway admin`: accounts and API keys in the ledger (docs/design.md §3). The
//! commands themselves live with the ledger ([`sluice_ledger::cli`]), so that every
//! binary that holds a ledger URL manages it the same way.

use std::io::Write;

pub use sluice_ledger::cli::AdminArgs;

/// Runs one admin command, printing its answer on stdout.
pub async fn run(args: AdminArgs) -> anyhow::Result<()> {
    let ledger = sluice_ledger::Ledger::connect(&args.ledger).await?;
    let mut out = std::io::stdout().lock();
    sluice_ledger::cli::run_admin(&ledger, args.command, &mut out).await?;
    out.flush()?;
    Ok(())
}
