//! sluice-providers: the provider protocols of docs/design.md §9, without I/O.
//!
//! Clients always speak the OpenAI API to sluice. For each Upstream's `protocol` this
//! crate builds the native request, parses a native response, transcodes a native
//! stream incrementally into OpenAI chunks, and classifies a native error by its name
//! before its status. It never opens a socket: the gateway's attempt drives it.
