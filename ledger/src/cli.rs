//! The `sluice-gateway admin` commands (docs/design.md §3), as a clap subcommand tree that
//! the gateway binary mounts, and [`run_admin`], which writes to any `io::Write` so the
//! output can be tested.
//!
//! Output contract: `account show --json` prints
//! `{"account","balance_nanodollars","reserved_nanodollars","balance_usd"}` plus
//! `"granted_nanodollars","grants_open"` (what gateways' balance grants hold of
//! `reserved`) and `"limits"` (the account's [`Limits`]: `{"rpm","tpm","tpd",
//! "concurrency","daily_spend_nanos","monthly_spend_nanos"}`, null where unlimited);
//! without `--json` it prints aligned `LABEL value` lines, `LIMITS` last (`none`, or
//! e.g. `rpm 600, daily_spend 2.50 USD`). `key create` prints the key alone on one line, or
//! `{"account","key"}` with `--json` (limit flags do not change it); `key list`
//! prints a table `ID PREFIX CREATED REVOKED` (times in UTC, RFC 3339; `-` when not
//! revoked), or with `--json` one array of `{"id","account","prefix","created","revoked"}`
//! (`revoked` null when not revoked); `key revoke` prints one line saying what it did.
//! `key update` prints `key ID (PREFIX…) of account NAME: limits LIMITS` and
//! `account update` prints `account NAME: limits LIMITS`, LIMITS as in `account show`.
//! `key show` prints `ID PREFIX ACCOUNT CREATED REVOKED` lines, then either
//! `LIMITS none` or, after a blank line, a table `LIMIT OF VALUE USED ALLOWED-NOW
//! WINDOW-ENDS`: one row per limit of the key (`OF` = `key`) then of its account
//! (`account`), spend in USD, the window's end in UTC (`-` for concurrency). With
//! `--json` it prints one object `{"id","account","prefix","created","revoked","limits",
//! "account_limits","use"}`, `use` an array of
//! `{"of","limit","value","used","allowed_now","window_end"}` (spend in nanodollars,
//! `window_end` null for concurrency).

use std::io::Write;
use std::time::SystemTime;

use clap::{Args, Subcommand};
use serde::Serialize;

