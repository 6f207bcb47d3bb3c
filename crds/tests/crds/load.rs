//! File mode's loading: `load_paths` over files and directories (nested, hidden entries
//! and non-YAML files skipped, mounted-ConfigMap symlinks, loops), multi-document files,
//! and the problems that name a file and document.
#![expect(clippy::expect_used, reason = "helpers outside #[test] fns too: a panic is how a test reports")]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use sluice_crds::{Manifests, load_paths, resolve};

/// A fresh directory under the system temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("sluice-crds-load-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    /// Writes `rel` (creating parent directories) and returns its path.
    fn write(&self, rel: &str, text: impl AsRef<[u8]>) -> PathBuf {
        let path = self.0.join(rel);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("create dirs");
        std::fs::write(&path, text).expect("write file");
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn upstream(name: &str) -> String {
    format!(
        "apiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: {name}}}\nspec: {{baseUrl: \"http://127.0.0.1:9101\"}}\n"
    )
}

fn names(m: &Manifests) -> Vec<String> {
    let upstreams = m.upstreams.iter().map(|u| format!("Upstream {}", u.metadata.name.clone().unwrap_or_default()));
    let routes = m.routes.iter().map(|r| format!("ModelRoute {}", r.metadata.name.clone().unwrap_or_default()));
    let budgets = m.budgets.iter().map(|b| format!("ErrorBudget {}", b.metadata.name.clone().unwrap_or_default()));
    upstreams.chain(routes).chain(budgets).collect()
}

fn problems(m: &Manifests) -> Vec<String> {
    m.problems.iter().map(ToString::to_string).collect()
}

/// A path as problems print it.
fn shown(path: &Path) -> String {
    path.display().to_string()
}

#[test]
fn a_directory_is_read_recursively_in_name_order_skipping_hidden_and_non_yaml_files() {
    let dir = TempDir::new();
    dir.write("b.yaml", upstream("b"));
    dir.write("a.yml", upstream("a"));
    dir.write("nested/deeper/c.yaml", upstream("c"));
    dir.write("nested/notes.txt", "not: [yaml");
    dir.write("README.md", "# not yaml");
    dir.write("routes.yaml.swp", "\u{0}binary");
    dir.write(".hidden.yaml", "not: [valid");
    dir.write(".git/config.yaml", upstream("from-a-hidden-directory"));
    let m = load_paths(std::slice::from_ref(&dir.0));
    assert_eq!(problems(&m), Vec::<String>::new());
    assert_eq!(names(&m), ["Upstream a", "Upstream b", "Upstream c"]);
}

#[cfg(unix)]
#[test]
fn a_mounted_configmap_is_read_once_through_its_symlinks() {
    use std::os::unix::fs::symlink;
    // The layout kubelet gives a ConfigMap volume: ..<timestamp>/ holds the files,
    // ..data points at it, and each key is a symlink through ..data.
    let dir = TempDir::new();
    dir.write("..2025_01_01_00_00_00.1/upstreams.yaml", upstream("mounted"));
    symlink("..2025_01_01_00_00_00.1", dir.0.join("..data")).expect("symlink");
    symlink("..data/upstreams.yaml", dir.0.join("upstreams.yaml")).expect("symlink");
    let m = load_paths(std::slice::from_ref(&dir.0));
    assert_eq!(problems(&m), Vec::<String>::new());
    assert_eq!(names(&m), ["Upstream mounted"]);
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_is_not_followed_forever() {
    let dir = TempDir::new();
    dir.write("sub/u.yaml", upstream("once"));
    std::os::unix::fs::symlink(&dir.0, dir.0.join("sub/loop")).expect("symlink");
    let m = load_paths(std::slice::from_ref(&dir.0));
    assert_eq!(problems(&m), Vec::<String>::new());
    assert_eq!(names(&m), ["Upstream once"]);
}

#[test]
fn a_multi_document_file_yields_every_document_numbered_in_problems() {
    let dir = TempDir::new();
    let text = format!(
        "# leading comment\n{}---\n---\n# a document of comments only\n---\n{}---\napiVersion: sluice.dev/v1alpha1\nkind: Upstream\nmetadata: {{name: bad}}\nspec: {{baseUrl: \"x\"}}\n...\n---\n{}",
        upstream("first"),
        upstream("second"),
        upstream("last")
    );
    let file = dir.write("all.yaml", text);
    let m = load_paths(std::slice::from_ref(&file));
    assert_eq!(names(&m), ["Upstream first", "Upstream second", "Upstream bad", "Upstream last"]);
    let resolved = resolve(&m, &common::all_secrets);
    assert_eq!(
        common::problems(&resolved),
        ["error: Upstream default/bad: spec.baseUrl: baseUrl must be an http:// or https:// URL with a host",]
    );
    // Loading problems name the file and the document, counting empty ones.
    let file2 = dir.write("broken.yaml", format!("{}---\n---\napiVersion: v1\n", upstream("ok")));
    let m = load_paths(std::slice::from_ref(&file2));
    assert_eq!(problems(&m), [format!("error: {} (document 3): apiVersion and kind are required", shown(&file2))]);
}

#[test]
fn paths_are_read_in_the_order_given_and_missing_ones_reported() {
    let one = TempDir::new();
    let two = TempDir::new();
    one.write("u.yaml", upstream("from-one"));
    let json = two.write("manifests.json", r#"{"apiVersion":"sluice.dev/v1alpha1","kind":"Upstream","metadata":{"name":"from-json"},"spec":{"baseUrl":"http://x"}}"#);
    let missing = two.0.join("nope.yaml");
    let m = load_paths(&[json, missing.clone(), one.0.clone()]);
    assert_eq!(
        names(&m),
        ["Upstream from-json", "Upstream from-one"],
        "a file named explicitly is read whatever its extension"
    );
    assert_eq!(problems(&m), [format!("error: {}: no such file or directory", shown(&missing))]);
}

#[test]
fn an_empty_directory_and_an_empty_file_are_no_problem() {
    let dir = TempDir::new();
    let empty = dir.write("sub/empty.yaml", "");
    std::fs::create_dir_all(dir.0.join("void")).expect("dir");
    let m = load_paths(&[dir.0.clone(), empty]);
    assert_eq!(m, Manifests::default());
}

#[test]
fn a_file_that_is_not_utf8_is_reported() {
    let dir = TempDir::new();
    let file = dir.write("latin1.yaml", b"metadata: {name: caf\xe9}\n");
    dir.write("ok.yaml", upstream("ok"));
    let m = load_paths(std::slice::from_ref(&dir.0));
    assert_eq!(names(&m), ["Upstream ok"]);
    assert_eq!(problems(&m), [format!("error: {}: cannot read: stream did not contain valid UTF-8", shown(&file))]);
}
