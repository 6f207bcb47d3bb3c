//! What the demo prints: one aligned line a second, then a summary.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use super::cast::Member;
use super::traffic::{Api, Sample};

/// Colours, only on a terminal.
pub struct Style {
    /// Whether to emit ANSI colours.
    pub colour: bool,
}

impl Style {
    /// A style.
    pub fn new(colour: bool) -> Self {
        Self { colour }
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.colour { format!("\x1b[{code}m{text}\x1b[0m") } else { text.to_string() }
    }

    /// Bold text.
    pub fn bold(&self, text: &str) -> String {
        self.paint("1", text)
    }

    fn green(&self, text: &str) -> String {
        self.paint("32", text)
    }

    fn yellow(&self, text: &str) -> String {
        self.paint("33", text)
    }

    fn red(&self, text: &str) -> String {
        self.paint("31", text)
    }

    fn dim(&self, text: &str) -> String {
        self.paint("2", text)
    }
}

/// Collected samples.
pub struct Report {
    cast: &'static [Member],
    pending: Vec<Sample>,
    all: Vec<Sample>,
}

/// The models the traffic asks for, in summary order.
const MODELS: [&str; 3] = ["claude-opus-4", "gpt-4o", "gemini-2.5-pro"];
/// Width of the act column.
const ACT: usize = 24;
/// Width of the failover column.
const FAILOVERS: usize = 24;

fn percentile(sorted: &[Duration], p: f64) -> Option<Duration> {
    if sorted.is_empty() {
        return None;
    }
    let idx = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted.get(idx).copied()
}

fn ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".into(), |d| format!("{}ms", d.as_millis()))
}

/// Width of a served-by column: its label, at least four digits.
fn width(m: &Member) -> usize {
    m.label.len().max(4)
}

impl Report {
    /// An empty report with one served-by column per member of `cast`.
    pub fn new(cast: &'static [Member]) -> Self {
        Self { cast, pending: Vec::new(), all: Vec::new() }
    }

    /// Adds an answered request.
    pub fn add(&mut self, s: Sample) {
        self.pending.push(s);
    }

    /// The column header.
    pub fn header(&self, out: &mut impl Write, style: &Style) -> std::io::Result<()> {
        let served: Vec<String> = self.cast.iter().map(|m| format!("{:>w$}", m.label, w = width(m))).collect();
        let line = format!(
            "{:>4}  {:<ACT$} {:>4} {:>5}  {}  {:<FAILOVERS$} {:>7} {:>7}  {}",
            "t",
            "act",
            "reqs",
            "ok",
            served.join(" "),
            "failovers (reasons)",
            "p50",
            "p99",
            "breakers"
        );
        writeln!(out, "{}", style.bold(&line))
    }

    /// The line for the last second: requests served by each upstream (a backup that
    /// serves is painted), failovers with their reasons, latency of the answered, and
    /// `breakers`, the circuit breakers that are not closed.
    pub fn line(
        &mut self,
        out: &mut impl Write,
        style: &Style,
        second: u64,
        act: &str,
        breakers: &str,
    ) -> std::io::Result<()> {
        let batch = std::mem::take(&mut self.pending);
        let total = batch.len();
        let ok = batch.iter().filter(|s| s.ok).count();
        let served: Vec<String> = self
            .cast
            .iter()
            .map(|m| {
                let n = batch.iter().filter(|s| s.ok && s.upstream.as_deref() == Some(m.name)).count();
                let cell = format!("{n:>w$}", w = width(m));
                match (n, m.backup) {
                    (0, _) => style.dim(&cell),
                    (_, true) => style.yellow(&cell),
                    (_, false) => cell,
                }
            })
            .collect();
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &batch {
            for r in &s.failovers {
                *reasons.entry(r.as_str()).or_default() += 1;
            }
        }
        let failovers = if reasons.is_empty() {
            style.dim(&format!("{:<FAILOVERS$}", "-"))
        } else {
            let text = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ");
            style.yellow(&format!("{text:<FAILOVERS$}"))
        };
        let mut lat: Vec<Duration> = batch.iter().filter(|s| s.ok).map(|s| s.latency).collect();
        lat.sort();
        let ok_pct = if total == 0 { "-".to_string() } else { format!("{:.0}%", 100.0 * ok as f64 / total as f64) };
        let ok_text =
            if ok == total { style.green(&format!("{ok_pct:>5}")) } else { style.red(&format!("{ok_pct:>5}")) };
        writeln!(
            out,
            "{:>3}s  {:<ACT$} {:>4} {}  {}  {} {:>7} {:>7}  {}",
            second,
            act,
            total,
            ok_text,
            served.join(" "),
            failovers,
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
            if breakers.is_empty() { style.dim("-") } else { style.red(breakers) },
        )?;
        self.all.extend(batch);
        Ok(())
    }

