//! A Postgres ledger over TLS: `sslmode=require` (what managed Postgres asks for)
//! connects, and the connections really are encrypted.

use sluice_ledger::Ledger;
use sqlx::Connection as _;

use sluice_ledger::testing::TestDb;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_ledger_connects_with_sslmode_require() {
    // A fresh schema, for its URL; the ledger under test opens its own pool over TLS.
    let Some(db) = TestDb::postgres().await.expect("a Postgres test schema") else {
        return;
    };
    let mut probe = sqlx::PgConnection::connect(&db.url).await.expect("connect");
    let ssl: String = sqlx::query_scalar("SHOW ssl").fetch_one(&mut probe).await.expect("SHOW ssl");
    if ssl != "on" {
        let reason = "the test Postgres has ssl = off; enable it to test TLS";
        assert!(std::env::var_os("CI").is_none(), "{reason} (CI is set)");
        eprintln!("SKIPPED: {reason}");
        return;
    }
    let url = format!("{}&sslmode=require", db.url);
    let ledger = Ledger::connect(&url).await.expect("sslmode=require connects");
    ledger.ping().await.expect("ping over TLS");
    let mut tls = sqlx::PgConnection::connect(&url).await.expect("connect over TLS");
    let encrypted: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(&mut tls)
        .await
        .expect("pg_stat_ssl");
    assert!(encrypted, "sslmode=require gave an unencrypted connection");
    ledger.close().await;
}
