//! The scenario tests of sluice-tests, one binary of modules (one link, one process):
//! each module under `scenarios/` is one scenario family, driven over real sockets on
//! ephemeral ports with the harness in `src/` (see the crate docs).
//!
//! Time: every test here waits by polling (`sluice_ledger::testing::eventually`) or on
//! scales set small through config, so that a busy machine makes it slower, never red;
//! the ones that measure time or make heavy load take `sluice_tests::serial()`. The
//! real-clock soaks are `#[ignore]`d; `scripts/test` runs the 3-minute one on its own.

#[path = "scenarios/billing_hangups.rs"]
mod billing_hangups;
#[path = "scenarios/billing_overdraft.rs"]
mod billing_overdraft;
#[path = "scenarios/billing_usage.rs"]
mod billing_usage;
#[path = "scenarios/cache.rs"]
mod cache;
#[path = "scenarios/count_tokens.rs"]
mod count_tokens;
#[path = "scenarios/crash.rs"]
mod crash;
#[path = "scenarios/crash_load.rs"]
mod crash_load;
#[path = "scenarios/deadline.rs"]
mod deadline;
#[path = "scenarios/demo.rs"]
mod demo;
#[path = "scenarios/demotion.rs"]
mod demotion;
#[path = "scenarios/drain.rs"]
mod drain;
#[path = "scenarios/egress.rs"]
mod egress;
#[path = "scenarios/errors.rs"]
mod errors;
#[path = "scenarios/failover.rs"]
mod failover;
#[path = "scenarios/grants.rs"]
mod grants;
#[path = "scenarios/hostile.rs"]
mod hostile;
#[path = "scenarios/hostile_socket.rs"]
mod hostile_socket;
#[path = "scenarios/idle_auto.rs"]
mod idle_auto;
#[path = "scenarios/limits.rs"]
mod limits;
#[path = "scenarios/limits_load.rs"]
mod limits_load;
#[path = "scenarios/messages_bedrock.rs"]
mod messages_bedrock;
#[path = "scenarios/metrics.rs"]
mod metrics;
#[path = "scenarios/outage.rs"]
mod outage;
#[path = "scenarios/probe.rs"]
mod probe;
#[path = "scenarios/propagation.rs"]
mod propagation;
#[path = "scenarios/providers.rs"]
mod providers;
#[path = "scenarios/refused.rs"]
mod refused;
#[path = "scenarios/reload.rs"]
mod reload;
#[path = "scenarios/resilience_http.rs"]
mod resilience_http;
#[path = "scenarios/resilience_stream.rs"]
mod resilience_stream;
#[path = "scenarios/resilience_transport.rs"]
mod resilience_transport;
#[path = "scenarios/resume.rs"]
mod resume;
#[path = "scenarios/resume_messages.rs"]
mod resume_messages;
#[path = "scenarios/resume_responses.rs"]
mod resume_responses;
#[path = "scenarios/soak.rs"]
mod soak;
#[path = "scenarios/status_page.rs"]
mod status_page;
#[path = "scenarios/stream_break.rs"]
mod stream_break;
#[path = "scenarios/synthetic.rs"]
mod synthetic;
#[path = "scenarios/throttle.rs"]
mod throttle;
#[path = "scenarios/traces.rs"]
mod traces;
#[path = "scenarios/usage.rs"]
mod usage;
#[path = "scenarios/watchdog.rs"]
mod watchdog;
