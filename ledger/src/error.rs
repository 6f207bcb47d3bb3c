//! The ledger's error type.

use crate::money::UsdError;

/// Everything that can go wrong in the ledger. Messages name the offending value.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    /// The URL is neither `sqlite://…` nor `postgres://…`.
    #[error("unsupported ledger URL {0:?}: expected sqlite://PATH or postgres://…")]
    UnsupportedUrl(String),
    /// The database refused or failed a statement.
    #[error("ledger database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("ledger migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// `create_account` with a name that is taken.
    #[error("account {0:?} already exists")]
    DuplicateAccount(String),
    /// No account has this name.
    #[error("no account named {0:?}")]
    UnknownAccount(String),
    /// No account has this id.
    #[error("no account with id {0}")]
    UnknownAccountId(i64),
    /// A settlement names a grant that the account does not have (never written by a
    /// biller: grants are never deleted).
    #[error("no grant {grant_id} of account {account_id}")]
    UnknownGrant {
        /// The grant.
        grant_id: i64,
        /// The account the settlement was for.
        account_id: i64,
    },
    /// No API key is this key or has this id (named by [`KeySelector::describe`](crate::KeySelector::describe)).
    #[error("no API key {0} in this ledger")]
    UnknownKey(String),
    /// Account names are 1–128 characters without whitespace or control characters.
    #[error("invalid account name {0:?}: use 1 to 128 characters without whitespace or control characters")]
    InvalidAccountName(String),
    /// A money amount that must be ≥ 0 was negative.
    #[error("{what} must not be negative, got {nanos} nanodollars")]
    NegativeAmount {
        /// Which amount, e.g. "topup amount".
        what: &'static str,
        /// The value given.
        nanos: i64,
    },
    /// The balance would exceed what an i64 of nanodollars can hold (~9.2 billion USD).
    #[error("balance of account {account:?} would overflow by adding {nanos} nanodollars")]
    Overflow {
        /// The account.
        account: String,
        /// The amount that did not fit.
        nanos: i64,
    },
    /// The ledger cannot be used right now and no grant held in memory covers the
    /// request (docs/design.md §5a; HTTP 503 `ledger_unavailable` at the gateway).
    #[error("the ledger is unavailable: {0}")]
    Unavailable(String),
    /// The wallet cannot cover a reservation (HTTP 402 at the gateway).
    #[error("insufficient funds: {needed_nanos} nanodollars needed, {available_nanos} available")]
    InsufficientFunds {
        /// balance − reserved at the time of the attempt.
        available_nanos: i64,
        /// The estimate that was asked for.
        needed_nanos: i64,
    },
    /// `admin account audit` found a disagreement.
    #[error("the journal of account {0:?} does not add up to its balance and holds (see the audit)")]
    Inconsistent(String),
    /// No reservation has this id.
    #[error("no reservation with id {0}")]
    UnknownReservation(i64),
    /// A USD amount could not be parsed.
    #[error(transparent)]
    Usd(#[from] UsdError),
    /// A value does not fit the database's signed 64-bit integers.
    #[error("{what} {value} is too large to store")]
    TooLarge {
        /// Which value.
        what: &'static str,
        /// The value given.
        value: u64,
    },
    /// A route minute to write names no inbound API (empty, or [`ALL_APIS`](crate::ALL_APIS)).
    #[error("route minute {minute} of route {route:?}: api {api:?} is not an inbound API")]
    RollupApi {
        /// The route key.
        route: String,
        /// The unix minute.
        minute: i64,
        /// The `api` given.
        api: String,
    },
    /// A heartbeat could not be encoded or the stored one decoded.
    #[error("heartbeat of gateway {gateway_id:?} is not valid JSON: {source}")]
    BadHeartbeat {
        /// The gateway process.
        gateway_id: String,
        /// The JSON error.
        source: serde_json::Error,
    },
    /// Writing CLI output failed.
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}