    /// The closing summary: per model, who served it and how fast; availability and the bill.
    pub fn summary(&mut self, out: &mut impl Write, style: &Style, spend_nanos: i64) -> std::io::Result<()> {
        self.all.append(&mut self.pending);
        let total = self.all.len();
        let ok = self.all.iter().filter(|s| s.ok).count();
        writeln!(out)?;
        writeln!(out, "{}", style.bold("Summary"))?;
        let mut rows = Vec::new();
        for model in MODELS {
            let answers: Vec<&Sample> = self.all.iter().filter(|s| s.model == model).collect();
            let mut lat: Vec<Duration> = answers.iter().filter(|s| s.ok).map(|s| s.latency).collect();
            lat.sort();
            let served: Vec<String> = self
                .cast
                .iter()
                .filter_map(|m| {
                    let n = answers.iter().filter(|s| s.ok && s.upstream.as_deref() == Some(m.name)).count();
                    (n > 0).then(|| format!("{} {n}", m.name))
                })
                .collect();
            rows.push((model, answers, served.join(", "), lat));
        }
        let w = rows.iter().map(|(_, _, served, _)| served.len()).max().unwrap_or(0).max("served by".len());
        writeln!(
            out,
            "  {:<16} {:>8} {:>8} {:>11}  {:<w$} {:>7} {:>7} {:>7}",
            "model", "requests", "ok", "failed over", "served by", "p50", "p99", "max"
        )?;
        for (model, answers, served, lat) in rows {
            writeln!(
                out,
                "  {:<16} {:>8} {:>8} {:>11}  {:<w$} {:>7} {:>7} {:>7}",
                model,
                answers.len(),
                answers.iter().filter(|s| s.ok).count(),
                answers.iter().filter(|s| !s.failovers.is_empty()).count(),
                served,
                ms(percentile(&lat, 0.5)),
                ms(percentile(&lat, 0.99)),
                ms(lat.last().copied()),
            )?;
        }
        let by_api: Vec<String> = Api::ALL
            .iter()
            .map(|api| {
                let asked: Vec<&Sample> = self.all.iter().filter(|s| s.api == *api).collect();
                let ok = asked.iter().filter(|s| s.ok).count();
                format!("{} {ok}/{}", api.path().trim_start_matches('/'), asked.len())
            })
            .collect();
        writeln!(out)?;
        writeln!(out, "  by API (ok/requests)         {}", by_api.join(", "))?;
        let availability = if total == 0 { 0.0 } else { 100.0 * ok as f64 / total as f64 };
        let text = format!("{availability:.2}% ({ok}/{total})");
        let painted = if ok == total { style.green(&text) } else { style.yellow(&text) };
        writeln!(out)?;
        writeln!(out, "  client-visible availability  {painted}")?;
        writeln!(out, "  billed to account \"demo\"     ${}", sluice_ledger::format_usd(spend_nanos))?;
        Ok(())
    }
}
