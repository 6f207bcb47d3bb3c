//! The settlement batch on Postgres (docs/design.md §5a): one prepared statement and
//! its implicit commit per batch, the rows as one JSON parameter.

use std::collections::BTreeMap;

use sqlx::Row;

use super::Job;
use crate::error::LedgerError;
use crate::ledger::{Ledger, to_db};

impl Ledger {
    /// [`Ledger::settle_batch`] on Postgres as one statement, so one round trip and its
    /// implicit commit: it locks the batch's grants (never an account), inserts the rows
    /// and moves what they say from each grant's amount to its `unposted`. The
    /// settlements travel as one JSON parameter (`json_to_recordset`), so one prepared
    /// statement serves every batch size.
    ///
    /// A batch retried after an unknown commit outcome may be in the journal already,
    /// whole or in part: its insert then fails on the journal's unique `(grant_id,
    /// hold_id)` and changes nothing, and the batch goes again without the rows found
    /// there ([`Ledger::settled_already`]). The check is not in the prepared statement: a
    /// plan cached while the journal was small makes it a sequential scan, and Postgres
    /// keeps a cached plan until the journal's statistics change, which on a database
    /// with autovacuum off never happens (in a bench run on such a database, one
    /// gateway's 64-row batches took ~300 ms after a few minutes).
    pub(super) async fn settle_batch_postgres(&self, jobs: &[Job]) -> Result<Vec<bool>, LedgerError> {
        let mut applied = Vec::with_capacity(jobs.len());
        for chunk in jobs.chunks(MAX_PG_ROWS) {
            let ords: Vec<usize> = (0..chunk.len()).collect();
            let open = match self.settle_rows_postgres(chunk, &ords).await {
                Err(LedgerError::Database(sqlx::Error::Database(e))) if e.is_unique_violation() => {
                    let mut open = vec![false; chunk.len()];
                    let done = self.settled_already(chunk).await?;
                    let rest: Vec<usize> = ords.into_iter().filter(|i| !done.contains_key(i)).collect();
                    if !rest.is_empty() {
                        for (i, moved) in rest.iter().zip(self.settle_rows_postgres(chunk, &rest).await?) {
                            open[*i] = moved;
                        }
                    }
                    for (i, moved) in done {
                        open[i] = moved;
                    }
                    open
                }
                other => other?,
            };
            applied.extend(open);
        }
        Ok(applied)
    }

    /// The batch statement on the settlements of `chunk` at `ords`; per row, in the
    /// order of `ords`, whether its grant was open.
    async fn settle_rows_postgres(&self, chunk: &[Job], ords: &[usize]) -> Result<Vec<bool>, LedgerError> {
        let rows = ords
            .iter()
            .map(|&ord| {
                let j = &chunk[ord];
                Ok(PgRow {
                    ord,
                    account_id: j.account_id,
                    grant_id: j.grant_id,
                    hold_id: j.hold_id,
                    charged: j.charged,
                    uncollected: j.uncollected,
                    request_id: &j.request_id,
                    at_ms: j.at_ms,
                    input_tokens: to_db("input tokens", j.usage.input_tokens)?,
                    output_tokens: to_db("output tokens", j.usage.output_tokens)?,
                    web_searches: to_db("web searches", j.usage.web_searches)?,
                    upstream: j.usage.upstream.as_deref(),
                })
            })
            .collect::<Result<Vec<_>, LedgerError>>()?;
        // Serialising these rows cannot fail (plain numbers and strings).
        let json = serde_json::to_string(&rows).unwrap_or_default();
        let found = sqlx::query(PG_BATCH).bind(json).fetch_all(&self.inner.writer).await?;
        let mut open = vec![false; chunk.len()];
        for r in found {
            let (ord, found, is_open): (i64, Option<i64>, Option<bool>) = (r.try_get(0)?, r.try_get(1)?, r.try_get(2)?);
            let i = usize::try_from(ord).unwrap_or(usize::MAX);
            if i >= chunk.len() {
                continue;
            }
            if found.is_none() {
                let j = &chunk[i];
                return Err(LedgerError::UnknownGrant { grant_id: j.grant_id, account_id: j.account_id });
            }
            open[i] = is_open == Some(true);
        }
        Ok(ords.iter().map(|&i| open[i]).collect())
    }

