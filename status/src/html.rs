//! `GET /status`: the [`Page`] as one server-rendered HTML document (docs/design.md §10).
//! No script: states are written in words (colour only repeats them), a little inline
//! CSS, a viewport for phones, and a `<meta http-equiv="refresh">` to stay current.
//!
//! Every component carries `data-component` (its id) and `data-status` (its Statuspage
//! value), so tests and scrapers read the same states the JSON gives.

use std::fmt::Write as _;

use crate::page::{CandidatePanel, Page, RoutePanel};
use crate::rules::Status;
use crate::time::{date_of_day, human};

/// Seconds between the page's own refreshes.
pub const REFRESH_SECS: u32 = 30;

const CSS: &str = "\
body{font:15px/1.45 system-ui,sans-serif;margin:0 auto;max-width:60rem;padding:1rem;color:#1b1b1b}\
h1{font-size:1.5rem;margin:.2rem 0}h2{font-size:1.2rem;margin:1.6rem 0 .4rem}h3{font-size:1.05rem;margin:0}\
.banner{padding:.8rem 1rem;border-radius:6px;font-weight:600;margin:1rem 0}\
.s-operational{background:#e3f4e8;border-left:6px solid #1f8a3b}\
.s-degraded_performance{background:#fff6d6;border-left:6px solid #b58100}\
.s-partial_outage{background:#ffe8d6;border-left:6px solid #c25400}\
.s-major_outage{background:#fde2e2;border-left:6px solid #b3261e}\
.route{border:1px solid #ddd;border-radius:6px;padding:.7rem 1rem;margin:.8rem 0}\
.state{font-weight:600;padding:0 .4rem;border-radius:4px}\
.bar{display:flex;gap:1px;height:28px;margin:.4rem 0}.bar span{flex:1;min-width:1px}\
.d-good{background:#1f8a3b}.d-fair{background:#b58100}.d-poor{background:#b3261e}.d-none{background:#ddd}\
table{border-collapse:collapse;width:100%;font-size:.9rem}th,td{text-align:left;padding:.25rem .4rem;border-bottom:1px solid #eee}\
.wrap{overflow-x:auto}.muted{color:#666;font-size:.85rem}\
@media (max-width:600px){body{padding:.5rem}table{font-size:.8rem}}";

/// Renders the page; `name` is its title, `runbooks` the URL of docs/operate.md.
pub fn render(page: &Page, name: &str, runbooks: &str) -> String {
    let mut h = String::with_capacity(16 * 1024 + page.routes.len() * 8 * 1024);
    let worst = page.routes.iter().map(|r| r.status).max().unwrap_or(Status::Operational);
    let _ = write!(
        h,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECS}\">\
         <title>{title}</title><style>{CSS}</style></head><body>\
         <header><h1>{title}</h1><p class=\"muted\">Updated <time datetime=\"{updated}\">{updated_h}</time>; \
         this page refreshes itself every {REFRESH_SECS} seconds. \
         <a href=\"status/api/v2/summary.json\">JSON (Statuspage v2 summary)</a></p></header>\
         <main><p class=\"banner s-{worst}\" id=\"overall\" data-indicator=\"{indicator}\">{description}</p>",
        title = esc(name),
        updated = crate::time::rfc3339(page.updated_at_ms),
        updated_h = human(page.updated_at_ms),
        worst = worst.as_str(),
        indicator = page.indicator.as_str(),
        description = page.indicator.description(),
    );
    if !page.synthetic {
        h.push_str(
            "<p class=\"muted\" id=\"no-synthetic\">No route has synthetic checks \
             (<code>ModelRoute.spec.synthetic</code>): states come from live traffic and \
             circuits only, so an idle candidate is shown operational.</p>",
        );
    }
    h.push_str("<h2>Routes</h2>");
    for r in &page.routes {
        route(&mut h, r, runbooks);
    }
    if page.routes.is_empty() {
        h.push_str("<p>No routes are configured.</p>");
    }
    incidents(&mut h, page);
    h.push_str("<h2>Gateways</h2>");
    if page.gateways.is_empty() {
        h.push_str("<p>No gateway has reported in the last hour.</p>");
    } else {
        h.push_str("<div class=\"wrap\"><table><thead><tr><th>gateway</th><th>last seen</th></tr></thead><tbody>");
        for (id, at) in &page.gateways {
            let ago = (page.now_ms - at).max(0) / 1000;
            let _ = write!(h, "<tr><td>{}</td><td>{} ({ago} s ago)</td></tr>", esc(id), human(*at));
        }
        h.push_str("</tbody></table></div>");
    }
    let _ = write!(
        h,
        "<h2>Runbooks</h2><ul>\
         <li><a href=\"{r}#upstream-down\">Upstream down</a></li>\
         <li><a href=\"{r}#region-degraded\">Region degraded</a></li>\
         <li><a href=\"{r}#throttling-storm\">Throttling storm</a></li>\
         <li><a href=\"{r}#budget-burning\">Budget burning</a></li>\
         <li><a href=\"{r}#ledger-unreachable\">Ledger unreachable</a></li>\
         <li><a href=\"{r}#status-page\">Reading this page</a></li></ul></main></body></html>",
        r = esc(runbooks)
    );
    h
}

