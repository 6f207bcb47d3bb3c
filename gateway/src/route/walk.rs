//! The dispatcher (docs/design.md §4): walks a route's candidates in order of effective weight,
//! gives each its share of the deadline, fails over only on retryable failures, backs
//! off with full jitter between walks, and hedges on a first-byte timeout if asked to.

use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

use futures::stream::FuturesUnordered;
use futures::{Future, StreamExt};
use sluice_crds::model_route::FirstByteAction;

use crate::attempt::{self, Books, Started};
use crate::config::Route;
use crate::error::ApiError;
use crate::outcome::{AttemptError, Outcome};
use crate::request::ClientRequest;
use crate::telemetry::metrics::RouteReason;

use super::order;
use crate::backoff;

/// What the dispatcher needs besides the route and request.
pub struct DispatchCtx<'a> {
    /// What attempts are made with and booked into.
    pub books: &'a Books,
    /// Request id, sent upstream and logged.
    pub request_id: &'a crate::headers::RequestId,
    /// The request's span, parent of each attempt's.
    pub trace: &'a crate::telemetry::traces::RequestTrace,
}

/// A request committed to a candidate.
pub struct Dispatched {
    /// The answer so far, and the attempt to finish when it ends.
    pub started: Started,
    /// Index of the serving candidate in `route.candidates`.
    pub candidate: usize,
    /// Attempts made.
    pub attempts: u32,
    /// Outcomes of the attempts that failed over.
    pub failovers: Vec<Outcome>,
    /// The request id sent upstream (a resumed stream's continuations send it too).
    pub request_id: crate::headers::RequestId,
}

/// A request that found no answer.
pub struct Failed {
    /// What to answer.
    pub error: ApiError,
    /// Attempts made.
    pub attempts: u32,
    /// Outcomes of the attempts that failed.
    pub failovers: Vec<Outcome>,
}

type AttemptFuture<'a> =
    Pin<Box<dyn Future<Output = (usize, bool, Instant, Result<Started, AttemptError>)> + Send + 'a>>;

