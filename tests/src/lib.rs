//! sluice-tests: the end-to-end harness. Start with `tests/` in this crate: each file
//! there is one scenario family, driven over real sockets on ephemeral ports.
