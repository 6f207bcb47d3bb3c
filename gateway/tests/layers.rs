//! The gateway's top-level modules form layers: no import cycle between them
//! (docs/architecture.md, "Layers"). A module names another as `crate::name`; this test
//! reads every source file (comments and tests left out), draws those edges and fails
//! on a cycle, naming the lines that close it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Where each top-level module names another: `(from, to)` → `file:line` of each use.
type Edges = BTreeMap<(String, String), Vec<String>>;

#[test]
fn no_import_cycle_between_the_gateway_modules() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = edges(&src);
    assert!(edges.len() > 20, "too few edges found ({}): is the scan reading the sources?", edges.len());
    if let Some(cycle) = cycle(&edges) {
        let mut report = format!("import cycle: {}\n", cycle.join(" → "));
        for pair in cycle.windows(2) {
            let uses = &edges[&(pair[0].clone(), pair[1].clone())];
            report.push_str(&format!("  {} → {}: {}\n", pair[0], pair[1], uses.join(", ")));
        }
        panic!("{report}");
    }
}

/// The scan on a made-up crate: it finds the cycle of `a` and `b`, and neither a comment
/// nor a test module is an edge.
#[test]
fn a_cycle_is_found_and_a_comment_is_not_an_edge() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let write = |name: &str, text: &str| {
        std::fs::write(dir.path().join(name), text).unwrap_or_else(|e| panic!("{e}"));
    };
    write("lib.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    write("a.rs", "use crate::b::B;\n");
    write(
        "b.rs",
        "/// Unlike [`crate::c`]…\npub fn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { use crate::c; }\n",
    );
    write("c.rs", "// crate::a in a comment\nuse crate::{a, b};\n");
    let edges = edges(dir.path());
    let found: BTreeSet<_> = edges.keys().map(|(a, b)| format!("{a}→{b}")).collect();
    assert_eq!(found, BTreeSet::from(["a→b".into(), "b→a".into(), "c→a".into(), "c→b".into()]));
    let cycle = cycle(&edges).unwrap_or_default();
    assert_eq!(cycle.first(), cycle.last());
    assert!(cycle.contains(&"a".to_string()) && cycle.contains(&"b".to_string()), "{cycle:?}");
}

/// The edges between the top-level modules of the crate rooted at `src`.
fn edges(src: &Path) -> Edges {
    let mut edges = Edges::new();
    for file in rust_files(src) {
        let relative = file.strip_prefix(src).unwrap_or(&file).to_string_lossy().replace('\\', "/");
        let top = relative.split('/').next().unwrap_or("").trim_end_matches(".rs").to_string();
        // The crate root and the tests' own files are not a layer.
        if top == "lib" || top == "main" || relative.ends_with("tests.rs") || relative.contains("/tests/") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (n, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("#[cfg(test)]") {
                break;
            }
            if code.starts_with("//") {
                continue;
            }
            for used in crate_paths(code) {
                if used != top {
                    edges.entry((top.clone(), used)).or_default().push(format!("{relative}:{}", n + 1));
                }
            }
        }
    }
    edges
}

/// The top-level modules a line of code names: `crate::name` and `crate::{a, b::c}`.
fn crate_paths(code: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let preceded = rest[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_');
        rest = &rest[at + "crate::".len()..];
        if preceded {
            continue; // `sluice_crate::…`, not this crate
        }
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            found.extend(inner.split(',').map(|p| ident(p.trim())).filter(|p| !p.is_empty()));
        } else {
            found.push(ident(rest));
        }
    }
    found.retain(|p| !p.is_empty() && p != "self");
    found
}

fn ident(text: &str) -> String {
    text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect()
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|x| x == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// A cycle of modules (first and last the same), if the edges have one.
fn cycle(edges: &Edges) -> Option<Vec<String>> {
    let mut next: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (a, b) in edges.keys() {
        next.entry(a.as_str()).or_default().push(b.as_str());
    }
    // Depth-first search; a module met again while on the path closes a cycle.
    fn visit<'a>(
        m: &'a str,
        next: &BTreeMap<&'a str, Vec<&'a str>>,
        path: &mut Vec<&'a str>,
        done: &mut BTreeSet<&'a str>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| *p == m) {
            let mut cycle: Vec<String> = path[at..].iter().map(|s| s.to_string()).collect();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if !done.insert(m) {
            return None;
        }
        path.push(m);
        for n in next.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        None
    }
    let mut done = BTreeSet::new();
    let starts: Vec<&str> = next.keys().copied().collect();
    starts.into_iter().find_map(|m| visit(m, &next, &mut Vec::new(), &mut done))
}