/// Dispatches a request over the route's candidates.
// Over 80 lines on purpose: one loop owns the attempts in flight, the hedge timer, the
// deadline and the held trial slots, and each branch of its `select!` changes several
// of them; split into functions, each would take and return them all.
pub async fn dispatch(ctx: &DispatchCtx<'_>, route: &Route, req: &ClientRequest) -> Result<Dispatched, Failed> {
    let cfg = &route.cfg;
    let start = Instant::now();
    let deadline = start + Duration::from_millis(cfg.deadline_ms);
    let hedge = req.stream && cfg.on_first_byte_timeout == FirstByteAction::Hedge;
    let mut excluded = vec![false; route.candidates.len()];
    let mut attempts = 0u32;
    let mut failovers: Vec<Outcome> = Vec::new();
    let mut waited = Duration::ZERO;
    let mut last_walk: Vec<(usize, AttemptError)> = Vec::new();
    // Candidates that cannot take the request, passed over for the rest of it.
    let mut refused: Vec<(usize, AttemptError)> = Vec::new();
    // ThreadRng is not Send; a small generator seeded from it can live across awaits
    // (jitter and weighted picks need no cryptographic randomness).
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::from_rng(&mut rand::rng());
    let mut trials = HeldTrials::new(route);

    for walk in 0..cfg.max_walks.max(1) {
        let picks = order::order(route, &ctx.books.settings, Instant::now(), &excluded, &mut rng);
        if picks.is_empty() {
            break;
        }
        trials.hold(&picks);
        last_walk.clear();
        let mut next = 0usize;
        let mut running: FuturesUnordered<AttemptFuture<'_>> = FuturesUnordered::new();
        // Attempts still running that a hedge was started for.
        let mut hedged: Vec<usize> = Vec::new();
        loop {
            if running.is_empty() {
                if next >= picks.len() {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(deadline_failure(route, attempts, failovers));
                }
            }
            // Launch the next candidate when nothing runs; with hedging, also when the
            // running attempt has been silent past its first-byte limit.
            let mut hedge_timer: Pin<Box<dyn Future<Output = ()> + Send>> = Box::pin(futures::future::pending());
            if running.is_empty() {
                let Some(pick) = picks.get(next).copied() else { break };
                next += 1;
                attempts += 1;
                if let Some(prev) = failovers.last().copied().filter(|_| attempts > 1) {
                    ctx.books
                        .metrics
                        .failovers
                        .get_or_create(&RouteReason { route: cfg.name.clone(), reason: prev })
                        .inc();
                }
                running.push(launch(ctx, route, req, pick.idx, pick.trial, deadline, picks.len() - next + 1, hedge));
            }
            if hedge
                && next < picks.len()
                && let Some(c) = picks.get(next.saturating_sub(1)).and_then(|p| route.candidates.get(p.idx))
            {
                let limit = c.upstream.health.first_byte_limit(c.upstream.cfg.first_byte);
                hedge_timer = Box::pin(tokio::time::sleep(limit));
            }
            tokio::select! {
                Some((idx, trial, began, result)) = running.next() => {
                    // The attempt's trial slot is recorded below, or goes with the
                    // committed attempt, which gives it back when finished or dropped.
                    trials.handed_back(idx, trial);
                    match result {
                        Ok(started) => {
                            // Hedged losers are dropped (cancelled) with `running`; their
                            // trial slots and those of untried picks go with `trials`.
                            // A hedged attempt that was still silent when the winner
                            // answered lost to its first-byte watchdog: count it so.
                            for loser in hedged.iter().filter(|h| **h != idx) {
                                if let Some(c) = route.candidates.get(*loser) {
                                    attempt::record(&c.upstream, ctx.books, Outcome::FirstByteTimeout, false, None, None);
                                }
                                failovers.push(Outcome::FirstByteTimeout);
                                ctx.books.metrics
                                    .failovers
                                    .get_or_create(&RouteReason { route: cfg.name.clone(), reason: Outcome::FirstByteTimeout })
                                    .inc();
                            }
                            let request_id = ctx.request_id.clone();
                            return Ok(Dispatched { started, candidate: idx, attempts, failovers, request_id });
                        }
                        Err(e) => {
                            // The attempt booked its failure and gave its trial slot back.
                            hedged.retain(|h| *h != idx);
                            if e.refused {
                                let upstream = route.candidates.get(idx).map_or("?", |c| c.upstream.cfg.name.as_str());
                                tracing::info!(request_id = ctx.request_id.as_str(), route = %cfg.name, upstream,
                                    detail = %e.detail, "candidate passed over: it cannot take the request");
                                if let Some(slot) = excluded.get_mut(idx) {
                                    *slot = true;
                                }
                                refused.push((idx, e));
                                continue;
                            }
                            log_failure(ctx, route, idx, &e, began, deadline);
                            if !e.retryable {
                                drop(running);
                                let error = match e.passthrough {
                                    Some(p) => ApiError::Upstream(Box::new(p)),
                                    None => ApiError::UpstreamsUnavailable(e.detail),
                                };
                                return Err(Failed { error, attempts, failovers });
                            }
                            failovers.push(e.outcome);
                            if e.outcome.timed_out()
                                && let Some(slot) = excluded.get_mut(idx)
                            {
                                *slot = true;
                            }
                            last_walk.push((idx, e));
                        }
                    }
                }
                () = &mut hedge_timer => {
                    if let Some(silent) = picks.get(next.saturating_sub(1)) {
                        hedged.push(silent.idx);
                    }
                    if let Some(pick) = picks.get(next).copied() {
                        next += 1;
                        attempts += 1;
                        running.push(launch(ctx, route, req, pick.idx, pick.trial, deadline, picks.len() - next + 1, hedge));
                    }
                }
            }
        }
        // Every candidate of the walk failed retryably.
        if walk + 1 >= cfg.max_walks {
            break;
        }
        let hint = last_walk.iter().filter_map(|(_, e)| e.retry_after).max();
        let wait = backoff::full_jitter(Duration::from_millis(cfg.backoff_base_ms), walk, &mut rng)
            .max(hint.unwrap_or_default());
        let max_total = Duration::from_millis(cfg.backoff_max_total_ms);
        if waited + wait > max_total || Instant::now() + wait >= deadline {
            break;
        }
        tokio::time::sleep(wait).await;
        waited += wait;
    }
    Err(exhausted(route, attempts, failovers, &last_walk, refused, deadline))
}

#[expect(clippy::too_many_arguments, reason = "one call site; a struct would only rename the arguments")]
fn launch<'a>(
    ctx: &'a DispatchCtx<'_>,
    route: &'a Route,
    req: &'a ClientRequest,
    idx: usize,
    trial: bool,
    deadline: Instant,
    untried: usize,
    hedge: bool,
) -> AttemptFuture<'a> {
    Box::pin(async move {
        let began = Instant::now();
        let Some(c) = route.candidates.get(idx) else {
            return (idx, trial, began, Err(AttemptError::transport(Outcome::Connect, "candidate vanished")));
        };
        // Per-candidate budget: remaining deadline ÷ candidates not yet tried.
        let budget = deadline.saturating_duration_since(began) / u32::try_from(untried.max(1)).unwrap_or(1);
        let first_byte = (req.stream && !hedge).then(|| c.upstream.health.first_byte_limit(c.upstream.cfg.first_byte));
        let limits = attempt::Limits { first_byte, budget, trial };
        let spec = attempt::AttemptSpec::new(c, &route.cfg, req, limits, ctx.request_id, ctx.trace);
        let result = attempt::run(&c.upstream, spec, ctx.books).await;
        (idx, trial, began, result)
    })
}