    /// The settlements of `chunk` in the journal already, by index: whether each moved
    /// money (`settle`) or not (`late_settle`). Planned at each execution (not prepared),
    /// so that it reads the journal through its index however large it has grown.
    async fn settled_already(&self, chunk: &[Job]) -> Result<BTreeMap<usize, bool>, LedgerError> {
        #[derive(serde::Serialize)]
        struct Hold {
            ord: usize,
            grant_id: i64,
            hold_id: i64,
        }
        let holds: Vec<Hold> =
            chunk.iter().enumerate().map(|(ord, j)| Hold { ord, grant_id: j.grant_id, hold_id: j.hold_id }).collect();
        let json = serde_json::to_string(&holds).unwrap_or_default();
        let rows = sqlx::query(
            "SELECT x.ord, j.kind = 'settle' FROM json_to_recordset($1::json) AS x(ord bigint, grant_id bigint, hold_id bigint) \
             JOIN journal j ON j.grant_id = x.grant_id AND j.hold_id = x.hold_id",
        )
        .persistent(false)
        .bind(json)
        .fetch_all(&self.inner.writer)
        .await?;
        let mut done = BTreeMap::new();
        for r in rows {
            let (ord, moved): (i64, bool) = (r.try_get(0)?, r.try_get(1)?);
            done.insert(usize::try_from(ord).unwrap_or(usize::MAX), moved);
        }
        Ok(done)
    }
}

/// Settlements per Postgres batch statement at most (a writer's batch closes at 256).
const MAX_PG_ROWS: usize = 1024;

/// One settlement as the Postgres batch statement reads it: the record type of its
/// `json_to_recordset`.
#[derive(serde::Serialize)]
struct PgRow<'a> {
    ord: usize,
    account_id: i64,
    grant_id: i64,
    hold_id: i64,
    charged: i64,
    uncollected: i64,
    request_id: &'a str,
    at_ms: i64,
    input_tokens: i64,
    output_tokens: i64,
    web_searches: i64,
    upstream: Option<&'a str>,
}

/// The Postgres batch statement; `$1` is the settlements as a JSON array of [`PgRow`].
/// It locks the batch's grants in id order and nothing else: an account row is locked
/// only by takes, posts and closes, which lock it before the grant, so a batch waits at
/// most for one of those to commit and never holds what they wait for. A settlement
/// whose grant is not the account's (`found` NULL) is not inserted, and reported. A row
/// in the journal already fails the whole statement (see
/// [`Ledger::settle_batch_postgres`]).
const PG_BATCH: &str = "
WITH v AS (SELECT * FROM json_to_recordset($1::json) AS x(ord bigint, account_id bigint, grant_id bigint,
        hold_id bigint, charged bigint, uncollected bigint, request_id text, at_ms bigint,
        input_tokens bigint, output_tokens bigint, web_searches bigint, upstream text)),
g AS (SELECT id, account_id, state = 'open' AS open FROM grants
      WHERE id IN (SELECT grant_id FROM v) ORDER BY id FOR NO KEY UPDATE),
r AS (SELECT f.*, g.id AS found, COALESCE(g.open, false) AS open
      FROM v f LEFT JOIN g ON g.id = f.grant_id AND g.account_id = f.account_id),
ins AS (INSERT INTO journal (account_id, kind, amount_nanos, balance_delta, reserved_delta, uncollected_nanos,
                             request_id, at_ms, grant_id, hold_id, input_tokens, output_tokens, web_searches,
                             upstream)
        SELECT account_id, CASE WHEN open THEN 'settle' ELSE 'late_settle' END,
               CASE WHEN open THEN charged ELSE 0 END, 0, 0,
               CASE WHEN open THEN uncollected ELSE charged + uncollected END,
               request_id, at_ms, grant_id, hold_id, input_tokens, output_tokens, web_searches, upstream
        FROM r WHERE found IS NOT NULL ORDER BY ord
        RETURNING grant_id, amount_nanos),
ug AS (UPDATE grants SET amount_nanos = grants.amount_nanos - s.total,
                         settled_nanos = grants.settled_nanos + s.total,
                         unposted_nanos = grants.unposted_nanos + s.total
       FROM (SELECT grant_id, SUM(amount_nanos) AS total FROM ins GROUP BY grant_id) s
       WHERE grants.id = s.grant_id AND s.total > 0)
SELECT ord, found, open FROM r ORDER BY ord";