fn route(h: &mut String, r: &RoutePanel, runbooks: &str) {
    let _ = write!(
        h,
        "<section class=\"route\" id=\"route-{id}\" data-component=\"{id}\" data-status=\"{s}\" data-route=\"{key}\">\
         <h3>{model} <span class=\"state s-{s}\">{words}</span></h3>\
         <p class=\"muted\">Route {key}; clients over 5 min: {clients}; objective {objective}; {synthetic}</p>",
        id = r.id,
        s = r.status.as_str(),
        key = esc(&r.key),
        model = esc(&r.model),
        words = r.status.words(),
        clients = ratio_text(r.clients.ok, r.clients.total()),
        objective = percent(r.objective),
        synthetic = match r.synthetic_interval_ms {
            Some(ms) => format!("synthetic checks every {}", secs(ms)),
            None => "no synthetic checks".to_owned(),
        },
    );
    if r.status != Status::Operational {
        let anchor = if r.status == Status::DegradedPerformance { "region-degraded" } else { "upstream-down" };
        let _ = write!(h, "<p>What to do: <a href=\"{}#{anchor}\">runbook</a>.</p>", esc(runbooks));
    }
    day_bar(h, r);
    h.push_str(
        "<div class=\"wrap\"><table><thead><tr><th>candidate</th><th>state</th><th>success (5 min)</th>\
         <th>first byte p50 / p99 (1 h)</th><th>circuit</th><th>last check</th></tr></thead><tbody>",
    );
    for c in &r.candidates {
        candidate(h, c);
    }
    h.push_str("</tbody></table></div>");
    if !r.budgets.is_empty() {
        h.push_str("<p>Error budgets:</p><ul>");
        for b in &r.budgets {
            match &b.report {
                Ok(report) => {
                    let burn = report.burn_rates.get("1h").map_or("0.0", String::as_str);
                    let _ = write!(
                        h,
                        "<li>{} (objective {}): {} % of the budget remaining, burn rate {} over 1 h, {:?}</li>",
                        esc(&b.key),
                        esc(&b.objective),
                        esc(&report.remaining_percent),
                        esc(burn),
                        report.state
                    );
                }
                Err(e) => {
                    let _ = write!(h, "<li>{}: not evaluated ({})</li>", esc(&b.key), esc(e));
                }
            }
        }
        h.push_str("</ul>");
    }
    h.push_str("</section>");
}

