//! Test databases and the macro that runs one test body on both backends.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sluice_ledger::Ledger;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// Defines `mod $name { sqlite, postgres }`, each calling `$body(&Ledger, &TestDb)`.
#[macro_export]
macro_rules! on_both {
    ($name:ident, $body:path) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::support::TestDb::sqlite().await;
                $crate::support::run_then_cleanup(db, |db| async move { $body(&db).await }).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let Some(db) = $crate::support::TestDb::postgres().await else {
                    return;
                };
                $crate::support::run_then_cleanup(db, |db| async move { $body(&db).await }).await;
            }
        }
    };
}

/// Runs `body` in its own task so that the database is removed even when it panics;
/// the panic is then passed on.
pub async fn run_then_cleanup<F, Fut>(db: TestDb, body: F)
where
    F: FnOnce(Arc<TestDb>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let db = Arc::new(db);
    let outcome = tokio::spawn(body(db.clone())).await;
    if let Some(db) = Arc::into_inner(db) {
        db.cleanup().await;
    }
    if let Err(e) = outcome {
        std::panic::resume_unwind(e.into_panic());
    }
}

/// A private database for one test.
pub struct TestDb {
    /// Connected, migrated ledger.
    pub ledger: Ledger,
    /// URL to connect further handles to the same database.
    pub url: String,
    sqlite_path: Option<PathBuf>,
    postgres: Option<(PgPool, String)>,
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}_{:016x}",
        std::process::id(),
        rand::random::<u64>()
    )
}

impl TestDb {
    /// A fresh SQLite file in the temp dir.
    pub async fn sqlite() -> TestDb {
        let path = std::env::temp_dir().join(format!("{}.db", unique("sluice_ledger_test")));
        let url = format!("sqlite://{}", path.display());
        let ledger = Ledger::connect(&url).await.expect("connect sqlite");
        TestDb {
            ledger,
            url,
            sqlite_path: Some(path),
            postgres: None,
        }
    }

    /// A fresh schema in the test Postgres, or `None` (with a printed reason) when it
    /// is unreachable and `CI` is not set.
    pub async fn postgres() -> Option<TestDb> {
        let base = std::env::var("SLUICE_TEST_POSTGRES_URL")
            .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
        let admin = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(Duration::from_secs(5))
            .connect(&base)
            .await;
        let admin = match admin {
            Ok(pool) => pool,
            Err(e) if std::env::var_os("CI").is_some() => {
                panic!("Postgres at {base} is unreachable and CI is set: {e}")
            }
            Err(e) => {
                eprintln!("SKIPPED: Postgres at {base} is unreachable: {e}");
                return None;
            }
        };
        let schema = unique("sluice_test");
        sqlx::query(&format!("CREATE SCHEMA {schema}"))
            .execute(&admin)
            .await
            .expect("create schema");
        let sep = if base.contains('?') { '&' } else { '?' };
        let url = format!("{base}{sep}options=-c%20search_path%3D{schema}");
        let ledger = Ledger::connect(&url).await.expect("connect postgres");
        Some(TestDb {
            ledger,
            url,
            sqlite_path: None,
            postgres: Some((admin, schema)),
        })
    }

    /// Closes the ledger and removes the database.
    pub async fn cleanup(self) {
        self.ledger.close().await;
        if let Some(path) = &self.sqlite_path {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = path.clone().into_os_string();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
        if let Some((admin, schema)) = &self.postgres {
            sqlx::query(&format!("DROP SCHEMA {schema} CASCADE"))
                .execute(admin)
                .await
                .expect("drop schema");
        }
    }
}
