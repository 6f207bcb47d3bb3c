//! The status page's server-side time with 30 days of rollups for 50 routes (two
//! candidates each, synthetic checks every 90 s, one ErrorBudget per route) in a SQLite
//! ledger: `cargo bench -p sluice-status` prints the time of the first request (reads
//! the 90-day sums, a day of minutes and evaluates every budget), of later requests
//! (the cache brought up to date, then the page built), and of rendering the built page
//! as HTML and as JSON. docs/design.md §10 asks for under 50 ms. `SLUICE_BENCH_RUNS`
//! sets the later requests measured (default 30).

use std::error::Error;
use std::io::Write;
use std::time::{Duration, Instant, SystemTime};

use sluice_crds::error_budget::BudgetMethod;
use sluice_crds::snapshot::BudgetConfig;
use sluice_ledger::Ledger;
use sluice_status::{CandidateSpec, Catalog, RouteSpec, Source, load::Cache};
use sqlx::Connection;

type BoxError = Box<dyn Error + Send + Sync>;

const ROUTES: usize = 50;
const DAYS: i64 = 30;
const RUNS: usize = 30;

struct Fixed(Catalog, Ledger);

impl Source for Fixed {
    fn catalog(&self) -> Option<Catalog> {
        Some(self.0.clone())
    }
    fn ledger(&self) -> Option<Ledger> {
        Some(self.1.clone())
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut out = std::io::stdout().lock();
    let path = std::env::temp_dir().join(format!("sluice_status_bench_{}.db", std::process::id()));
    let url = format!("sqlite://{}", path.display());
    let ledger = Ledger::connect(&url).await?;
    let now = SystemTime::now();
    let now_minute = sluice_ledger::budget::unix_minute(now);
    let seeding = Instant::now();
    seed(&url, now_minute).await?;
    writeln!(out, "seeded {ROUTES} routes x {DAYS} days of minutes in {:.1?}", seeding.elapsed())?;

    let catalog = catalog();
    let source = Fixed(catalog, ledger.clone());
    let mut cache = Cache::default();
    let started = Instant::now();
    let page = sluice_status::current(&source, &mut cache, SystemTime::now())
        .await
        .map_err(|r| format!("page failed: {}", r.status()))?;
    let cold = started.elapsed();
    writeln!(out, "first request (cold cache, budgets evaluated): {cold:.1?}")?;
    out.flush()?;
    let runs: usize = std::env::var("SLUICE_BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(RUNS).max(1);
    let mut warm = Vec::new();
    let mut refresh = Vec::new();
    let mut build = Vec::new();
    let mut html = Vec::new();
    let mut json = Vec::new();
    let mut size = (0, 0);
    for _ in 0..runs {
        let t = Instant::now();
        let page = sluice_status::current(&source, &mut cache, SystemTime::now())
            .await
            .map_err(|r| format!("page failed: {}", r.status()))?;
        warm.push(t.elapsed());
        let t = Instant::now();
        let history = cache.refresh(&ledger, &source.0, SystemTime::now()).await?;
        refresh.push(t.elapsed());
        let t = Instant::now();
        let _ = sluice_status::page::build(&source.0, history, sluice_status::page::ms_of(SystemTime::now()));
        build.push(t.elapsed());
        let t = Instant::now();
        let h = sluice_status::html::render(&page, "bench", sluice_status::DEFAULT_RUNBOOKS);
        html.push(t.elapsed());
        let t = Instant::now();
        let j = serde_json::to_vec(&sluice_status::summary::summary(&page, "bench", "http://bench/status"))?;
        json.push(t.elapsed());
        size = (h.len(), j.len());
    }
    writeln!(
        out,
        "routes {}, incidents {}, components {}",
        page.routes.len(),
        page.incidents.len(),
        page.states().len()
    )?;
    writeln!(out, "later requests (cache refresh + build):   {}", stats(&mut warm))?;
    writeln!(out, "  of which the ledger reads:              {}", stats(&mut refresh))?;
    writeln!(out, "  of which building the page:            {}", stats(&mut build))?;
    writeln!(out, "render HTML ({} bytes):                  {}", size.0, stats(&mut html))?;
    writeln!(out, "render JSON ({} bytes):                  {}", size.1, stats(&mut json))?;
    ledger.close().await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}

fn stats(samples: &mut [Duration]) -> String {
    samples.sort();
    let p = |q: usize| samples[(samples.len() * q / 100).min(samples.len() - 1)];
    format!("median {:.2?}, p90 {:.2?}, max {:.2?}", p(50), p(90), p(100))
}

fn catalog() -> Catalog {
    let routes = (0..ROUTES)
        .map(|i| RouteSpec {
            key: format!("bench/r{i}"),
            model: format!("model-{i:02}"),
            candidates: ["a", "b"]
                .iter()
                .map(|s| CandidateSpec { upstream: format!("bench/u{i}{s}"), provider: "openai".into(), region: None })
                .collect(),
            objective: 0.999,
            synthetic_interval_ms: Some(90_000),
        })
        .collect();
    let budgets = (0..ROUTES)
        .map(|i| BudgetConfig {
            key: format!("bench/b{i}"),
            name: format!("b{i}"),
            namespace: "bench".into(),
            routes: vec![format!("bench/r{i}")],
            objective: "99.9".into(),
            objective_ratio: 0.999,
            window_ms: 30 * 86_400_000,
            method: BudgetMethod::Occurrences,
            timeslice_ms: None,
            latency: None,
            alerts: Vec::new(),
        })
        .collect();
    Catalog { routes, budgets }
}

/// Every minute of 30 days for every route and upstream, in bulk (a recursive CTE),
/// with one bad request a day and one failed attempt in 400; a check every 90 s for
/// every candidate over the last day, the `a` candidates of five routes failing for
/// 20 minutes two hours ago.
async fn seed(url: &str, now_minute: i64) -> Result<(), BoxError> {
    let mut c = sqlx::SqliteConnection::connect(url).await?;
    let from = now_minute - DAYS * 1440 + 1;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS synthetic_checks (id INTEGER PRIMARY KEY AUTOINCREMENT, route TEXT NOT NULL, \
         upstream TEXT NOT NULL, gateway_id TEXT NOT NULL, at_ms BIGINT NOT NULL, outcome TEXT NOT NULL, \
         first_byte_ms BIGINT, cost_nanos BIGINT NOT NULL DEFAULT 0)",
    )
    .execute(&mut c)
    .await?;
    sqlx::query(
        "CREATE INDEX IF NOT EXISTS synthetic_checks_by_candidate ON synthetic_checks (route, upstream, at_ms)",
    )
    .execute(&mut c)
    .await?;
    let minutes = format!(
        "WITH RECURSIVE m(minute) AS (SELECT {from} UNION ALL SELECT minute + 1 FROM m WHERE minute < {now_minute}), \
         r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {last}) ",
        last = ROUTES - 1
    );
    let mut tx = c.begin().await?;
    sqlx::query(&format!(
        "{minutes} INSERT INTO route_minutes (route, api, minute, total, bad, lat_7) \
         SELECT 'bench/r' || i, 'chat', minute, 100, (minute + i) % 1440 = 0, 99 FROM m, r"
    ))
    .execute(&mut *tx)
    .await?;
    for s in ["a", "b"] {
        sqlx::query(&format!(
            "{minutes} INSERT INTO upstream_minutes (upstream, minute, fb_5, fb_7) \
             SELECT 'bench/u' || i || '{s}', minute, 60, 40 FROM m, r"
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "{minutes} INSERT INTO upstream_outcomes (upstream, minute, outcome, attempts) \
             SELECT 'bench/u' || i || '{s}', minute, 'ok', 100 FROM m, r"
        ))
        .execute(&mut *tx)
        .await?;
        sqlx::query(&format!(
            "{minutes} INSERT INTO upstream_outcomes (upstream, minute, outcome, attempts) \
             SELECT 'bench/u' || i || '{s}', minute, 'http_5xx', 1 FROM m, r WHERE (minute + i) % 4 = 0"
        ))
        .execute(&mut *tx)
        .await?;
        let checks_from = (now_minute - 1440) * 60_000;
        let outage = ((now_minute - 120) * 60_000, (now_minute - 100) * 60_000);
        sqlx::query(&format!(
            "WITH RECURSIVE t(at) AS (SELECT {checks_from} UNION ALL SELECT at + 90000 FROM t WHERE at < {end}), \
             r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {last}) \
             INSERT INTO synthetic_checks (route, upstream, gateway_id, at_ms, outcome, first_byte_ms, cost_nanos) \
             SELECT 'bench/r' || i, 'bench/u' || i || '{s}', 'bench', at, \
             CASE WHEN '{s}' = 'a' AND i < 5 AND at BETWEEN {o0} AND {o1} THEN 'http_5xx' ELSE 'ok' END, 80, 10 FROM t, r",
            end = now_minute * 60_000,
            last = ROUTES - 1,
            o0 = outage.0,
            o1 = outage.1,
        ))
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    c.close().await?;
    Ok(())
}
