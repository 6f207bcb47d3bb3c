//! Reading the history from the ledger, incrementally: the first request reads the
//! lookback, later ones only what may have changed since (the last few minutes, the last
//! checks, the days not yet summed), so a page served every few seconds stays cheap with
//! months of rollups (docs/design.md §10).
//!
//! What may still change: a minute is added to by every flush of every gateway until
//! the flushes have passed it, so the last [`REREAD_MINUTES`] are read again each time;
//! a check row is written when it finishes, so checks of the last [`REREAD_CHECKS_MS`]
//! are read again. Days before yesterday are summed once. Each ErrorBudget keeps its
//! lookback of minutes, summed over its routes by the database, and is evaluated in
//! memory on every refresh after reading its last [`REREAD_MINUTES`].

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, SystemTime};

use sluice_crds::snapshot::BudgetConfig;
use sluice_ledger::budget::{self, BudgetPolicy, BudgetReport, MinuteCounts, MinuteSeries};
use sluice_ledger::{LATENCY_BUCKET_COUNT, Ledger, LedgerError};

use crate::catalog::Catalog;
use crate::page::{BAR_DAYS, History};
use crate::replay::Check;
use crate::rules::Counts;

/// How far back incidents are derived.
pub const LOOKBACK: Duration = Duration::from_secs(24 * 3600);
/// Minutes read again on every refresh.
pub const REREAD_MINUTES: i64 = 3;
/// Checks of this last span are read again on every refresh.
pub const REREAD_CHECKS_MS: i64 = 120_000;
/// Gateways seen within this are listed.
pub const HEARTBEATS_SINCE: Duration = Duration::from_secs(3600);

const MINUTE_MS: i64 = 60_000;

/// The history kept between requests.
#[derive(Debug, Default)]
pub struct Cache {
    /// Route and upstream keys it was read for; another set starts over.
    keys: (Vec<String>, Vec<String>),
    history: History,
    /// Minutes from this one on are read again.
    minutes_read_to: Option<i64>,
    /// Checks from here on are read again.
    checks_read_to: Option<i64>,
    /// Days before this one are summed in `history.days` for good.
    days_summed_to: Option<i64>,
    /// First-byte histograms by upstream, then minute, over the last hour.
    first_byte: HashMap<String, BTreeMap<i64, [u64; LATENCY_BUCKET_COUNT]>>,
    /// Minutes by ErrorBudget key.
    budgets: HashMap<String, BudgetMinutes>,
}

/// Keeps the entries `from ≤ key < to` of `map`. Splitting walks only the entries
/// dropped (a minute or two at each end), where `retain` would walk a day of them per
/// series on every refresh.
fn keep_range<V>(map: &mut BTreeMap<i64, V>, from: i64, to: i64) {
    let mut kept = map.split_off(&from);
    drop(kept.split_off(&to));
    *map = kept;
}

/// One ErrorBudget's lookback of minutes, summed over its routes.
#[derive(Debug)]
struct BudgetMinutes {
    /// Routes, first slow bucket and lookback they were read for; others start over.
    read_for: (Vec<String>, Option<usize>, i64),
    minutes: MinuteSeries,
    /// Minutes from [`REREAD_MINUTES`] before this one on are read again.
    read_to: i64,
}

