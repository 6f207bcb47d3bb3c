//! Who plays in the demo: one chaos upstream per quickstart Upstream, checking the
//! credentials the quickstart's secrets hold, and the acts that script their faults.

use std::path::Path;

use anyhow::Context as _;
use sluice_chaos::{ChaosAuth, GoogleAuth, Script, ServiceAccount};

/// The service-account key of the quickstart (test-only; see its secrets README).
const VERTEX_KEY: &str = include_str!("../../../../examples/quickstart/secrets/vertex-sa/key.json");

/// What a chaos upstream checks before it answers.
#[derive(Clone, Copy)]
pub enum Credential {
    /// An API key, this Secret's `apiKey`.
    ApiKey(&'static str, &'static str),
    /// Google tokens issued by its own `/token` for the quickstart's service account.
    ServiceAccount,
}

/// One quickstart Upstream as the demo plays it.
pub struct Member {
    /// The Upstream's name.
    pub name: &'static str,
    /// Its `spec.protocol`.
    pub protocol: &'static str,
    /// Its column heading.
    pub label: &'static str,
    /// `scheme://host:port` of its placeholder `baseUrl` (and of the key's `token_uri`).
    pub placeholder: &'static str,
    /// Typical time to the first byte.
    pub first_byte_ms: u64,
    /// A backup: the live line paints it when it serves.
    pub backup: bool,
    /// What it checks.
    pub credential: Credential,
}

/// The quickstart's Upstreams, in column order.
pub const CAST: [Member; 5] = [
    Member {
        name: "anthropic",
        protocol: "anthropic",
        label: "anthropic",
        placeholder: "http://127.0.0.1:9101",
        first_byte_ms: 40,
        backup: false,
        credential: Credential::ApiKey(
            "anthropic-key",
            include_str!("../../../../examples/quickstart/secrets/anthropic-key/apiKey"),
        ),
    },
    Member {
        name: "vertex-us-east5",
        protocol: "vertex-anthropic",
        label: "vertex",
        placeholder: "http://127.0.0.1:9102",
        first_byte_ms: 90,
        backup: true,
        credential: Credential::ServiceAccount,
    },
    Member {
        name: "openai",
        protocol: "openai",
        label: "openai",
        placeholder: "http://127.0.0.1:9103",
        first_byte_ms: 60,
        backup: false,
        credential: Credential::ApiKey(
            "openai-key",
            include_str!("../../../../examples/quickstart/secrets/openai-key/apiKey"),
        ),
    },
    Member {
        name: "azure-eastus",
        protocol: "azure-openai",
        label: "azure",
        placeholder: "http://127.0.0.1:9104",
        first_byte_ms: 80,
        backup: true,
        credential: Credential::ApiKey(
            "azure-key",
            include_str!("../../../../examples/quickstart/secrets/azure-key/apiKey"),
        ),
    },
    Member {
        name: "gemini",
        protocol: "gemini",
        label: "gemini",
        placeholder: "http://127.0.0.1:9105",
        first_byte_ms: 70,
        backup: false,
        credential: Credential::ApiKey(
            "gemini-key",
            include_str!("../../../../examples/quickstart/secrets/gemini-key/apiKey"),
        ),
    },
];

/// The service-account key with every placeholder replaced by its chaos upstream.
pub fn vertex_key(substitute: &impl Fn(&str) -> String) -> String {
    substitute(VERTEX_KEY)
}

impl Member {
    /// The credentials its chaos upstream checks, given the substituted service-account key.
    pub fn auth(&self, vertex_key: &str) -> anyhow::Result<ChaosAuth> {
        Ok(match self.credential {
            Credential::ApiKey(_, key) => ChaosAuth { api_key: Some(key.trim().to_string()), ..ChaosAuth::default() },
            Credential::ServiceAccount => {
                let account = ServiceAccount::from_key_json(vertex_key.as_bytes())
                    .map_err(|e| anyhow::anyhow!("the quickstart's service-account key: {e}"))?;
                ChaosAuth {
                    google: Some(GoogleAuth { service_account: Some(account), ..GoogleAuth::default() }),
                    ..ChaosAuth::default()
                }
            }
        })
    }
}

