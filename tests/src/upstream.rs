//! Chaos upstreams in process (docs/design.md §6): one server per upstream, so that a script
//! set with [`ChaosUpstream::script`] applies to every request the gateway sends it
//! (the gateway does not forward a client's `x-chaos-*` headers).

use anyhow::Context as _;
use serde_json::Value;
use sluice_chaos::{self as chaos, ChaosAuth, ChaosState, CounterSnapshot, Script};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::manifest::{Doc, upstream_doc};

/// A chaos upstream serving on `127.0.0.1:<ephemeral>`; stops when dropped.
pub struct ChaosUpstream {
    /// The Upstream's manifest name (also `x-sluice-upstream` and metric label).
    pub name: String,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// Script and counters.
    pub state: ChaosState,
    task: JoinHandle<()>,
}

impl ChaosUpstream {
    /// Starts a healthy chaos upstream that checks no credentials.
    pub async fn start(name: &str) -> anyhow::Result<Self> {
        Self::start_with_auth(name, None).await
    }

    /// Starts a healthy chaos upstream that checks credentials as `auth` says, the way
    /// each real provider does.
    pub async fn start_with_auth(name: &str, auth: Option<ChaosAuth>) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await.context("binding a chaos upstream")?;
        let base = format!("http://{}", listener.local_addr()?);
        let state = match auth {
            Some(auth) => ChaosState::with_auth(auth),
            None => ChaosState::new(),
        };
        let served = state.clone();
        // A server that fails shows up as failed requests in the test.
        let task = tokio::spawn(async move {
            let _ = chaos::serve(listener, served).await;
        });
        Ok(Self { name: name.to_string(), base, state, task })
    }

    /// Starts one upstream per name.
    pub async fn start_all<const N: usize>(names: [&str; N]) -> anyhow::Result<[Self; N]> {
        let mut out = Vec::with_capacity(N);
        for n in names {
            out.push(Self::start(n).await?);
        }
        out.try_into().map_err(|_| anyhow::anyhow!("unreachable: wrong number of upstreams"))
    }

    /// Sets the script for every following request, as `POST /_chaos` does; the JSON
    /// fields are those of [`Script`] (`{"status":503}`, `{"first_byte_ms":30}`…).
    pub fn script(&self, script: Value) -> anyhow::Result<()> {
        let s = Script::from_json(script.to_string().as_bytes()).map_err(|e| anyhow::anyhow!("{e}"))?;
        self.state.set_script(s).map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// Back to a healthy, instant upstream.
    pub fn healthy(&self) {
        self.state.reset_script();
    }

    /// Inference requests received so far.
    pub fn requests(&self) -> u64 {
        self.state.requests()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections()
    }

    /// All counters.
    pub fn counters(&self) -> CounterSnapshot {
        self.state.counters()
    }

    /// Its Upstream manifest (`baseUrl` = `{base}/v1`).
    pub fn doc(&self) -> Doc {
        upstream_doc(&self.name, &format!("{}/v1", self.base))
    }

    /// Its Upstream manifest speaking `protocol`, with the base URL that protocol's
    /// paths hang off on the chaos upstream (Anthropic and Vertex `{base}/v1`, Gemini
    /// `{base}/v1beta`, Azure `{base}/openai`, Bedrock `{base}`).
    pub fn native_doc(&self, protocol: &str) -> Doc {
        let base = match protocol {
            "gemini" => format!("{}/v1beta", self.base),
            "azure-openai" => format!("{}/openai", self.base),
            "bedrock" => self.base.clone(),
            _ => format!("{}/v1", self.base),
        };
        upstream_doc(&self.name, &base).with("spec.protocol", protocol)
    }
}

impl Drop for ChaosUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A base URL on 127.0.0.1 whose port refuses connections: a listener was bound to
/// an ephemeral port and closed again.
pub async fn refused_url() -> anyhow::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    drop(listener);
    Ok(format!("http://{addr}/v1"))
}