/// Brings every budget's minutes up to `now_minute` and evaluates it, as
/// [`Ledger::evaluate_budget`] would over the same rows. A budget seen for the first
/// time reads its lookback, summed per minute by the database; the others read their
/// last minutes together, one query per way of counting slow requests.
async fn refresh_budgets(
    kept: &mut HashMap<String, BudgetMinutes>,
    ledger: &Ledger,
    budgets: &[BudgetConfig],
    now_minute: i64,
) -> HashMap<String, Result<BudgetReport, String>> {
    let mut reports = HashMap::new();
    let mut current = HashMap::new();
    // Budgets to bring up to date by the way they count slow requests: (key, first
    // minute to read again).
    let mut rereads: BTreeMap<Option<usize>, Vec<(String, i64)>> = BTreeMap::new();
    for b in budgets {
        let policy = BudgetPolicy::from(b);
        let lookback = policy.lookback_minutes();
        let read_for = (b.routes.clone(), policy.slow_from(), lookback);
        let from = now_minute - lookback + 1;
        match kept.remove(&b.key).filter(|m| m.read_for == read_for) {
            Some(mut m) => {
                let read_from = (m.read_to - REREAD_MINUTES + 1).max(from);
                m.minutes.keep(from, read_from);
                m.read_to = now_minute;
                rereads.entry(read_for.1).or_default().push((b.key.clone(), read_from));
                current.insert(b.key.clone(), m);
            }
            None => match ledger.budget_minutes(&b.routes, from, now_minute, read_for.1).await {
                Ok(rows) => {
                    current.insert(
                        b.key.clone(),
                        BudgetMinutes { read_for, minutes: MinuteSeries::from_rows(from, &rows), read_to: now_minute },
                    );
                }
                Err(e) => {
                    reports.insert(b.key.clone(), Err(e.to_string()));
                }
            },
        }
    }
    for (slow_from, group) in rereads {
        let mut routes: Vec<String> =
            group.iter().flat_map(|(key, _)| current[key].read_for.0.iter().cloned()).collect();
        routes.sort();
        routes.dedup();
        let since = group.iter().map(|(_, from)| *from).min().unwrap_or(now_minute);
        match ledger.budget_route_minutes(&routes, since, now_minute, slow_from).await {
            Ok(rows) => {
                let mut by_route: HashMap<&str, Vec<(i64, MinuteCounts)>> = HashMap::new();
                for (route, minute, counts) in &rows {
                    by_route.entry(route.as_str()).or_default().push((*minute, *counts));
                }
                for (key, read_from) in &group {
                    let Some(m) = current.get_mut(key) else {
                        continue;
                    };
                    for route in &m.read_for.0 {
                        for (minute, counts) in by_route.get(route.as_str()).into_iter().flatten() {
                            if *minute >= *read_from {
                                m.minutes.add(*minute, counts);
                            }
                        }
                    }
                }
            }
            Err(e) => {
                // Their last minutes are gone: they read their lookback next time.
                for (key, _) in &group {
                    current.remove(key);
                    reports.insert(key.clone(), Err(e.to_string()));
                }
            }
        }
    }
    for b in budgets {
        if let Some(m) = current.get(&b.key) {
            let policy = BudgetPolicy::from(b);
            let report = budget::evaluate_minutes(&policy, &m.minutes, now_minute);
            reports.insert(b.key.clone(), report.map_err(|e| e.to_string()));
        }
    }
    *kept = current;
    reports
}

