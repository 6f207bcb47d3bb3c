//! Label selectors (`a=b,c!=d,e in (f,g),!h`) and field selectors (`metadata.name=x`).

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Req {
    Eq(String, String),
    Ne(String, String),
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// A parsed label selector; empty matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<Req>);

/// Splits on commas that are not inside parentheses.
fn split_top(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c);
            }
            ')' => {
                depth -= 1;
                cur.push(c);
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter().map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    /// Parses `labelSelector`; `Err` carries a message for a 400.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                Req::NotExists(k.trim().to_string())
            } else if let Some((k, v)) = part.split_once("!=") {
                Req::Ne(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once("==") {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once('=') {
                Req::Eq(k.trim().into(), v.trim().into())
            } else if let Some((k, v)) = part.split_once(" notin ") {
                Req::NotIn(
                    k.trim().into(),
                    set_values(v).ok_or_else(|| format!("unable to parse requirement: {part}"))?,
                )
            } else if let Some((k, v)) = part.split_once(" in ") {
                Req::In(k.trim().into(), set_values(v).ok_or_else(|| format!("unable to parse requirement: {part}"))?)
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("unable to parse requirement: {part}"));
            } else {
                Req::Exists(part)
            };
            reqs.push(req);
        }
        Ok(Self(reqs))
    }

    /// Whether `obj`'s labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let get = |k: &str| labels.get(k).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            Req::Eq(k, v) => get(k) == Some(v.as_str()),
            Req::Ne(k, v) => get(k) != Some(v.as_str()),
            Req::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            Req::NotIn(k, vs) => get(k).is_none_or(|x| !vs.iter().any(|v| v == x)),
            Req::Exists(k) => get(k).is_some(),
            Req::NotExists(k) => get(k).is_none(),
        })
    }
}

/// A parsed field selector: `path=value` / `path==value` / `path!=value` terms on dotted
/// paths of the object (`metadata.name`, `metadata.namespace`, `involvedObject.name`, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut terms = Vec::new();
        for part in split_top(s) {
            let (path, eq, value) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid selector: '{part}'; can't understand '{part}'"));
            };
            terms.push((path.trim().to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// The `metadata.name=` term, if any (a watch on one object).
    pub fn name(&self) -> Option<&str> {
        self.0.iter().find(|(p, eq, _)| p == "metadata.name" && *eq).map(|(_, _, v)| v.as_str())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut node = obj;
            for part in path.split('.') {
                node = &node[part];
            }
            let got = match node {
                Value::String(s) => s.clone(),
                Value::Null => String::new(),
                other => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let obj = json!({"metadata": {"labels": {"app": "gw", "tier": "a"}}});
        for (sel, want) in [
            ("", true),
            ("app=gw", true),
            ("app==gw,tier=a", true),
            ("app!=gw", false),
            ("app in (x, gw)", true),
            ("tier notin (a)", false),
            ("app", true),
            ("!app", false),
            ("!missing", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).map(|s| s.matches(&obj)), Ok(want), "{sel}");
        }
    }

    #[test]
    fn field_selectors() {
        let obj = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let sel = FieldSelector::parse("metadata.name=a,metadata.namespace!=x").unwrap_or_default();
        assert!(sel.matches(&obj));
        assert_eq!(sel.name(), Some("a"));
    }
}