use crate::error::LedgerError;
use crate::journal::JournalCheck;
use crate::keys::{KEY_PREFIX, KeyInfo, KeySelector};
use crate::ledger::{Ledger, from_unix_ms};
use crate::limits::{Limits, LimitsUpdate, Meter, MeterUse, Setting, Subject};
use crate::money::{format_usd, parse_usd};
use crate::synthetic::SYNTHETIC_ACCOUNT;

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
    /// Add the account's journal up and compare it with its balance, reserved amount,
    /// open reservations and balance grants (docs/operate.md#auditing-an-account-from-the-journal);
    /// exits non-zero when they disagree.
    Audit {
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
    /// Set or remove an account's limits, shared by all its keys (docs/design.md#5b-limits);
    /// limits not named stay as they are. Every gateway applies them within 1 s.
    #[command(mut_group(LIMIT_GROUP, |g| g.required(true)))]
    Update {
        /// Account name.
        name: String,
        /// The limits to change.
        #[command(flatten)]
        limits: LimitArgs,
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
        /// Limits of the new key (none unless given).
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// List an account's keys (id, prefix, created, revoked); keys themselves are never shown.
    List {
        /// Account name.
        account: String,
        /// Print a JSON array instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key: every gateway refuses it (401) within 1 s. Revoking it again changes
    /// nothing.
    Revoke {
        /// The whole key (sk-sluice-…), or its id from `key list`.
        key: String,
    },
    /// Set or remove a key's own limits (docs/design.md#5b-limits); limits not named stay
    /// as they are. Every gateway applies them within 1 s.
    #[command(mut_group(LIMIT_GROUP, |g| g.required(true)))]
    Update {
        /// The whole key (sk-sluice-…), or its id from `key list`.
        key: String,
        /// The limits to change.
        #[command(flatten)]
        limits: LimitArgs,
    },
    /// Show a key, and the limits of the key and of its account with what is in use of
    /// each now, over every gateway.
    Show {
        /// The whole key (sk-sluice-…), or its id from `key list`.
        key: String,
        /// Print one JSON object instead of lines and a table.
        #[arg(long)]
        json: bool,
    },
}

/// The clap group of the [`LimitArgs`] flags (`key update` and `account update` require one).
const LIMIT_GROUP: &str = "limits";

/// The limit flags of `key create`, `key update` and `account update` (docs/design.md#5b-limits).
/// Only the flags given change anything; `none` (or `off`) removes a limit.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Args)]
#[group(id = LIMIT_GROUP, multiple = true)]
pub struct LimitArgs {
    /// Requests per minute (a sliding minute), e.g. 600; `none` removes the limit.
    #[arg(long, value_name = "N|none", allow_hyphen_values = true)]
    pub rpm: Option<Setting>,
    /// Input plus output tokens per minute (a sliding minute), e.g. 60_000; `none` removes
    /// the limit.
    #[arg(long, value_name = "N|none", allow_hyphen_values = true)]
    pub tpm: Option<Setting>,
    /// Input plus output tokens per day (a sliding 24 h); `none` removes the limit.
    #[arg(long, value_name = "N|none", allow_hyphen_values = true)]
    pub tpd: Option<Setting>,
    /// Requests in flight at once; `none` removes the limit.
    #[arg(long, value_name = "N|none", allow_hyphen_values = true)]
    pub concurrency: Option<Setting>,
    /// Spend per UTC calendar day in USD, e.g. 2.50 (0 allows no paid request); `none`
    /// removes the limit.
    #[arg(long, value_name = "USD|none", value_parser = parse_spend, allow_hyphen_values = true)]
    pub daily_spend: Option<Setting>,
    /// Spend per UTC calendar month in USD, e.g. 100.00 (0 allows no paid request);
    /// `none` removes the limit.
    #[arg(long, value_name = "USD|none", value_parser = parse_spend, allow_hyphen_values = true)]
    pub monthly_spend: Option<Setting>,
}

impl LimitArgs {
    /// The change the flags ask for: the meters named, each set or removed.
    pub fn update(&self) -> LimitsUpdate {
        let flags = [
            (Meter::Requests, self.rpm),
            (Meter::Tokens, self.tpm),
            (Meter::DailyTokens, self.tpd),
            (Meter::Concurrency, self.concurrency),
            (Meter::DailySpend, self.daily_spend),
            (Meter::MonthlySpend, self.monthly_spend),
        ];
        LimitsUpdate(flags.into_iter().filter_map(|(meter, flag)| flag.map(|Setting(value)| (meter, value))).collect())
    }

    /// Whether no flag was given.
    pub fn is_empty(&self) -> bool {
        self.update().0.is_empty()
    }
}

/// A spend limit: a USD amount (`2.50`, at least 0) or `none`/`off` to remove it.
fn parse_spend(text: &str) -> Result<Setting, String> {
    match text.trim() {
        "none" | "off" => Ok(Setting(None)),
        _ => parse_usd(text)
            .map(|nanos| Setting(Some(nanos)))
            .map_err(|e| format!("{e} (or `none` to remove the limit)")),
    }
}

#[derive(Serialize)]
struct AccountJson<'a> {
    account: &'a str,
    balance_nanodollars: i64,
    reserved_nanodollars: i64,
    balance_usd: String,
    /// The part of `reserved` held by gateways' open balance grants (docs/design.md §5a).
    granted_nanodollars: i64,
    grants_open: u64,
    /// The account's limits (docs/design.md §5b), null where unlimited.
    limits: Limits,
}

#[derive(Serialize)]
struct AuditJson<'a> {
    consistent: bool,
    #[serde(flatten)]
    check: &'a JournalCheck,
}

#[derive(Serialize)]
struct KeyJson<'a> {
    account: &'a str,
    key: &'a str,
}

#[derive(Serialize)]
struct KeyListJson<'a> {
    id: i64,
    account: &'a str,
    prefix: &'a str,
    created: String,
    revoked: Option<String>,
}

#[derive(Serialize)]
struct KeyShowJson<'a> {
    id: i64,
    account: &'a str,
    prefix: &'a str,
    created: String,
    revoked: Option<String>,
    limits: Limits,
    account_limits: Limits,
    #[serde(rename = "use")]
    uses: Vec<UseJson>,
}

/// One limit's use in `key show --json`; spend in nanodollars.
#[derive(Serialize)]
struct UseJson {
    of: &'static str,
    limit: &'static str,
    value: i64,
    used: i64,
    allowed_now: i64,
    /// `None` for concurrency, which has no window.
    window_end: Option<String>,
}

