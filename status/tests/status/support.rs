#![expect(clippy::unwrap_used, reason = "test helpers outside #[test] fns: a panic is how a test reports")]

//! One seeded ledger and the router over it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::Router;
use axum::body::Body;
use http::{Request, StatusCode};
use sluice_ledger::testing::TestDb;
use sluice_ledger::{Heartbeat, Ledger, RouteMinute, UpstreamHeartbeat, UpstreamMinute};
use sluice_status::{CandidateSpec, Catalog, RouteSpec, Source};
use tower::ServiceExt;

/// A fixed catalog and ledger.
pub struct Fixed {
    pub catalog: Catalog,
    pub ledger: Ledger,
}

impl Source for Fixed {
    fn catalog(&self) -> Option<Catalog> {
        Some(self.catalog.clone())
    }
    fn ledger(&self) -> Option<Ledger> {
        Some(self.ledger.clone())
    }
}

/// Stores one check.
pub async fn add_check(db: &TestDb, route: &str, upstream: &str, at: SystemTime, outcome: &str) {
    use sqlx::Connection;
    let mut conn = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    let at_ms = i64::try_from(at.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_millis()).unwrap();
    sqlx::query(
        "INSERT INTO synthetic_checks (route, upstream, gateway_id, at_ms, outcome, first_byte_ms, cost_nanos) \
         VALUES ($1, $2, 'gw-test', $3, $4, 12, 0)",
    )
    .bind(route)
    .bind(upstream)
    .bind(at_ms)
    .bind(outcome)
    .execute(&mut conn)
    .await
    .unwrap();
    conn.close().await.unwrap();
}

pub fn candidate(upstream: &str, provider: &str, region: Option<&str>) -> CandidateSpec {
    CandidateSpec { upstream: upstream.into(), provider: provider.into(), region: region.map(Into::into) }
}

/// Two routes with synthetic checks every 10 s: `gpt` (its primary failing its
/// checks, clients served by the backup) and `claude` (healthy), one gateway heartbeat.
pub async fn seeded(db: &TestDb) -> (Ledger, Catalog) {
    // Connecting runs the migrations: `synthetic_checks` among the ledger's tables.
    let ledger = db.connect().await.unwrap();
    let catalog = Catalog {
        routes: vec![
            RouteSpec {
                key: "default/claude".into(),
                model: "claude".into(),
                candidates: vec![candidate("default/anthropic", "anthropic", None)],
                objective: 0.999,
                synthetic_interval_ms: Some(10_000),
            },
            RouteSpec {
                key: "default/gpt".into(),
                model: "gpt".into(),
                candidates: vec![
                    candidate("default/primary", "openai", Some("eastus")),
                    candidate("default/backup", "azure-openai", Some("westeurope")),
                ],
                objective: 0.999,
                synthetic_interval_ms: Some(10_000),
            },
        ],
        budgets: Vec::new(),
    };
    let now = SystemTime::now();
    let minute = sluice_ledger::budget::unix_minute(now);
    let mut routes = Vec::new();
    let mut upstreams = Vec::new();
    for back in 0..3 {
        for key in ["default/gpt", "default/claude"] {
            let mut m = RouteMinute::new(key, "chat", minute - back);
            for _ in 0..50 {
                m.record(false, 300);
            }
            routes.push(m);
        }
        let mut ok = UpstreamMinute::new("default/backup", minute - back);
        let mut anthropic = UpstreamMinute::new("default/anthropic", minute - back);
        for _ in 0..50 {
            ok.record("ok", Some(120));
            anthropic.record("ok", Some(400));
        }
        upstreams.push(ok);
        upstreams.push(anthropic);
    }
    // A day of traffic 10 days ago, for the bar.
    let mut old = RouteMinute::new("default/gpt", "chat", minute - 10 * 1440);
    old.record(false, 100);
    old.record(true, 100);
    routes.push(old);
    ledger.write_rollups(&routes, &upstreams).await.unwrap();
    for back in [40, 30, 20, 10] {
        let at = now - Duration::from_secs(back);
        add_check(db, "default/gpt", "default/primary", at, if back > 20 { "ok" } else { "http_5xx" }).await;
        add_check(db, "default/gpt", "default/backup", at, "ok").await;
        add_check(db, "default/claude", "default/anthropic", at, "ok").await;
    }
    let upstream = |key: &str, circuit: &str| UpstreamHeartbeat {
        upstream: key.into(),
        circuit: circuit.into(),
        effective_weight: 1.0,
        successes: 10,
        failures: 0,
    };
    ledger
        .heartbeat(Heartbeat {
            gateway_id: "gw-test".into(),
            at: now,
            upstreams: vec![
                upstream("default/primary", "Open"),
                upstream("default/backup", "Closed"),
                upstream("default/anthropic", "Closed"),
            ],
        })
        .await
        .unwrap();
    (ledger, catalog)
}

pub fn router(ledger: Ledger, catalog: Catalog) -> Router {
    sluice_status::router(Arc::new(Fixed { catalog, ledger }), sluice_status::Options::default())
}

/// GET `path` with `Host: status.example`; (status, content type, body).
pub async fn get(app: &Router, path: &str) -> (StatusCode, String, String) {
    let req = Request::get(path).header("host", "status.example").body(Body::empty()).unwrap();
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let ct = resp.headers().get("content-type").map(|v| v.to_str().unwrap().to_owned()).unwrap_or_default();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 24).await.unwrap();
    (status, ct, String::from_utf8(body.to_vec()).unwrap())
}
