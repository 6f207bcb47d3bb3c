//! The page as data: every state, number and incident both renderings show, built once
//! from the catalog and the loaded history ([`build`], pure, `now` an input), so the HTML
//! and the JSON cannot disagree.

use std::collections::{BTreeMap, HashMap};

use sluice_ledger::budget::BudgetReport;
use sluice_ledger::{Heartbeat, LATENCY_BUCKET_COUNT, LATENCY_BUCKETS_MS};

use crate::catalog::Catalog;
use crate::replay::{CandidateHistory, Check, Incident, RouteHistory, replay};
use crate::rules::{Circuit, Counts, Indicator, LIVE_WINDOW_MINUTES, Status, indicator};

/// Days in the availability bar.
pub const BAR_DAYS: i64 = 90;
/// A heartbeat older than this says nothing about circuits.
pub const FRESH_HEARTBEAT_MS: i64 = 60_000;
const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;

/// The history the page is built from (see [`crate::load`]).
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Replay starts here (unix milliseconds).
    pub from_ms: i64,
    /// Client requests by route, then minute.
    pub clients: HashMap<String, BTreeMap<i64, Counts>>,
    /// Attempts by upstream, then minute.
    pub live: HashMap<String, BTreeMap<i64, Counts>>,
    /// Synthetic checks by (route, upstream), oldest first.
    pub checks: HashMap<(String, String), Vec<Check>>,
    /// The latest check's outcome label by (route, upstream): (finished, outcome).
    pub last_check: HashMap<(String, String), (i64, String)>,
    /// Requests by route, then unix day: (total, bad).
    pub days: HashMap<String, BTreeMap<i64, (u64, u64)>>,
    /// First-byte histogram by upstream over the last hour.
    pub first_byte: HashMap<String, [u64; LATENCY_BUCKET_COUNT]>,
    /// Gateways seen in the last hour.
    pub heartbeats: Vec<Heartbeat>,
    /// Budget reports by budget key (an error as text).
    pub budgets: HashMap<String, Result<BudgetReport, String>>,
}

/// The page.
#[derive(Clone, Debug, PartialEq)]
pub struct Page {
    /// When it was built.
    pub now_ms: i64,
    /// The newest data shown (a check, a flushed minute, a heartbeat), else `now_ms`.
    pub updated_at_ms: i64,
    /// The overall indicator.
    pub indicator: Indicator,
    /// Whether any route has synthetic checks.
    pub synthetic: bool,
    /// Routes.
    pub routes: Vec<RoutePanel>,
    /// Incidents in the lookback, newest first.
    pub incidents: Vec<IncidentView>,
    /// Gateways seen: (id, last seen).
    pub gateways: Vec<(String, i64)>,
    /// Start of the incident lookback.
    pub from_ms: i64,
}

/// One route (a Statuspage component group).
#[derive(Clone, Debug, PartialEq)]
pub struct RoutePanel {
    /// Component id.
    pub id: String,
    /// Route key.
    pub key: String,
    /// The model.
    pub model: String,
    /// Its state.
    pub status: Status,
    /// When it last changed, if in the lookback.
    pub changed_ms: Option<i64>,
    /// First day with traffic in the bar, else now.
    pub created_ms: i64,
    /// Client success objective.
    pub objective: f64,
    /// Synthetic interval, if any.
    pub synthetic_interval_ms: Option<u64>,
    /// Client requests over the live window.
    pub clients: Counts,
    /// Availability per day, oldest first: (unix day, good share or `None` without traffic).
    pub days: Vec<(i64, Option<f64>)>,
    /// Candidates.
    pub candidates: Vec<CandidatePanel>,
    /// ErrorBudgets naming the route.
    pub budgets: Vec<BudgetPanel>,
}

/// One candidate (a Statuspage component in its route's group).
#[derive(Clone, Debug, PartialEq)]
pub struct CandidatePanel {
    /// Component id.
    pub id: String,
    /// `<model> via <upstream>`.
    pub name: String,
    /// Upstream key.
    pub upstream: String,
    /// Protocol.
    pub provider: String,
    /// Region.
    pub region: Option<String>,
    /// Its state.
    pub status: Status,
    /// When it last changed, if in the lookback.
    pub changed_ms: Option<i64>,
    /// Attempts over the live window.
    pub live: Counts,
    /// First-byte p50 over the last hour: the bucket bound in ms (`u64::MAX`: over 60 s).
    pub ttfb_p50_ms: Option<u64>,
    /// First-byte p99, likewise.
    pub ttfb_p99_ms: Option<u64>,
    /// Circuit as the fresh heartbeats say.
    pub circuit: Circuit,
    /// The latest synthetic check: (finished, outcome).
    pub last_check: Option<(i64, String)>,
}

