//! The status page of docs/design.md §10 in file mode: `sluice-status` fed with the
//! serving snapshot and the gateway's ledger.

use std::sync::Arc;

use sluice_ledger::Ledger;
use sluice_status::{Catalog, Source};

use crate::server::state::Gateway;

/// The gateway as the status page's [`Source`]: the routes of the serving version.
pub struct GatewaySource(pub Arc<Gateway>);

impl Source for GatewaySource {
    fn catalog(&self) -> Option<Catalog> {
        self.0.current.get().map(|runtime| Catalog::from_snapshot(&runtime.snapshot))
    }

    fn ledger(&self) -> Option<Ledger> {
        self.0.billing.ledger.clone()
    }
}

/// `GET /status` and `GET /status/api/v2/summary.json`.
pub fn router(gw: Arc<Gateway>) -> axum::Router {
    sluice_status::router(Arc::new(GatewaySource(gw)), sluice_status::Options::default())
}
