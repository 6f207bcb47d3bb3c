//! The billing metrics: balance grants (fed by the biller, docs/design.md §5a) and
//! limits (refusals, and lease takes fed by the limiter, §5b).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use sluice_ledger::limits::LimiterObserver;
use sluice_ledger::{BillerObserver, RenewalResult};

/// `{result}` of a grant renewal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RenewalLabel {
    /// `ok`, `refused` or `failed`.
    pub result: Renewal,
}

/// A [`RenewalResult`] as a label value.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Renewal(pub RenewalResult);

impl EncodeLabelValue for Renewal {
    fn encode(&self, encoder: &mut LabelValueEncoder) -> Result<(), std::fmt::Error> {
        std::fmt::Write::write_str(encoder, self.0.as_str())
    }
}

/// The balance grant metrics, fed by the biller through [`BillerObserver`].
#[derive(Clone, Debug)]
pub struct GrantMetrics {
    /// `sluice_grants_open`.
    pub open: Gauge,
    /// `sluice_grant_renewals_total{result}`.
    pub renewals: Family<RenewalLabel, Counter>,
    /// `sluice_settle_batch_size`.
    pub batch: Histogram,
    /// `sluice_settle_retries_total`.
    pub retries: Counter,
}

impl Default for GrantMetrics {
    fn default() -> Self {
        Self {
            open: Gauge::default(),
            renewals: Family::default(),
            batch: Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0]),
            retries: Counter::default(),
        }
    }
}

impl BillerObserver for GrantMetrics {
    fn renewal(&self, result: RenewalResult) {
        self.renewals.get_or_create(&RenewalLabel { result: Renewal(result) }).inc();
    }

    fn grants_open(&self, delta: i64) {
        self.open.inc_by(delta);
    }

    fn batch(&self, size: usize) {
        self.batch.observe(size as f64);
    }

    fn settle_retry(&self) {
        self.retries.inc();
    }
}

/// `{limit,key_kind}` of a limit refusal.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabel {
    /// `rpm`, `tpm`, `tpd`, `concurrency`, `daily_spend` or `monthly_spend`.
    pub limit: &'static str,
    /// `key` or `account`: whose limit.
    pub key_kind: &'static str,
}

/// `{limit,result}` of a lease take.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitTakeLabel {
    /// As in [`LimitLabel`].
    pub limit: &'static str,
    /// `ok`, `short` or `failed`.
    pub result: &'static str,
}

/// The limit metrics; lease takes are fed by the limiter through [`LimiterObserver`].
#[derive(Clone, Debug, Default)]
pub struct LimitMetrics {
    /// `sluice_limit_rejections_total{limit,key_kind}`.
    pub rejections: Family<LimitLabel, Counter>,
    /// `sluice_limit_lease_takes_total{limit,result}`.
    pub takes: Family<LimitTakeLabel, Counter>,
}

impl LimiterObserver for LimitMetrics {
    fn take(&self, meter: sluice_ledger::Meter, result: &'static str) {
        self.takes.get_or_create(&LimitTakeLabel { limit: meter.as_str(), result }).inc();
    }
}