/// One ErrorBudget under a route.
#[derive(Clone, Debug, PartialEq)]
pub struct BudgetPanel {
    /// `namespace/name`.
    pub key: String,
    /// Objective as written.
    pub objective: String,
    /// The report, or why there is none.
    pub report: Result<BudgetReport, String>,
}

/// One incident.
#[derive(Clone, Debug, PartialEq)]
pub struct IncidentView {
    /// Incident id.
    pub id: String,
    /// `<model>: <state words>` (the worst state).
    pub name: String,
    /// Route key.
    pub route: String,
    /// The route's component id.
    pub component_id: String,
    /// The model.
    pub model: String,
    /// The replay's incident.
    pub incident: Incident,
}

/// Builds the page at `now_ms`.
pub fn build(catalog: &Catalog, history: &History, now_ms: i64) -> Page {
    let empty_series = BTreeMap::new();
    let empty_checks = Vec::new();
    let circuits = circuits(&history.heartbeats, now_ms);
    let now_minute = now_ms.div_euclid(MINUTE_MS);
    let today = now_ms.div_euclid(DAY_MS);
    let mut updated_at_ms = i64::MIN;
    let mut routes = Vec::with_capacity(catalog.routes.len());
    let mut incidents = Vec::new();
    for r in &catalog.routes {
        let clients = history.clients.get(&r.key).unwrap_or(&empty_series);
        let interval = r.synthetic_interval_ms.map(|i| i64::try_from(i).unwrap_or(i64::MAX));
        let candidates: Vec<CandidateHistory<'_>> = r
            .candidates
            .iter()
            .map(|c| CandidateHistory {
                interval_ms: interval,
                checks: history.checks.get(&(r.key.clone(), c.upstream.clone())).unwrap_or(&empty_checks),
                live: history.live.get(&c.upstream).unwrap_or(&empty_series),
                circuit: circuits.get(c.upstream.as_str()).copied().unwrap_or(Circuit::Unknown),
            })
            .collect();
        for c in &candidates {
            if let Some(k) = c.checks.last() {
                updated_at_ms = updated_at_ms.max(k.at_ms);
            }
            if let Some((m, _)) = c.live.last_key_value() {
                updated_at_ms = updated_at_ms.max(((m + 1) * MINUTE_MS - 1).min(now_ms));
            }
        }
        if let Some((m, _)) = clients.last_key_value() {
            updated_at_ms = updated_at_ms.max(((m + 1) * MINUTE_MS - 1).min(now_ms));
        }
        let history_of_route = RouteHistory { clients, objective: r.objective, candidates: candidates.clone() };
        let replayed = replay(&history_of_route, history.from_ms, now_ms);
        let route_id = component_id(&r.key, None);
        let mut client_window = Counts::default();
        for (_, n) in clients.range(now_minute - LIVE_WINDOW_MINUTES + 1..=now_minute) {
            client_window.add(*n);
        }
        let by_day = history.days.get(&r.key);
        let days: Vec<(i64, Option<f64>)> = (today - BAR_DAYS + 1..=today)
            .map(|d| {
                let share = by_day
                    .and_then(|m| m.get(&d))
                    .filter(|(total, _)| *total > 0)
                    .map(|(total, bad)| total.saturating_sub(*bad) as f64 / *total as f64);
                (d, share)
            })
            .collect();
        let created_ms = days.iter().find(|(_, s)| s.is_some()).map_or(now_ms, |(d, _)| d * DAY_MS);
        let candidate_panels = r
            .candidates
            .iter()
            .zip(&candidates)
            .enumerate()
            .map(|(i, (spec, h))| {
                let mut live = Counts::default();
                for (_, n) in h.live.range(now_minute - LIVE_WINDOW_MINUTES + 1..=now_minute) {
                    live.add(*n);
                }
                let fb = history.first_byte.get(&spec.upstream);
                CandidatePanel {
                    id: component_id(&r.key, Some(&spec.upstream)),
                    name: format!("{} via {}", r.model, spec.upstream),
                    upstream: spec.upstream.clone(),
                    provider: spec.provider.clone(),
                    region: spec.region.clone(),
                    status: replayed.candidates[i],
                    changed_ms: replayed.candidate_changed_ms[i],
                    live,
                    ttfb_p50_ms: fb.and_then(|b| percentile(b, 50)),
                    ttfb_p99_ms: fb.and_then(|b| percentile(b, 99)),
                    circuit: h.circuit,
                    last_check: history.last_check.get(&(r.key.clone(), spec.upstream.clone())).cloned(),
                }
            })
            .collect();
        let budgets = catalog
            .budgets
            .iter()
            .filter(|b| b.routes.contains(&r.key))
            .map(|b| BudgetPanel {
                key: b.key.clone(),
                objective: b.objective.clone(),
                report: history.budgets.get(&b.key).cloned().unwrap_or_else(|| Err("not evaluated yet".to_owned())),
            })
            .collect();
        for incident in replayed.incidents {
            incidents.push(IncidentView {
                id: incident_id(&r.key, incident.started_ms),
                name: format!("{}: {}", r.model, incident.worst.words().to_lowercase()),
                route: r.key.clone(),
                component_id: route_id.clone(),
                model: r.model.clone(),
                incident,
            });
        }
        routes.push(RoutePanel {
            id: route_id,
            key: r.key.clone(),
            model: r.model.clone(),
            status: replayed.status,
            changed_ms: replayed.changed_ms,
            created_ms,
            objective: r.objective,
            synthetic_interval_ms: r.synthetic_interval_ms,
            clients: client_window,
            days,
            candidates: candidate_panels,
            budgets,
        });
    }
    for h in &history.heartbeats {
        updated_at_ms = updated_at_ms.max(ms_of(h.at));
    }
    incidents.sort_by(|a, b| b.incident.started_ms.cmp(&a.incident.started_ms).then_with(|| a.route.cmp(&b.route)));
    Page {
        now_ms,
        updated_at_ms: if updated_at_ms == i64::MIN { now_ms } else { updated_at_ms },
        indicator: indicator(routes.iter().map(|r| r.status)),
        synthetic: catalog.routes.iter().any(|r| r.synthetic_interval_ms.is_some()),
        routes,
        incidents,
        gateways: history.heartbeats.iter().map(|h| (h.gateway_id.clone(), ms_of(h.at))).collect(),
        from_ms: history.from_ms,
    }
}

