//! Reading OpenMetrics text: enough to find one sample by name and labels.

/// One sample line: name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Metric name as exposed (`sluice_requests_total`).
    pub name: String,
    /// Label pairs in order.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
}

/// Every sample of the text.
pub fn samples(text: &str) -> Vec<Sample> {
    text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Sample> {
    let (head, value) = line.rsplit_once(' ')?;
    let value: f64 = value.parse().ok()?;
    let (name, labels) = match head.split_once('{') {
        Some((name, rest)) => (name, parse_labels(rest.strip_suffix('}')?)?),
        None => (head, Vec::new()),
    };
    Some(Sample { name: name.to_string(), labels, value })
}

fn parse_labels(text: &str) -> Option<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let end = after.find('"')?;
        out.push((key.trim_start_matches(',').to_string(), after.get(..end)?.to_string()));
        rest = after.get(end + 1..)?.trim_start_matches(',');
    }
    Some(out)
}

/// The value of the sample called `name` whose labels include all of `labels`
/// (the first one, if several match).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples(text).into_iter().find(|s| s.name == name && has_labels(s, labels)).map(|s| s.value)
}

/// Whether a sample carries every one of `labels`.
pub fn has_labels(s: &Sample, labels: &[(&str, &str)]) -> bool {
    labels.iter().all(|(k, v)| s.labels.iter().any(|(a, b)| a == k && b == v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_samples_by_name_and_labels() {
        let text = "# TYPE sluice_requests counter\n\
                    sluice_requests_total{route=\"chat\",code=\"200\"} 3\n\
                    sluice_requests_total{route=\"chat\",code=\"503\"} 1\n\
                    sluice_reservations_open 0\n# EOF\n";
        assert_eq!(value(text, "sluice_requests_total", &[("code", "503")]), Some(1.0));
        assert_eq!(value(text, "sluice_requests_total", &[("route", "chat"), ("code", "200")]), Some(3.0));
        assert_eq!(value(text, "sluice_requests_total", &[("code", "429")]), None);
        assert_eq!(value(text, "sluice_reservations_open", &[]), Some(0.0));
        assert_eq!(samples(text).len(), 3);
    }
}
