//! What the demo prints: one aligned line a second, then a summary.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use super::traffic::Sample;

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
    upstreams: [&'static str; 3],
    pending: Vec<Sample>,
    all: Vec<Sample>,
}

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

impl Report {
    /// An empty report.
    pub fn new(upstreams: [&'static str; 3]) -> Self {
        Self { upstreams, pending: Vec::new(), all: Vec::new() }
    }

    /// Adds an answered request.
    pub fn add(&mut self, s: Sample) {
        self.pending.push(s);
    }

    /// The column header.
    pub fn header(&self, out: &mut impl Write, style: &Style) -> std::io::Result<()> {
        let [a, b, c] = self.upstreams.map(short);
        let line = format!(
            "{:>4}  {:<26} {:>4} {:>5}  {:>9} {:>9} {:>9}  {:<24} {:>7} {:>7}",
            "t", "act", "reqs", "ok", a, b, c, "failovers (reasons)", "p50", "p99"
        );
        writeln!(out, "{}", style.bold(&line))
    }

    /// The line for the last second.
    pub fn line(&mut self, out: &mut impl Write, style: &Style, second: u64, act: &str) -> std::io::Result<()> {
        let batch = std::mem::take(&mut self.pending);
        let total = batch.len();
        let ok = batch.iter().filter(|s| s.ok).count();
        let served = self.upstreams.map(|u| batch.iter().filter(|s| s.ok && s.upstream.as_deref() == Some(u)).count());
        let mut reasons: BTreeMap<&str, usize> = BTreeMap::new();
        for s in &batch {
            for r in &s.failovers {
                *reasons.entry(r.as_str()).or_default() += 1;
            }
        }
        let failovers = if reasons.is_empty() {
            style.dim("-")
        } else {
            let text = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect::<Vec<_>>().join(", ");
            style.yellow(&format!("{text:<24}"))
        };
        let mut lat: Vec<Duration> = batch.iter().filter(|s| s.ok).map(|s| s.latency).collect();
        lat.sort();
        let ok_pct = if total == 0 { "-".to_string() } else { format!("{:.0}%", 100.0 * ok as f64 / total as f64) };
        let ok_text = if ok == total { style.green(&format!("{ok_pct:>5}")) } else { style.red(&format!("{ok_pct:>5}")) };
        let failover_cell = if reasons.is_empty() { format!("{failovers:<24}") } else { failovers };
        writeln!(
            out,
            "{:>3}s  {:<26} {:>4} {}  {:>9} {:>9} {:>9}  {} {:>7} {:>7}",
            second,
            act,
            total,
            ok_text,
            served[0],
            served[1],
            served[2],
            failover_cell,
            ms(percentile(&lat, 0.5)),
            ms(percentile(&lat, 0.99)),
        )?;
        self.all.extend(batch);
        Ok(())
    }

    /// The closing summary.
    pub fn summary(&mut self, out: &mut impl Write, style: &Style, spend_nanos: i64) -> std::io::Result<()> {
        self.all.append(&mut self.pending);
        let total = self.all.len();
        let ok = self.all.iter().filter(|s| s.ok).count();
        writeln!(out)?;
        writeln!(out, "{}", style.bold("Summary"))?;
        writeln!(out, "  {:<16} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8}", "model", "requests", "ok", "failed over", "p50", "p99", "max")?;
        for model in ["claude-opus-4", "gpt-4o"] {
            let rows: Vec<&Sample> = self.all.iter().filter(|s| s.model == model).collect();
            let mut lat: Vec<Duration> = rows.iter().filter(|s| s.ok).map(|s| s.latency).collect();
            lat.sort();
            writeln!(
                out,
                "  {:<16} {:>8} {:>8} {:>10} {:>8} {:>8} {:>8}",
                model,
                rows.len(),
                rows.iter().filter(|s| s.ok).count(),
                rows.iter().filter(|s| !s.failovers.is_empty()).count(),
                ms(percentile(&lat, 0.5)),
                ms(percentile(&lat, 0.99)),
                ms(lat.last().copied()),
            )?;
        }
        writeln!(out)?;
        writeln!(out, "  {:<22} {:>8}", "served by", "requests")?;
        for u in self.upstreams {
            let n = self.all.iter().filter(|s| s.ok && s.upstream.as_deref() == Some(u)).count();
            writeln!(out, "  {u:<22} {n:>8}")?;
        }
        let availability = if total == 0 { 0.0 } else { 100.0 * ok as f64 / total as f64 };
        let text = format!("{availability:.2}% ({ok}/{total})");
        let painted = if ok == total { style.green(&text) } else { style.yellow(&text) };
        writeln!(out)?;
        writeln!(out, "  client-visible availability  {painted}")?;
        writeln!(out, "  billed to account \"demo\"     ${}", sluice_ledger::format_usd(spend_nanos))?;
        Ok(())
    }
}

/// `anthropic-us-east-1` → `us-east-1`, for narrow columns.
fn short(name: &'static str) -> &'static str {
    name.strip_prefix("anthropic-").unwrap_or(name)
}
