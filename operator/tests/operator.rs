//! The operator's integration tests, one binary of modules (one link, one process):
//! builders against golden YAML (`render`), the reconcile loop against a scripted API
//! server (`reconcile`), status from the ledger (`status`), the binary's own wiring
//! (`run`), drift repair and AccountLimits against a real kube-apiserver and etcd
//! (`drift`, `limits`: `sluice_tests::controlplane`, the binaries tests/kube/build caches; skipped
//! with a printed reason when they are missing, a failure under `CI`). Shared fixtures
//! live in `support`.

mod support;

#[path = "operator/drift.rs"]
mod drift;
#[path = "operator/limits.rs"]
mod limits;
#[path = "operator/reconcile.rs"]
mod reconcile;
#[path = "operator/render.rs"]
mod render;
#[path = "operator/run.rs"]
mod run;
#[path = "operator/status.rs"]
mod status;
