//! Where config comes from (manifests or an operator snapshot), and the watcher that
//! reloads it: a bad new version is refused with a logged reason and the old one keeps
//! serving (docs/design.md §3).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::RwLock;

use http::{HeaderName, HeaderValue};

use sluice_crds::manifests::yaml_files;
use sluice_crds::{Problem, Snapshot, load_paths, resolve};

/// A config source.
#[derive(Clone, Debug)]
pub enum Source {
    /// Manifests: YAML files or directories.
    Manifests(Vec<PathBuf>),
    /// A snapshot JSON file written by the operator (a mounted ConfigMap).
    Snapshot(PathBuf),
}

/// Why a version was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Manifests with errors; every problem listed.
    #[error("{} problem(s):\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Invalid(Vec<Problem>),
    /// The snapshot file could not be read or parsed.
    #[error("snapshot {path}: {reason}")]
    Snapshot {
        /// File.
        path: String,
        /// Why.
        reason: String,
    },
}

/// A loaded version: the snapshot and its warnings.
pub struct Loaded {
    /// What to serve.
    pub snapshot: Snapshot,
    /// Degradations worth logging.
    pub warnings: Vec<Problem>,
}

impl Source {
    /// A cheap fingerprint of everything the source reads; a change triggers a reload.
    pub fn fingerprint(&self, secrets_dir: Option<&Path>) -> u64 {
        let mut hasher = DefaultHasher::new();
        let mut files = match self {
            Source::Manifests(paths) => {
                let mut ignored = Vec::new();
                paths.iter().flat_map(|p| yaml_files(p, &mut ignored)).collect::<Vec<_>>()
            }
            Source::Snapshot(path) => vec![path.clone()],
        };
        if let (Source::Manifests(_), Some(dir)) = (self, secrets_dir) {
            // Which secrets exist changes the warnings, not the snapshot; values are
            // read by `Secrets`. Hash the names only.
            files.push(dir.to_path_buf());
        }
        for f in files {
            f.hash(&mut hasher);
            if f.is_dir() {
                continue;
            }
            std::fs::read(&f).ok().hash(&mut hasher);
        }
        hasher.finish()
    }

    /// Loads and resolves the source.
    pub fn load(&self, secrets_dir: Option<&Path>) -> Result<Loaded, LoadError> {
        match self {
            Source::Manifests(paths) => {
                let manifests = load_paths(paths);
                let lookup = |_ns: &str, name: &str, key: &str| {
                    secrets_dir.is_some_and(|dir| dir.join(name).join(key).is_file())
                };
                let resolved = resolve(&manifests, &lookup);
                if !resolved.is_clean() {
                    return Err(LoadError::Invalid(resolved.problems));
                }
                Ok(Loaded { snapshot: resolved.snapshot, warnings: resolved.problems })
            }
            Source::Snapshot(path) => {
                let err = |reason: String| LoadError::Snapshot { path: path.display().to_string(), reason };
                let text = std::fs::read(path).map_err(|e| err(e.to_string()))?;
                let snapshot: Snapshot = serde_json::from_slice(&text).map_err(|e| err(e.to_string()))?;
                if snapshot.format != sluice_crds::snapshot::SNAPSHOT_FORMAT {
                    return Err(err(format!(
                        "format {} is not supported (this gateway reads format {})",
                        snapshot.format,
                        sluice_crds::snapshot::SNAPSHOT_FORMAT
                    )));
                }
                Ok(Loaded { snapshot, warnings: Vec::new() })
            }
        }
    }
}

/// Upstream API keys read from `--secrets-dir DIR/<secret>/<key>` (the layout of a mounted
/// Secret), refreshed by the watcher so that a rotated key is used without restart. Kept
/// as ready-made headers by upstream key, so the request path only clones a header.
#[derive(Default)]
pub struct Secrets {
    dir: Option<PathBuf>,
    headers: RwLock<HashMap<String, (HeaderName, HeaderValue)>>,
}

impl Secrets {
    /// Secrets under `dir`, if given.
    pub fn new(dir: Option<PathBuf>) -> Self {
        Self { dir, headers: RwLock::default() }
    }

    /// The directory, if any.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Re-reads every secret the snapshot references.
    pub fn refresh(&self, snapshot: &Snapshot) {
        let Some(dir) = &self.dir else { return };
        let mut fresh = HashMap::new();
        for u in snapshot.upstreams.values() {
            let Some(a) = &u.auth else { continue };
            let Ok(value) = std::fs::read_to_string(dir.join(&a.secret).join(&a.key)) else { continue };
            let value = value.trim();
            let text = if a.scheme.is_empty() { value.to_string() } else { format!("{} {value}", a.scheme) };
            match (HeaderName::try_from(a.header.as_str()), HeaderValue::try_from(text)) {
                (Ok(name), Ok(mut v)) => {
                    v.set_sensitive(true);
                    fresh.insert(u.key.clone(), (name, v));
                }
                _ => {
                    tracing::warn!(upstream = %u.key, secret = %a.secret, "secret value is not a valid header value; not sent")
                }
            }
        }
        *self.headers.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// The auth header of an upstream, if it has a readable secret.
    pub fn header(&self, upstream_key: &str) -> Option<(HeaderName, HeaderValue)> {
        self.headers.read().unwrap_or_else(|e| e.into_inner()).get(upstream_key).cloned()
    }
}