impl Cache {
    /// Brings the history up to `now` for `catalog` and returns it.
    pub async fn refresh(
        &mut self,
        ledger: &Ledger,
        catalog: &Catalog,
        now: SystemTime,
    ) -> Result<&History, LedgerError> {
        let routes = catalog.route_keys();
        let upstreams = catalog.upstream_keys();
        if self.keys != (routes.clone(), upstreams.clone()) {
            *self = Cache { keys: (routes.clone(), upstreams.clone()), ..Cache::default() };
        }
        let now_ms = crate::page::ms_of(now);
        let now_minute = now_ms.div_euclid(MINUTE_MS);
        let today = now_minute.div_euclid(1440);
        // The minutes kept cover the lookback and all of yesterday, whose day sum they give.
        let lookback_minutes = i64::try_from(LOOKBACK.as_secs() / 60).unwrap_or(1440);
        let keep_from = (now_minute - lookback_minutes).min((today - 1) * 1440);
        let h = &mut self.history;
        h.from_ms = now_ms - lookback_minutes * MINUTE_MS;

        let read_from = self.minutes_read_to.map_or(keep_from, |m| (m - REREAD_MINUTES + 1).max(keep_from));
        let clients = ledger.route_counts(&routes, read_from).await?;
        let live = ledger.upstream_minutes(&upstreams, read_from, now_minute).await?;
        for series in h.clients.values_mut().chain(h.live.values_mut()) {
            keep_range(series, keep_from, read_from);
        }
        for c in clients {
            h.clients
                .entry(c.route)
                .or_default()
                .insert(c.at, Counts { ok: c.total.saturating_sub(c.bad), failed: c.bad });
        }
        let hour_ago = now_minute - 59;
        for series in self.first_byte.values_mut() {
            keep_range(series, hour_ago, read_from);
        }
        for u in live {
            let ok = u.attempts_by_outcome.get("ok").copied().unwrap_or(0);
            // A client error says nothing of the upstream's health.
            let client = u.attempts_by_outcome.get("http_4xx").copied().unwrap_or(0);
            let failed = u.attempts().saturating_sub(ok + client);
            if u.minute >= hour_ago {
                self.first_byte.entry(u.upstream.clone()).or_default().insert(u.minute, u.first_byte_buckets);
            }
            h.live.entry(u.upstream).or_default().insert(u.minute, Counts { ok, failed });
        }
        self.minutes_read_to = Some(now_minute);

        let keep_checks_from = keep_from * MINUTE_MS;
        let checks_from =
            self.checks_read_to.map_or(keep_checks_from, |t| (t - REREAD_CHECKS_MS).max(keep_checks_from));
        let checks = ledger.synthetic_checks(&routes, &upstreams, checks_from).await?;
        for list in h.checks.values_mut() {
            list.retain(|k| k.at_ms >= keep_checks_from && k.at_ms < checks_from);
        }
        for k in checks {
            let key = (k.route, k.upstream);
            let ok = k.outcome == "ok";
            let list = h.checks.entry(key.clone()).or_default();
            list.push(Check { at_ms: k.at_ms, ok });
            let newer = h.last_check.get(&key).is_none_or(|(at, _)| *at <= k.at_ms);
            if newer {
                h.last_check.insert(key, (k.at_ms, k.outcome));
            }
        }
        for list in h.checks.values_mut() {
            list.sort_by_key(|k| k.at_ms);
        }
        self.checks_read_to = Some(now_ms);

        // Days before yesterday from the database, once; yesterday and today from the
        // minutes kept.
        let first_day = today - BAR_DAYS + 1;
        let sum_from = self.days_summed_to.unwrap_or(first_day).max(first_day);
        if sum_from < today - 1 {
            for d in ledger.route_days(&routes, sum_from, today - 2).await? {
                h.days.entry(d.route).or_default().insert(d.at, (d.total, d.bad));
            }
        }
        self.days_summed_to = Some(today - 1);
        for (route, series) in &h.clients {
            let days = h.days.entry(route.clone()).or_default();
            days.retain(|d, _| *d >= first_day && *d < today - 1);
            let mut recent: BTreeMap<i64, (u64, u64)> = BTreeMap::new();
            for (m, n) in series.range((today - 1) * 1440..) {
                let slot = recent.entry(m.div_euclid(1440)).or_default();
                slot.0 += n.total();
                slot.1 += n.failed;
            }
            days.extend(recent);
        }

        h.first_byte = self
            .first_byte
            .iter()
            .map(|(upstream, minutes)| {
                let mut sum = [0; LATENCY_BUCKET_COUNT];
                for buckets in minutes.values() {
                    for (s, n) in sum.iter_mut().zip(buckets) {
                        *s += n;
                    }
                }
                (upstream.clone(), sum)
            })
            .collect();
        h.heartbeats = ledger.heartbeats(now - HEARTBEATS_SINCE).await?;

        h.budgets = refresh_budgets(&mut self.budgets, ledger, &catalog.budgets, now_minute).await;
        Ok(&self.history)
    }
}