/// Runs one admin command against `ledger`, writing its output to `out`.
pub async fn run_admin(ledger: &Ledger, cmd: AdminCommand, out: &mut impl Write) -> Result<(), LedgerError> {
    run_admin_at(ledger, cmd, out, SystemTime::now()).await
}

/// [`run_admin`] with the limits' use read as at `now` (tests fix it).
async fn run_admin_at(
    ledger: &Ledger,
    cmd: AdminCommand,
    out: &mut impl Write,
    now: SystemTime,
) -> Result<(), LedgerError> {
    match cmd {
        AdminCommand::Account(AccountCommand::Create { name, balance }) => {
            let account = ledger.create_account(&name, balance).await?;
            writeln!(out, "created account {} with balance {} USD", account.name, format_usd(account.balance_nanos))?;
        }
        AdminCommand::Account(AccountCommand::Show { name, json }) => {
            let account = ledger.account(&name).await?.ok_or(LedgerError::UnknownAccount(name))?;
            let (grants, granted) = ledger.granted(account.id).await?;
            let limits = ledger.limits(Subject::Account(account.id)).await?;
            if json {
                let body = AccountJson {
                    account: &account.name,
                    balance_nanodollars: account.balance_nanos,
                    reserved_nanodollars: account.reserved_nanos,
                    balance_usd: format_usd(account.balance_nanos),
                    granted_nanodollars: granted,
                    grants_open: grants,
                    limits,
                };
                writeln!(out, "{}", json_line(&body))?;
            } else {
                let mut rows = vec![
                    ("ACCOUNT", account.name.clone()),
                    ("BALANCE", format!("{} USD", format_usd(account.balance_nanos))),
                    (
                        "RESERVED",
                        match grants {
                            0 => format!("{} USD", format_usd(account.reserved_nanos)),
                            n => format!(
                                "{} USD ({} USD in {n} balance grant{} of gateways)",
                                format_usd(account.reserved_nanos),
                                format_usd(granted),
                                if n == 1 { "" } else { "s" }
                            ),
                        },
                    ),
                    ("AVAILABLE", format!("{} USD", format_usd(account.available_nanos()))),
                ];
                if account.name == SYNTHETIC_ACCOUNT {
                    // Its balance stays 0 by design (docs/design.md §10): what it
                    // did is spend, the sum of its settles.
                    let spent = ledger.synthetic_spend().await?;
                    rows.push(("SPENT", format!("{} USD (synthetic checks)", format_usd(spent))));
                }
                rows.push(("LIMITS", limits.to_string()));
                for (label, value) in rows {
                    writeln!(out, "{label:<10} {value}")?;
                }
            }
        }
        AdminCommand::Account(AccountCommand::Audit { name, json }) => {
            let check = ledger.journal_verify(&name).await?;
            if json {
                writeln!(out, "{}", json_line(&AuditJson { consistent: check.is_consistent(), check: &check }))?;
            } else {
                write_audit(out, &check)?;
            }
            if !check.is_consistent() {
                out.flush()?;
                return Err(LedgerError::Inconsistent(name));
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
        AdminCommand::Account(AccountCommand::Update { name, limits }) => {
            let limits = ledger.update_account_limits(&name, &limits.update()).await?;
            writeln!(out, "account {name}: limits {limits}")?;
        }
        AdminCommand::Key(KeyCommand::Create { account, json, limits }) => {
            let key = ledger.create_key(&account).await?;
            if !limits.is_empty()
                && let Err(e) = ledger.update_key_limits(KeySelector::Key(&key), &limits.update()).await
            {
                // The key was never shown, so nobody can use it; revoked so that it is
                // not left in `key list` looking like a key without limits.
                if let Err(revoke) = ledger.revoke_key(KeySelector::Key(&key)).await {
                    tracing::warn!(error = %revoke, "revoking a key whose limits could not be set failed");
                }
                return Err(e);
            }
            if json {
                let body = KeyJson { account: &account, key: &key };
                writeln!(out, "{}", json_line(&body))?;
            } else {
                writeln!(out, "{key}")?;
            }
        }
        AdminCommand::Key(KeyCommand::List { account, json }) => {
            let keys = ledger.keys(&account).await?;
            if json {
                let body: Vec<KeyListJson<'_>> = keys
                    .iter()
                    .map(|k| KeyListJson {
                        id: k.id,
                        account: &k.account,
                        prefix: &k.prefix,
                        created: format_utc(k.created_at),
                        revoked: k.revoked_at.map(format_utc),
                    })
                    .collect();
                writeln!(out, "{}", json_line(&body))?;
            } else {
                write_key_table(out, &keys)?;
            }
        }
        AdminCommand::Key(KeyCommand::Revoke { key }) => {
            let which = parse_key_selector(&key);
            let done = ledger.revoke_key(which).await?;
            let k = &done.key;
            if done.already {
                let at = k.revoked_at.map(format_utc).unwrap_or_default();
                writeln!(
                    out,
                    "key {} ({}…) of account {} was already revoked at {at}; nothing changed",
                    k.id, k.prefix, k.account
                )?;
            } else {
                writeln!(out, "revoked key {} ({}…) of account {}", k.id, k.prefix, k.account)?;
            }
        }
        AdminCommand::Key(KeyCommand::Update { key, limits }) => {
            let (k, limits) = ledger.update_key_limits(parse_key_selector(&key), &limits.update()).await?;
            writeln!(out, "key {} ({}…) of account {}: limits {limits}", k.id, k.prefix, k.account)?;
        }
        AdminCommand::Key(KeyCommand::Show { key, json }) => {
            let (k, account_id) = ledger.key(parse_key_selector(&key)).await?;
            let (of_key, of_account) = (Subject::Key(k.id), Subject::Account(account_id));
            let mut uses: Vec<(Subject, MeterUse)> = Vec::new();
            for subject in [of_key, of_account] {
                uses.extend(ledger.limit_use(subject, now).await?.into_iter().map(|u| (subject, u)));
            }
            if json {
                let body = KeyShowJson {
                    id: k.id,
                    account: &k.account,
                    prefix: &k.prefix,
                    created: format_utc(k.created_at),
                    revoked: k.revoked_at.map(format_utc),
                    limits: ledger.limits(of_key).await?,
                    account_limits: ledger.limits(of_account).await?,
                    uses: uses
                        .iter()
                        .map(|(subject, u)| UseJson {
                            of: subject.kind(),
                            limit: u.meter.as_str(),
                            value: u.limit,
                            used: u.used,
                            allowed_now: u.allowance,
                            window_end: window_end(u),
                        })
                        .collect(),
                };
                writeln!(out, "{}", json_line(&body))?;
            } else {
                let rows = [
                    ("ID", k.id.to_string()),
                    ("PREFIX", k.prefix.clone()),
                    ("ACCOUNT", k.account.clone()),
                    ("CREATED", format_utc(k.created_at)),
                    ("REVOKED", k.revoked_at.map_or_else(|| "-".to_owned(), format_utc)),
                ];
                for (label, value) in rows {
                    writeln!(out, "{label:<10} {value}")?;
                }
                if uses.is_empty() {
                    writeln!(out, "{:<10} none", "LIMITS")?;
                } else {
                    writeln!(out)?;
                    write_use_table(out, &uses)?;
                }
            }
        }
    }
    out.flush()?;
    Ok(())
}

/// The audit as aligned lines: what is stored next to what the journal adds up to.
fn write_audit(out: &mut impl Write, c: &JournalCheck) -> std::io::Result<()> {
    let usd = |n: i64| format!("{} USD", format_usd(n));
    let mark = |ok: bool| if ok { "ok" } else { "MISMATCH" };
    let rows = [
        ("ACCOUNT", c.account.clone(), String::new()),
        ("ENTRIES", c.entries.to_string(), "journal rows".to_owned()),
        (
            "BALANCE",
            usd(c.balance_nanos),
            format!("journal {} {}", usd(c.journal_balance_nanos), mark(c.balance_nanos == c.journal_balance_nanos)),
        ),
        (
            "RESERVED",
            usd(c.reserved_nanos),
            format!("journal {} {}", usd(c.journal_reserved_nanos), mark(c.reserved_nanos == c.journal_reserved_nanos)),
        ),
        (
            "HELD BY",
            usd(c.open_reservations_nanos + c.open_grants_nanos),
            format!(
                "{} in reservations + {} in balance grants {}",
                usd(c.open_reservations_nanos),
                usd(c.open_grants_nanos),
                mark(c.reserved_nanos == c.open_reservations_nanos + c.open_grants_nanos)
            ),
        ),
        (
            "UNPOSTED",
            usd(c.unposted_nanos),
            format!(
                "settled in balance grants, not yet in the account row ({} and {} stored); journal {} {}",
                usd(c.stored_balance_nanos),
                usd(c.stored_reserved_nanos),
                usd(c.journal_unposted_nanos),
                mark(
                    c.unposted_nanos == c.journal_unposted_nanos
                        && c.last_after == Some((c.stored_balance_nanos, c.stored_reserved_nanos))
                )
            ),
        ),
        (
            "UNEXPLAINED",
            c.unexplained_grants.to_string(),
            format!(
                "grants whose journal rows do not add up to what they hold, settled and posted {}",
                mark(c.unexplained_grants == 0)
            ),
        ),
        ("UNCOLLECTED", usd(c.uncollected_nanos), "charges above an estimate, or settled after an expiry".to_owned()),
        ("RESULT", if c.is_consistent() { "consistent" } else { "INCONSISTENT" }.to_owned(), String::new()),
    ];
    let width = rows.iter().map(|(_, v, _)| v.chars().count()).max().unwrap_or(0);
    for (label, value, note) in rows {
        let line = format!("{label:<12} {value:<width$}  {note}");
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// A key as given on the command line: a whole key by its prefix, else a number is an id
/// (anything else is looked up as a key, and so is unknown).
fn parse_key_selector(text: &str) -> KeySelector<'_> {
    match text.parse::<i64>() {
        Ok(id) if !text.starts_with(KEY_PREFIX) => KeySelector::Id(id),
        _ => KeySelector::Key(text),
    }
}

/// `ID PREFIX CREATED REVOKED`, columns as wide as their widest cell.
fn write_key_table(out: &mut impl Write, keys: &[KeyInfo]) -> std::io::Result<()> {
    let rows: Vec<[String; 4]> = keys
        .iter()
        .map(|k| {
            [
                k.id.to_string(),
                k.prefix.clone(),
                format_utc(k.created_at),
                k.revoked_at.map_or_else(|| "-".to_owned(), format_utc),
            ]
        })
        .collect();
    write_table(out, ["ID", "PREFIX", "CREATED", "REVOKED"], &rows)
}

/// `LIMIT OF VALUE USED ALLOWED-NOW WINDOW-ENDS`: one row per limit, spend in USD.
fn write_use_table(out: &mut impl Write, uses: &[(Subject, MeterUse)]) -> std::io::Result<()> {
    let rows: Vec<[String; 6]> = uses
        .iter()
        .map(|(subject, u)| {
            let amount = |n: i64| if u.meter.is_spend() { format_usd(n) } else { n.to_string() };
            [
                u.meter.as_str().to_owned(),
                subject.kind().to_owned(),
                amount(u.limit),
                amount(u.used),
                amount(u.allowance),
                window_end(u).unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    write_table(out, ["LIMIT", "OF", "VALUE", "USED", "ALLOWED-NOW", "WINDOW-ENDS"], &rows)
}

/// When a limit's current window ends (UTC), or `None` for concurrency (no window).
fn window_end(u: &MeterUse) -> Option<String> {
    (u.window_end_ms != i64::MAX).then(|| format_utc(from_unix_ms(u.window_end_ms)))
}

/// A header and rows, each column as wide as its widest cell (the last one unpadded),
/// two spaces apart.
fn write_table<const N: usize>(out: &mut impl Write, header: [&str; N], rows: &[[String; N]]) -> std::io::Result<()> {
    let header = header.map(str::to_owned);
    let mut widths = header.each_ref().map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, width)) in row.iter().zip(widths).enumerate() {
            if i + 1 < N {
                line.push_str(&format!("{cell:<width$}  "));
            } else {
                line.push_str(cell);
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// `2026-12-01T10:44:44Z`: UTC, whole seconds.
fn format_utc(at: SystemTime) -> String {
    jiff::Timestamp::try_from(at).map_or_else(|_| "-".to_owned(), |t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
}

/// Serialises a struct of strings, integers and structs of them (cannot fail).
fn json_line(body: &impl Serialize) -> String {
    serde_json::to_string(body).unwrap_or_else(|_| "{}".to_owned())
}

#[cfg(test)]
mod tests;
