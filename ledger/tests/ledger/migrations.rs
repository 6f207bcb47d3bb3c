//! Connecting twice to the same database migrates once and keeps the data.

use sluice_ledger::Ledger;

use crate::on_both;
use crate::support::Db;

async fn migrations_are_idempotent(db: &Db) {
    db.ledger.create_account("kept", 42).await.unwrap();
    let again = Ledger::connect(&db.url).await.unwrap();
    let third = Ledger::connect(&db.url).await.unwrap();
    assert_eq!(again.kind(), db.ledger.kind());
    assert_eq!(third.account("kept").await.unwrap().unwrap().balance_nanos, 42);
    again.close().await;
    third.close().await;
}
on_both!(connect_twice, super::migrations_are_idempotent);

/// A database migrated by a newer binary (schema version above this binary's): an older
/// binary, as after a rollback, still connects and serves on it.
async fn older_binaries_run_on_a_newer_schema(db: &Db) {
    db.ledger.create_account("rolled-back", 7).await.unwrap();
    let raw = sqlx::AnyPool::connect(&db.url).await.unwrap();
    let checksum = if db.ledger.kind() == "postgres" { "'\\x00'::bytea" } else { "x'00'" };
    sqlx::query(&format!(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (9999, 'from a newer binary', TRUE, {checksum}, 0)"
    ))
    .execute(&raw)
    .await
    .unwrap();
    raw.close().await;
    let older = Ledger::connect(&db.url).await.unwrap();
    assert_eq!(older.account("rolled-back").await.unwrap().unwrap().balance_nanos, 7);
    older.close().await;
}
on_both!(newer_schema, super::older_binaries_run_on_a_newer_schema);

#[tokio::test]
async fn kinds_and_bad_urls() {
    let l = Ledger::connect("sqlite::memory:").await.unwrap();
    assert_eq!(l.kind(), "sqlite");
    let err = Ledger::connect("mysql://localhost/x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "unsupported ledger URL \"mysql://localhost/x\": expected sqlite://PATH or postgres://…"
    );
    // A file that does not exist yet is created.
    let path = std::env::temp_dir().join(format!("sluice_ledger_new_{}.db", rand::random::<u64>()));
    let l = Ledger::connect(&format!("sqlite://{}", path.display())).await.unwrap();
    l.close().await;
    assert!(path.exists());
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// The schema itself refuses an overdraft and edits of the journal, whatever the code does.
async fn schema_guards_money(db: &Db) {
    db.ledger.create_account("guarded", 100).await.unwrap();
    let raw = sqlx::AnyPool::connect(&db.url).await.unwrap();
    for statement in [
        "UPDATE accounts SET reserved_nanos = balance_nanos + 1",
        "UPDATE accounts SET reserved_nanos = -1",
        "UPDATE journal SET amount_nanos = 0",
        "DELETE FROM journal",
    ] {
        let err = sqlx::query(statement).execute(&raw).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("accounts_no_overdraft")
                || msg.contains("CHECK constraint")
                || msg.contains("journal is append-only"),
            "{statement}: {msg}"
        );
    }
    raw.close().await;
    assert!(db.ledger.journal_verify("guarded").await.unwrap().is_consistent());
}
on_both!(schema_guards, super::schema_guards_money);
