//! A connected ledger on a private test database, and the macro that runs one test
//! body on both backends. The database itself is the workspace's one test database,
//! `sluice_ledger::testing::TestDb`.

use sluice_ledger::Ledger;
use sluice_ledger::testing::{GrantRow, JournalRow, ReservationRow, TestDb};

/// Defines `mod $name { sqlite, postgres }`, each calling `$body(&Db)`.
#[macro_export]
macro_rules! on_both {
    ($name:ident, $body:path) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let db = $crate::support::Db::sqlite().await;
                $body(&db).await;
                db.ledger.close().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let Some(db) = $crate::support::Db::postgres().await else {
                    return;
                };
                $body(&db).await;
                db.ledger.close().await;
            }
        }
    };
}

/// A migrated ledger on a private database, removed when this is dropped (also when
/// the test panics).
pub struct Db {
    /// Connected, migrated ledger.
    pub ledger: Ledger,
    /// URL to connect further handles to the same database.
    pub url: String,
    _db: TestDb,
}

impl Db {
    /// On a fresh SQLite file.
    pub async fn sqlite() -> Db {
        Self::on(TestDb::sqlite()).await
    }

    /// On a fresh Postgres schema, or `None` (with a printed reason) when Postgres is
    /// unreachable and `CI` is not set.
    pub async fn postgres() -> Option<Db> {
        let db = TestDb::postgres().await.expect("a Postgres test schema")?;
        Some(Self::on(db).await)
    }

    async fn on(db: TestDb) -> Db {
        let ledger = db.connect().await.expect("connect the test ledger");
        Db { ledger, url: db.url.clone(), _db: db }
    }
}

impl Db {
    /// The whole journal, in order.
    pub async fn journal(&self) -> Vec<JournalRow> {
        self._db.journal().await.expect("read the journal")
    }

    /// Every grant, by id.
    pub async fn grants(&self) -> Vec<GrantRow> {
        self._db.grants().await.expect("read the grants")
    }

    /// Every reservation, by id.
    pub async fn reservations(&self) -> Vec<ReservationRow> {
        self._db.reservations().await.expect("read the reservations")
    }
}
