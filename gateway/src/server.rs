//! The HTTP server: accept connections ([`accept`]), route each request to its
//! handler ([`router()`]), and the state those handlers share ([`state`]); the status
//! page ([`status`], docs/design.md §10) is served beside the API. One inference
//! request from start to end is [`handle::handle`]; a Messages token count is
//! [`count_tokens`].

pub mod accept;
pub mod count_tokens;
pub mod handle;
pub mod router;
pub mod state;
pub mod status;

pub use crate::billing::AuthMode;
pub use accept::{HEADER_READ_TIMEOUT, serve_http, shutdown_signal};
pub use router::router;
pub use state::{Gateway, ReloadError, SharedGateway};