fn day_bar(h: &mut String, r: &RoutePanel) {
    let with_data: Vec<f64> = r.days.iter().filter_map(|(_, s)| *s).collect();
    let summary = if with_data.is_empty() {
        "no traffic in the last 90 days".to_owned()
    } else {
        let mean = with_data.iter().sum::<f64>() / with_data.len() as f64;
        format!("{} days with traffic, mean daily availability {}", with_data.len(), percent(mean))
    };
    let _ = write!(
        h,
        "<p class=\"muted\">Last 90 days: {summary}.</p><div class=\"bar\" role=\"img\" aria-label=\"{summary}\">"
    );
    for (day, share) in &r.days {
        let (class, text) = match share {
            None => ("d-none", "no data".to_owned()),
            Some(s) if *s >= 0.999 => ("d-good", percent(*s)),
            Some(s) if *s >= 0.99 => ("d-fair", percent(*s)),
            Some(s) => ("d-poor", percent(*s)),
        };
        let _ = write!(h, "<span class=\"{class}\" title=\"{}: {text}\"></span>", date_of_day(*day));
    }
    h.push_str("</div>");
}

fn candidate(h: &mut String, c: &CandidatePanel) {
    let region = c.region.as_deref().map(|r| format!(", {}", esc(r))).unwrap_or_default();
    let check = match &c.last_check {
        Some((at, outcome)) => format!("{} at {}", esc(outcome), human(*at)),
        None => "none".to_owned(),
    };
    let _ = write!(
        h,
        "<tr data-component=\"{id}\" data-status=\"{s}\"><td>{upstream}<br><span class=\"muted\">{provider}{region}</span></td>\
         <td><span class=\"state s-{s}\">{words}</span></td><td>{success}</td><td>{p50} / {p99}</td><td>{circuit}</td><td>{check}</td></tr>",
        id = c.id,
        s = c.status.as_str(),
        upstream = esc(&c.upstream),
        provider = esc(&c.provider),
        words = c.status.words(),
        success = ratio_text(c.live.ok, c.live.total()),
        p50 = ms_text(c.ttfb_p50_ms),
        p99 = ms_text(c.ttfb_p99_ms),
        circuit = c.circuit.words(),
    );
}

fn incidents(h: &mut String, page: &Page) {
    h.push_str("<h2>Incidents</h2>");
    if page.incidents.is_empty() {
        let _ = write!(h, "<p>No incidents since {}.</p>", human(page.from_ms));
        return;
    }
    h.push_str(
        "<div class=\"wrap\"><table id=\"incidents\"><thead><tr><th>incident</th><th>route</th><th>worst state</th>\
         <th>started</th><th>ended</th></tr></thead><tbody>",
    );
    for i in &page.incidents {
        let ended = match i.incident.resolved_ms {
            Some(at) => format!("<time datetime=\"{}\">{}</time>", crate::time::rfc3339(at), human(at)),
            None => "ongoing".to_owned(),
        };
        let _ = write!(
            h,
            "<tr data-incident=\"{id}\" data-resolved=\"{resolved}\"><td>{name}</td><td>{route}</td><td>{worst}</td>\
             <td><time datetime=\"{start}\">{start_h}</time></td><td>{ended}</td></tr>",
            id = i.id,
            resolved = i.incident.resolved_ms.is_some(),
            name = esc(&i.name),
            route = esc(&i.route),
            worst = i.incident.worst.words(),
            start = crate::time::rfc3339(i.incident.started_ms),
            start_h = human(i.incident.started_ms),
        );
    }
    h.push_str("</tbody></table></div>");
}

fn ratio_text(ok: u64, total: u64) -> String {
    if total == 0 { "no traffic".to_owned() } else { format!("{} of {total}", percent(ok as f64 / total as f64)) }
}

fn percent(ratio: f64) -> String {
    let p = ratio * 100.0;
    if p >= 99.0 { format!("{p:.2} %") } else { format!("{p:.1} %") }
}

fn ms_text(ms: Option<u64>) -> String {
    match ms {
        None => "no data".to_owned(),
        Some(u64::MAX) => "over 60 s".to_owned(),
        Some(ms) => format!("≤ {ms} ms"),
    }
}

fn secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) { format!("{} s", ms / 1000) } else { format!("{ms} ms") }
}

/// Escapes text for HTML content and attribute values.
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
