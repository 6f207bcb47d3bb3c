//! The chart's RBAC for the operator (`charts/sluice/templates/serviceaccount.yaml` and
//! `rbac.yaml`), rendered without Helm: those two templates use only a handful of
//! constructs (the operator's name, the release namespace, the labels, one `if` on
//! leader election, comments), which this renders; anything else in them is an error
//! naming the line, so that a change to the chart cannot be half-rendered silently.
//! The rules themselves are plain YAML in the templates and are taken as they are.
//! (The Python suites render the whole chart with Helm's Go SDK:
//! `sluice_testsupport.chart`.)

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::Value;

/// The chart's templates directory.
pub fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/sluice/templates")
}

/// The operator's ServiceAccount, ClusterRole and ClusterRoleBinding (and, with
/// `leader_election`, its Role and RoleBinding) as the chart renders them for an
/// operator named `name` (the chart's `sluice.operatorName`: `<fullname>-operator`) in
/// release namespace `namespace`. The chart's common labels (`sluice.labels`) are left out.
pub fn operator_rbac(name: &str, namespace: &str, leader_election: bool) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for file in ["serviceaccount.yaml", "rbac.yaml"] {
        let path = templates_dir().join(file);
        let text = std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        let rendered = render(&text, name, namespace, leader_election).with_context(|| format!("rendering {file}"))?;
        for doc in split_documents(&rendered) {
            let value: Value = serde_yaml::from_str(doc).with_context(|| format!("parsing {file}:\n{doc}"))?;
            if !value.is_null() {
                out.push(value);
            }
        }
    }
    Ok(out)
}

fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut offset = 0;
    for line in text.split_inclusive('\n') {
        if line.trim_end() == "---" {
            docs.push(&text[start..offset]);
            start = offset + line.len();
        }
        offset += line.len();
    }
    docs.push(&text[start..]);
    docs
}

/// Strips `{{/* … */}}` comments (one or more lines).
fn strip_comments(text: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find("{{/*").or_else(|| rest.find("{{- /*")) {
        out.push_str(&rest[..open]);
        let after = &rest[open..];
        let close = after.find("*/}}").map(|i| i + 4).or_else(|| after.find("*/ -}}").map(|i| i + 6));
        let Some(close) = close else { anyhow::bail!("an unterminated template comment") };
        rest = &after[close..];
        // A comment on lines of its own leaves no empty line behind.
        rest = rest.strip_prefix('\n').unwrap_or(rest);
    }
    out.push_str(rest);
    Ok(out)
}

fn render(text: &str, name: &str, namespace: &str, leader_election: bool) -> anyhow::Result<String> {
    const IF_ELECTION: &str = "{{- if .Values.operator.leaderElection.enabled }}";
    let text = strip_comments(text)?;
    let mut out = String::new();
    // One entry per open `if`: whether its body is rendered.
    let mut open: Vec<bool> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed == IF_ELECTION {
            open.push(leader_election);
            continue;
        }
        if trimmed == "{{- end }}" {
            anyhow::ensure!(open.pop().is_some(), "line {}: `end` without `if`", n + 1);
            continue;
        }
        if open.contains(&false) {
            continue;
        }
        if trimmed.starts_with("{{- include \"sluice.labels\" . | nindent") && trimmed.ends_with("}}") {
            continue;
        }
        let line = line
            .replace("{{ include \"sluice.operatorName\" . }}", name)
            .replace("{{ .Release.Namespace }}", namespace);
        anyhow::ensure!(
            !line.contains("{{"),
            "line {}: template syntax this renderer does not know (extend sluice_tests::controlplane::chart): {line}",
            n + 1
        );
        out.push_str(&line);
        out.push('\n');
    }
    anyhow::ensure!(open.is_empty(), "an `if` without `end`");
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_the_charts_operator_rbac() {
        let kinds =
            |objs: &[Value]| -> Vec<String> { objs.iter().map(|o| o["kind"].as_str().unwrap().to_string()).collect() };
        let plain = operator_rbac("rel-operator", "ns", false).unwrap();
        assert_eq!(kinds(&plain), ["ServiceAccount", "ClusterRole", "ClusterRoleBinding"]);
        assert_eq!(
            (&plain[0]["metadata"]["name"], &plain[0]["metadata"]["namespace"]),
            (&"rel-operator".into(), &"ns".into())
        );
        assert_eq!(plain[0]["metadata"]["labels"], serde_json::json!({"app.kubernetes.io/component": "operator"}));
        assert_eq!(plain[2]["subjects"][0]["namespace"], "ns");
        assert!(!plain[1]["rules"].as_array().unwrap().is_empty());
        let elected = operator_rbac("rel-operator", "ns", true).unwrap();
        assert_eq!(kinds(&elected), ["ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"]);
        assert_eq!(elected[3]["metadata"]["name"], "rel-operator-leader-election");
    }

    #[test]
    fn unknown_template_syntax_is_an_error() {
        let err = render("a: {{ .Values.x }}\n", "n", "ns", false).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }
}