/// Trial slots this request holds (taken by [`order::order`]). Each is given back by
/// recording the attempt that used it, or handed to the [`attempt::Committed`] one;
/// whatever is still held when the dispatch ends *or is dropped* (a client that went
/// away mid-attempt) is cancelled. A leaked slot would keep a recovered upstream from
/// ever getting its trial again.
pub(crate) struct HeldTrials<'a> {
    route: &'a Route,
    held: Vec<usize>,
}

impl<'a> HeldTrials<'a> {
    /// None held yet.
    pub(crate) fn new(route: &'a Route) -> Self {
        Self { route, held: Vec::new() }
    }

    /// Holds the trial slots `picks` took.
    pub(crate) fn hold(&mut self, picks: &[order::Pick]) {
        self.held.extend(picks.iter().filter(|p| p.trial).map(|p| p.idx));
    }

    /// The attempt on candidate `idx` finished; its slot, if any, is accounted for elsewhere.
    pub(crate) fn handed_back(&mut self, idx: usize, trial: bool) {
        if trial && let Some(at) = self.held.iter().position(|h| *h == idx) {
            self.held.swap_remove(at);
        }
    }
}

impl Drop for HeldTrials<'_> {
    fn drop(&mut self) {
        for idx in self.held.drain(..) {
            if let Some(c) = self.route.candidates.get(idx) {
                c.upstream.health.cancel_trial();
            }
        }
    }
}

fn log_failure(ctx: &DispatchCtx<'_>, route: &Route, idx: usize, e: &AttemptError, began: Instant, deadline: Instant) {
    let upstream = route.candidates.get(idx).map_or("?", |c| c.upstream.cfg.name.as_str());
    tracing::warn!(
        request_id = ctx.request_id.as_str(),
        route = %route.cfg.name,
        upstream,
        reason = e.outcome.as_str(),
        detail = %e.detail,
        elapsed_ms = began.elapsed().as_millis() as u64,
        remaining_ms = deadline.saturating_duration_since(Instant::now()).as_millis() as u64,
        retryable = e.retryable,
        "attempt failed"
    );
}

fn deadline_failure(route: &Route, attempts: u32, failovers: Vec<Outcome>) -> Failed {
    let message = format!(
        "the route {:?} ran out of its {}ms deadline after {attempts} attempt(s)",
        route.cfg.name, route.cfg.deadline_ms
    );
    Failed { error: ApiError::DeadlineExceeded(message), attempts, failovers }
}

/// The answer when every walk failed: the 400 of the first candidate that could not
/// take the request when none could, 504 if the deadline ran out, 429 if throttling was
/// the cause, else 503 naming each candidate and why (those that could not take the
/// request too).
pub(crate) fn exhausted(
    route: &Route,
    attempts: u32,
    failovers: Vec<Outcome>,
    last_walk: &[(usize, AttemptError)],
    mut refused: Vec<(usize, AttemptError)>,
    deadline: Instant,
) -> Failed {
    if last_walk.is_empty()
        && !refused.is_empty()
        && let Some(p) = refused.swap_remove(0).1.passthrough
    {
        return Failed { error: ApiError::Upstream(Box::new(p)), attempts, failovers };
    }
    // Within 1% of the deadline (20ms to 200ms) counts as having run out of it.
    let slack = Duration::from_millis((route.cfg.deadline_ms / 100).clamp(20, 200));
    if Instant::now() + slack >= deadline {
        return deadline_failure(route, attempts, failovers);
    }
    let throttled = !last_walk.is_empty() && last_walk.iter().all(|(_, e)| e.outcome == Outcome::Http429);
    let busy = !last_walk.is_empty() && last_walk.iter().all(|(_, e)| e.outcome == Outcome::Http429 || e.overloaded);
    let reasons: Vec<String> = last_walk
        .iter()
        .chain(&refused)
        .map(|(idx, e)| {
            let name = route.candidates.get(*idx).map_or("?", |c| c.upstream.cfg.name.as_str());
            let outcome = if e.refused { "cannot take the request" } else { e.outcome.as_str() };
            format!("{name}: {outcome} ({})", e.detail)
        })
        .collect();
    let detail = if reasons.is_empty() { "no candidate could be tried".to_string() } else { reasons.join("; ") };
    if busy {
        let retry_after = last_walk.iter().filter_map(|(_, e)| e.retry_after).max().unwrap_or(Duration::from_secs(1));
        let doing = if throttled { "throttling" } else { "overloaded or throttling" };
        let message =
            format!("every candidate of {:?} is {doing} after {attempts} attempt(s): {detail}", route.cfg.model);
        let error = if throttled {
            ApiError::RateLimited { message, retry_after }
        } else {
            ApiError::Overloaded { message, retry_after }
        };
        return Failed { error, attempts, failovers };
    }
    let message = format!("every candidate of {:?} failed after {attempts} attempt(s): {detail}", route.cfg.model);
    Failed { error: ApiError::UpstreamsUnavailable(message), attempts, failovers }
}
