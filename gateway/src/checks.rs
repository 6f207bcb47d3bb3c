//! The gateway's background checks of its upstreams, outside any client request: the
//! endpoint [`probe`]s of `Upstream.spec.probe` and the per-candidate [`synthetic`]
//! checks of `ModelRoute.spec.synthetic` (docs/design.md §10). Both feed the same
//! upstream health the request path reads ([`crate::health`]); a synthetic
//! check is an attempt like a client's ([`crate::attempt`]).

pub mod probe;
pub mod synthetic;
