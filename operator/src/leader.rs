//! Opt-in leader election through the Lease `sluice-operator` (kube-lease-manager).
//!
//! A replica waits until it holds the Lease, then runs the controllers. Should it lose
//! the Lease, the process exits (the pod restarts as a follower) rather than try to
//! stop its controllers half-way; on shutdown the Lease is released so that another
//! replica takes over at once.

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::Error;

/// Name of the Lease.
pub const LEASE_NAME: &str = "sluice-operator";
/// Lease duration in seconds.
pub const LEASE_SECONDS: u64 = 15;
/// Renew this many seconds before the lease expires.
pub const GRACE_SECONDS: u64 = 5;

/// A held Lease.
pub struct Leadership {
    rx: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, kube_lease_manager::LeaseManagerError>>,
}

/// Waits until this replica (`identity`) holds the Lease in `namespace`.
pub async fn acquire(client: Client, namespace: &str, identity: &str) -> Result<Leadership, Error> {
    let manager = LeaseManagerBuilder::new(client, LEASE_NAME)
        .with_namespace(namespace)
        .with_identity(identity)
        .with_duration(LEASE_SECONDS)
        .with_grace(GRACE_SECONDS)
        .build()
        .await?;
    let (mut rx, task) = manager.watch().await;
    tracing::info!(namespace, lease = LEASE_NAME, identity, "waiting for the leader lease");
    if rx.wait_for(|leading| *leading).await.is_err() {
        return Err(Error::LeadershipLost);
    }
    tracing::info!(identity, "leading");
    Ok(Leadership { rx, task })
}

impl Leadership {
    /// Resolves when the Lease is lost (or its manager stopped).
    pub async fn lost(&mut self) {
        let _ = self.rx.wait_for(|leading| !*leading).await;
    }

    /// Releases the Lease and waits for the manager to finish.
    pub async fn release(self) {
        drop(self.rx);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("leader lease released"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader lease failed"),
            Err(e) => tracing::warn!(error = %e, "the lease manager task failed"),
        }
    }
}
