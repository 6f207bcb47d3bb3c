//! `GET /status/api/v2/summary.json`: the [`Page`] in the shape of the Atlassian
//! Statuspage v2 summary (docs/design.md §10), field for field, so that tools reading
//! Statuspage pages read this one.

use serde_json::{Value, json};

use crate::page::{IncidentView, Page, RoutePanel};
use crate::rules::Status;
use crate::time::{date_of_day, rfc3339};

/// The page id of every sluice status page.
pub const PAGE_ID: &str = "sluice";

/// The summary document; `url` is the page's URL as requested, `name` its title.
pub fn summary(page: &Page, name: &str, url: &str) -> Value {
    let mut components = Vec::new();
    for (position, r) in page.routes.iter().enumerate() {
        components.push(group(page, r, position));
        for (i, c) in r.candidates.iter().enumerate() {
            components.push(json!({
                "id": c.id,
                "name": c.name,
                "status": c.status.as_str(),
                "created_at": rfc3339(r.created_ms),
                "updated_at": rfc3339(c.changed_ms.unwrap_or(r.created_ms)),
                "position": i + 1,
                "description": candidate_description(c),
                "showcase": false,
                "start_date": date_of_day(r.created_ms.div_euclid(86_400_000)),
                "group_id": r.id,
                "page_id": PAGE_ID,
                "group": false,
                "only_show_if_degraded": false,
            }));
        }
    }
    let incidents: Vec<Value> =
        page.incidents.iter().filter(|i| i.incident.resolved_ms.is_none()).map(|i| incident(page, i)).collect();
    json!({
        "page": {
            "id": PAGE_ID,
            "name": name,
            "url": url,
            "time_zone": "Etc/UTC",
            "updated_at": rfc3339(page.updated_at_ms),
        },
        "status": {
            "indicator": page.indicator.as_str(),
            "description": page.indicator.description(),
        },
        "components": components,
        "incidents": incidents,
        "scheduled_maintenances": [],
    })
}

fn group(page: &Page, r: &RoutePanel, position: usize) -> Value {
    json!({
        "id": r.id,
        "name": r.model,
        "status": r.status.as_str(),
        "created_at": rfc3339(r.created_ms),
        "updated_at": rfc3339(r.changed_ms.unwrap_or(r.created_ms).max(r.created_ms.min(page.now_ms))),
        "position": position + 1,
        "description": format!("Route {}", r.key),
        "showcase": true,
        "start_date": date_of_day(r.created_ms.div_euclid(86_400_000)),
        "group_id": null,
        "page_id": PAGE_ID,
        "group": true,
        "only_show_if_degraded": false,
        "components": r.candidates.iter().map(|c| c.id.clone()).collect::<Vec<_>>(),
    })
}

fn candidate_description(c: &crate::page::CandidatePanel) -> String {
    match &c.region {
        Some(region) => format!("{} ({}, {})", c.upstream, c.provider, region),
        None => format!("{} ({})", c.upstream, c.provider),
    }
}

fn incident(page: &Page, i: &IncidentView) -> Value {
    let inc = &i.incident;
    let route = page.routes.iter().find(|r| r.key == i.route);
    let mut affected = Vec::new();
    if let Some(r) = route {
        affected.push(json!({
            "id": r.id, "name": r.model, "status": r.status.as_str(),
            "created_at": rfc3339(r.created_ms),
            "updated_at": rfc3339(r.changed_ms.unwrap_or(r.created_ms)),
            "position": 1, "description": format!("Route {}", r.key), "showcase": true,
            "start_date": date_of_day(r.created_ms.div_euclid(86_400_000)),
            "group_id": null, "page_id": PAGE_ID, "group": true,
            "only_show_if_degraded": false,
        }));
    }
    let mut previous = Status::Operational;
    let updates: Vec<Value> = inc
        .changes
        .iter()
        .enumerate()
        .rev()
        .map(|(n, (at, state))| {
            let old = if n == 0 { Status::Operational } else { inc.changes[n - 1].1 };
            previous = previous.max(*state);
            json!({
                "id": format!("{}{:02x}", &i.id[..10], n % 256),
                "status": "investigating",
                "body": format!("{} is now: {}.", i.model, state.words().to_lowercase()),
                "incident_id": i.id,
                "created_at": rfc3339(*at),
                "updated_at": rfc3339(*at),
                "display_at": rfc3339(*at),
                "affected_components": [{
                    "code": i.component_id,
                    "name": i.model,
                    "old_status": old.as_str(),
                    "new_status": state.as_str(),
                }],
                "deliver_notifications": false,
                "custom_tweet": null,
                "tweet_id": null,
            })
        })
        .collect();
    let updated = inc.changes.last().map_or(inc.started_ms, |(at, _)| *at);
    json!({
        "id": i.id,
        "name": i.name,
        "status": "investigating",
        "created_at": rfc3339(inc.started_ms),
        "updated_at": rfc3339(updated),
        "monitoring_at": null,
        "resolved_at": null,
        "impact": inc.worst.indicator().as_str(),
        "shortlink": null,
        "started_at": rfc3339(inc.started_ms),
        "page_id": PAGE_ID,
        "incident_updates": updates,
        "components": affected,
    })
}