/// Writes the quickstart's secrets in the `<secret>/<key>` layout, the key's
/// `token_uri` pointing at the Vertex chaos upstream.
pub fn write_secrets(dir: &Path, vertex_key: &str) -> anyhow::Result<()> {
    let mut files = vec![("vertex-sa", "key.json", vertex_key)];
    files.extend(CAST.iter().filter_map(|m| match m.credential {
        Credential::ApiKey(secret, key) => Some((secret, "apiKey", key)),
        Credential::ServiceAccount => None,
    }));
    for (secret, key, value) in files {
        let path = dir.join(secret);
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::write(path.join(key), value)?;
    }
    Ok(())
}

/// One act of the demo: from which fraction of the run, its title, and which
/// upstreams misbehave how (index into [`CAST`]).
pub struct Act {
    /// Start, as a fraction of the run.
    pub from: f64,
    /// Shown on every live line.
    pub title: &'static str,
    /// Faults in force.
    pub faults: &'static [(usize, Fault)],
}

/// A fault an upstream plays.
#[derive(Clone, Copy)]
pub enum Fault {
    /// Anthropic's `529 overloaded_error` on every request.
    Overloaded,
    /// Most requests refused with 429 and a short `retry-after-ms`.
    Throttle,
}

/// The acts, in order.
pub const ACTS: [Act; 5] = [
    Act { from: 0.0, title: "all healthy", faults: &[] },
    Act { from: 0.2, title: "anthropic overloaded 529", faults: &[(0, Fault::Overloaded)] },
    Act { from: 0.45, title: "anthropic back", faults: &[] },
    Act { from: 0.65, title: "openai throttles 429", faults: &[(2, Fault::Throttle)] },
    Act { from: 0.8, title: "all healthy", faults: &[] },
];

/// A healthy answer after about `first_byte_ms`, some of the prompt from the cache.
pub fn healthy(first_byte_ms: u64) -> Script {
    Script {
        first_byte_ms: Some(first_byte_ms),
        chunks: Some(8),
        chunk_ms: Some(10),
        cache_read_tokens: Some(4),
        ..Script::default()
    }
}

/// What an upstream does under `fault`.
pub fn script_for(first_byte_ms: u64, fault: Option<Fault>) -> Script {
    match fault {
        None => healthy(first_byte_ms),
        Some(Fault::Overloaded) => Script { status: Some(529), first_byte_ms: Some(5), ..Script::default() },
        Some(Fault::Throttle) => {
            Script { status: Some(429), retry_after_ms: Some(300), fail_rate: Some(0.7), ..healthy(first_byte_ms) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UPSTREAMS: &str = include_str!("../../../../examples/quickstart/upstreams.yaml");

    #[test]
    fn the_cast_is_the_quickstart_and_every_upstream_gets_its_credentials() {
        let names: Vec<&str> = UPSTREAMS.lines().filter_map(|l| l.strip_prefix("  name: ")).collect();
        assert_eq!(names, CAST.iter().map(|m| m.name).collect::<Vec<_>>());
        for m in &CAST {
            assert!(UPSTREAMS.contains(&format!("baseUrl: {}/", m.placeholder)), "{} has no placeholder", m.name);
            assert!(UPSTREAMS.contains(&format!("protocol: {}\n", m.protocol)), "{}", m.name);
        }
        let key = vertex_key(&|t: &str| t.replace("http://127.0.0.1:9102", "http://127.0.0.1:1"));
        let key_json: serde_json::Value = serde_json::from_str(&key).unwrap();
        assert_eq!(key_json["token_uri"], "http://127.0.0.1:1/token");
        let vertex = CAST[1].auth(&key).unwrap();
        let account = vertex.google.and_then(|g| g.service_account).unwrap();
        assert_eq!(account.token_uri, "http://127.0.0.1:1/token");
        assert_eq!(CAST[0].auth(&key).unwrap().api_key.as_deref(), Some("sk-demo-anthropic"));

        let dir = std::env::temp_dir().join(format!("sluice-demo-cast-{}", std::process::id()));
        write_secrets(&dir, &key).unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("vertex-sa/key.json")).unwrap(), key);
        assert_eq!(std::fs::read_to_string(dir.join("gemini-key/apiKey")).unwrap(), "sk-demo-gemini");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
