//! What the page shows: the routes that exist, their candidates and their objectives,
//! taken from a resolved [`Snapshot`] (file mode and the operator both have one).

use sluice_crds::Snapshot;
use sluice_crds::snapshot::BudgetConfig;

use crate::rules::DEFAULT_OBJECTIVE;

/// The routes and budgets the page shows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Catalog {
    /// Routes, in the order shown.
    pub routes: Vec<RouteSpec>,
    /// ErrorBudgets, whose remaining budget and burn the page shows under their routes.
    pub budgets: Vec<BudgetConfig>,
}

/// One route.
#[derive(Clone, Debug, PartialEq)]
pub struct RouteSpec {
    /// Route key, as in the rollups (`namespace/name`).
    pub key: String,
    /// The model clients ask for.
    pub model: String,
    /// Its candidates, in order.
    pub candidates: Vec<CandidateSpec>,
    /// Client success objective: the strictest of the ErrorBudgets naming the route,
    /// else [`DEFAULT_OBJECTIVE`].
    pub objective: f64,
    /// Time between two synthetic checks of a candidate; `None`: none configured.
    pub synthetic_interval_ms: Option<u64>,
}

/// One candidate of a route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateSpec {
    /// Upstream key, as in the rollups.
    pub upstream: String,
    /// The upstream's protocol (`openai`, `anthropic`, …).
    pub provider: String,
    /// The upstream's region, if it states one.
    pub region: Option<String>,
}

impl Catalog {
    /// The routes of `snapshot`, sorted by model then key, with the objectives of its
    /// budgets.
    pub fn from_snapshot(snapshot: &Snapshot) -> Catalog {
        let mut routes: Vec<RouteSpec> = snapshot
            .routes
            .iter()
            .map(|r| {
                let objective = snapshot
                    .budgets
                    .iter()
                    .filter(|b| b.routes.contains(&r.key))
                    .map(|b| b.objective_ratio)
                    .fold(None, |best: Option<f64>, o| Some(best.map_or(o, |b| b.max(o))))
                    .unwrap_or(DEFAULT_OBJECTIVE);
                RouteSpec {
                    key: r.key.clone(),
                    model: r.model.clone(),
                    candidates: r
                        .candidates
                        .iter()
                        .map(|c| {
                            let upstream = snapshot.upstreams.get(&c.upstream);
                            CandidateSpec {
                                upstream: c.upstream.clone(),
                                provider: upstream.map_or("", |u| u.protocol.as_str()).to_owned(),
                                region: upstream.and_then(|u| u.region.clone()),
                            }
                        })
                        .collect(),
                    objective,
                    synthetic_interval_ms: r.synthetic.map(|s| s.interval_ms),
                }
            })
            .collect();
        routes.sort_by(|a, b| a.model.cmp(&b.model).then_with(|| a.key.cmp(&b.key)));
        Catalog { routes, budgets: snapshot.budgets.clone() }
    }

    /// Route keys.
    pub fn route_keys(&self) -> Vec<String> {
        self.routes.iter().map(|r| r.key.clone()).collect()
    }

    /// Upstream keys of every candidate, sorted, without duplicates.
    pub fn upstream_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> =
            self.routes.iter().flat_map(|r| r.candidates.iter().map(|c| c.upstream.clone())).collect();
        keys.sort();
        keys.dedup();
        keys
    }
}