impl Page {
    /// Every component's state by id (groups and members), for comparing renderings.
    pub fn states(&self) -> BTreeMap<String, Status> {
        let mut states = BTreeMap::new();
        for r in &self.routes {
            states.insert(r.id.clone(), r.status);
            for c in &r.candidates {
                states.insert(c.id.clone(), c.status);
            }
        }
        states
    }
}

/// The worst circuit each upstream has on a fresh heartbeat.
fn circuits(heartbeats: &[Heartbeat], now_ms: i64) -> HashMap<&str, Circuit> {
    let mut worst: HashMap<&str, Circuit> = HashMap::new();
    for h in heartbeats.iter().filter(|h| now_ms - ms_of(h.at) <= FRESH_HEARTBEAT_MS) {
        for u in &h.upstreams {
            let c = Circuit::from_heartbeat(&u.circuit);
            let slot = worst.entry(u.upstream.as_str()).or_insert(c);
            *slot = (*slot).max(c);
        }
    }
    worst
}

/// The upper bound of the bucket holding the `p`th percentile (`u64::MAX` for the
/// +Inf bucket); `None` without any first byte.
pub fn percentile(buckets: &[u64; LATENCY_BUCKET_COUNT], p: u64) -> Option<u64> {
    let total: u64 = buckets.iter().sum();
    if total == 0 {
        return None;
    }
    // The smallest bucket whose cumulative count reaches p % of the total.
    let rank = (total * p).div_ceil(100).max(1);
    let mut seen = 0;
    for (i, n) in buckets.iter().enumerate() {
        seen += n;
        if seen >= rank {
            return Some(LATENCY_BUCKETS_MS.get(i).copied().unwrap_or(u64::MAX));
        }
    }
    Some(u64::MAX)
}

/// A stable Statuspage-like id (12 lowercase hex digits) for a route or a candidate.
pub fn component_id(route: &str, upstream: Option<&str>) -> String {
    let text = match upstream {
        Some(u) => format!("component\0{route}\0{u}"),
        None => format!("group\0{route}"),
    };
    short_hash(&text)
}

/// A stable id for the incident of `route` that began at `started_ms`.
pub fn incident_id(route: &str, started_ms: i64) -> String {
    short_hash(&format!("incident\0{route}\0{started_ms}"))
}

fn short_hash(text: &str) -> String {
    // FNV-1a: stable across processes and versions, unlike `DefaultHasher`.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{:012x}", h >> 16)
}

/// Unix milliseconds of `t` (0 before the epoch).
pub fn ms_of(t: std::time::SystemTime) -> i64 {
    t.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
