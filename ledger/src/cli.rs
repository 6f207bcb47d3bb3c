//! The `sluice-gateway admin` commands (docs/design.md §3), as a clap subcommand tree that
//! the gateway binary mounts, and [`run_admin`], which writes to any `io::Write` so the
//! output can be tested.
//!
//! Output contract: `account show --json` prints
//! `{"account","balance_nanodollars","reserved_nanodollars","balance_usd"}`; `key create`
//! prints the key alone on one line, or `{"account","key"}` with `--json`.

use std::io::Write;

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::error::LedgerError;
use crate::ledger::Ledger;
use crate::money::{format_usd, parse_usd};

/// `admin --ledger URL <command>`: what the gateway binary can flatten into its CLI.
#[derive(Clone, Debug, Args)]
pub struct AdminArgs {
    /// Ledger URL: sqlite://PATH or postgres://…
    #[arg(long, env = "SLUICE_LEDGER_URL", default_value = "sqlite://sluice.db")]
    pub ledger: String,
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// Administrative commands on the ledger.
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum AdminCommand {
    /// Manage accounts (wallets).
    #[command(subcommand)]
    Account(AccountCommand),
    /// Manage API keys.
    #[command(subcommand)]
    Key(KeyCommand),
}

/// `admin account …`
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum AccountCommand {
    /// Create an account with an opening balance.
    Create {
        /// Account name.
        name: String,
        /// Opening balance in USD, e.g. 15.00.
        #[arg(long, value_parser = parse_usd, allow_hyphen_values = true)]
        balance: i64,
    },
    /// Show an account's balance.
    Show {
        /// Account name.
        name: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Add money to an account.
    Topup {
        /// Account name.
        name: String,
        /// Amount in USD, e.g. 5.00.
        #[arg(long, value_parser = parse_usd, allow_hyphen_values = true)]
        amount: i64,
    },
}

/// `admin key …`
#[derive(Clone, Debug, PartialEq, Eq, Subcommand)]
pub enum KeyCommand {
    /// Create an API key for an account; the key is printed once and stored hashed.
    Create {
        /// Account name.
        account: String,
        /// Print {"account","key"} instead of the bare key.
        #[arg(long)]
        json: bool,
    },
}

#[derive(Serialize)]
struct AccountJson<'a> {
    account: &'a str,
    balance_nanodollars: i64,
    reserved_nanodollars: i64,
    balance_usd: String,
}

#[derive(Serialize)]
struct KeyJson<'a> {
    account: &'a str,
    key: &'a str,
}

/// Runs one admin command against `ledger`, writing its output to `out`.
pub async fn run_admin(
    ledger: &Ledger,
    cmd: AdminCommand,
    out: &mut impl Write,
) -> Result<(), LedgerError> {
    match cmd {
        AdminCommand::Account(AccountCommand::Create { name, balance }) => {
            let account = ledger.create_account(&name, balance).await?;
            writeln!(
                out,
                "created account {} with balance {} USD",
                account.name,
                format_usd(account.balance_nanos)
            )?;
        }
        AdminCommand::Account(AccountCommand::Show { name, json }) => {
            let account = ledger
                .account(&name)
                .await?
                .ok_or(LedgerError::UnknownAccount(name))?;
            if json {
                let body = AccountJson {
                    account: &account.name,
                    balance_nanodollars: account.balance_nanos,
                    reserved_nanodollars: account.reserved_nanos,
                    balance_usd: format_usd(account.balance_nanos),
                };
                writeln!(out, "{}", json_line(&body))?;
            } else {
                let rows = [
                    ("ACCOUNT", account.name.clone()),
                    (
                        "BALANCE",
                        format!("{} USD", format_usd(account.balance_nanos)),
                    ),
                    (
                        "RESERVED",
                        format!("{} USD", format_usd(account.reserved_nanos)),
                    ),
                    (
                        "AVAILABLE",
                        format!("{} USD", format_usd(account.available_nanos())),
                    ),
                ];
                for (label, value) in rows {
                    writeln!(out, "{label:<10} {value}")?;
                }
            }
        }
        AdminCommand::Account(AccountCommand::Topup { name, amount }) => {
            let account = ledger.topup(&name, amount).await?;
            writeln!(
                out,
                "topped up account {} by {} USD; balance {} USD",
                account.name,
                format_usd(amount),
                format_usd(account.balance_nanos)
            )?;
        }
        AdminCommand::Key(KeyCommand::Create { account, json }) => {
            let key = ledger.create_key(&account).await?;
            if json {
                let body = KeyJson {
                    account: &account,
                    key: &key,
                };
                writeln!(out, "{}", json_line(&body))?;
            } else {
                writeln!(out, "{key}")?;
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// Serialises a flat struct of strings and integers (cannot fail).
fn json_line(body: &impl Serialize) -> String {
    serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests;
