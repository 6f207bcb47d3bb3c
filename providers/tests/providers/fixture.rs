//! Fixture-driven translation tests: each case directory under
//! `tests/fixtures/<protocol>/<case>/` holds plain files, and every pair present is
//! checked:
//! - `request.json` (OpenAI, in) → `native_request.json` (`{path, headers, body}`);
//! - `response.json` (native 2xx body) → `completion.json` (OpenAI `chat.completion`);
//! - `response.sse` (native stream) → `openai.sse` (the OpenAI events, then a
//!   `# done` or `# error …` line).
//!
//! With `SLUICE_BLESS=1` a missing or different expected file is (re)written instead of
//! failing, to review in the diff.

use std::path::{Path, PathBuf};

use serde_json::Value;
use sluice_providers::{AnswerOpts, ChatRequest, Out, Protocol, Target, build, parse, transcoder};

pub fn opts() -> AnswerOpts {
    AnswerOpts { id: "chatcmpl-sluice".to_owned(), created: 1_700_000_000 }
}

/// The target every fixture of `protocol` is written for.
pub fn target(protocol: Protocol) -> Target<'static> {
    let model = match protocol {
        Protocol::OpenAi => "gpt-4o",
        Protocol::AzureOpenAi => "gpt-4o-prod",
        Protocol::Anthropic => "claude-sonnet-4-20250514",
        Protocol::VertexAnthropic => "claude-sonnet-4@20250514",
        Protocol::Gemini | Protocol::VertexGemini => "gemini-2.0-flash",
        Protocol::Bedrock => "anthropic.claude-3-5-sonnet-20240620-v1:0",
    };
    let mut t = Target::new(protocol, model, 1024);
    t.azure_api_version = Some("2024-10-21");
    t.gcp_project = Some("my-project");
    t.gcp_location = Some(if protocol == Protocol::VertexAnthropic { "us-east5" } else { "us-central1" });
    t
}

pub fn dir(protocol: Protocol) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(protocol.as_str())
}

pub fn read(protocol: Protocol, case: &str, file: &str) -> Vec<u8> {
    let path = dir(protocol).join(case).join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Feeds `bytes` split at `splits` (sorted offsets) and renders the outputs.
pub fn run_stream(protocol: Protocol, bytes: &[u8], splits: &[usize]) -> String {
    let mut t = transcoder(&target(protocol), opts());
    let mut outs = Vec::new();
    let mut at = 0;
    for &s in splits.iter().chain(std::iter::once(&bytes.len())) {
        outs.extend(t.feed(&bytes[at..s]));
        at = s;
    }
    outs.extend(t.finish());
    render(&outs)
}

/// The OpenAI bytes of `outs`, with `# done` / `# error …` lines for the non-event outputs.
pub fn render(outs: &[Out]) -> String {
    let mut s = String::new();
    for o in outs {
        match o {
            Out::Event { bytes, content } => {
                let text = std::str::from_utf8(bytes).unwrap();
                assert!(text.starts_with("data: ") && text.ends_with("\n\n"), "not one SSE event: {text:?}");
                // Mark the content events so the fixture shows where the stream commits.
                if *content {
                    s.push_str("# content\n");
                }
                s.push_str(text);
            }
            Out::Done => s.push_str("# done\n"),
            Out::Error { error, before_content } => s.push_str(&format!(
                "# error kind={:?} status={} before_content={before_content} retry_after={:?}\ndata: {}\n\n",
                error.kind,
                error.status,
                error.retry_after,
                std::str::from_utf8(&error.openai_body).unwrap()
            )),
        }
    }
    s
}

/// Every case of `protocol`; returns how many file pairs were checked.
pub fn check_all(protocol: Protocol) -> usize {
    let mut checked = 0;
    let mut cases: Vec<_> = std::fs::read_dir(dir(protocol)).unwrap().map(|e| e.unwrap().path()).collect();
    cases.sort();
    for case in cases.iter().filter(|p| p.is_dir()) {
        let name = case.file_name().unwrap().to_str().unwrap();
        if case.join("request.json").exists() {
            let req: ChatRequest = serde_json::from_slice(&read(protocol, name, "request.json")).unwrap();
            let native = build(&target(protocol), &req, req.stream == Some(true)).unwrap();
            let headers: serde_json::Map<String, Value> = native
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), Value::String(v.to_str().unwrap().to_owned())))
                .collect();
            let body: Value = serde_json::from_slice(&native.body).unwrap();
            let got = serde_json::json!({ "path": native.path, "headers": headers, "body": body });
            expect_json(&case.join("native_request.json"), &got);
            checked += 1;
        }
        if case.join("response.json").exists() {
            let got = parse(&target(protocol), &read(protocol, name, "response.json"), &opts())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            expect_json(&case.join("completion.json"), &serde_json::from_slice(&got.body).unwrap());
            checked += 1;
        }
        if case.join("response.sse").exists() {
            let got = run_stream(protocol, &read(protocol, name, "response.sse"), &[]);
            expect_text(&case.join("openai.sse"), &got);
            checked += 1;
        }
    }
    checked
}

fn bless() -> bool {
    std::env::var_os("SLUICE_BLESS").is_some()
}

fn expect_json(path: &Path, got: &Value) {
    let want: Option<Value> = std::fs::read(path).ok().map(|b| serde_json::from_slice(&b).unwrap());
    if want.as_ref() != Some(got) {
        assert!(bless(), "{} differs; got:\n{}", path.display(), serde_json::to_string_pretty(got).unwrap());
        std::fs::write(path, serde_json::to_string_pretty(got).unwrap() + "\n").unwrap();
    }
}

fn expect_text(path: &Path, got: &str) {
    let want = std::fs::read_to_string(path).ok();
    if want.as_deref() != Some(got) {
        assert!(bless(), "{} differs; got:\n{got}", path.display());
        std::fs::write(path, got).unwrap();
    }
}

/// Every native stream of `protocol`'s fixtures.
pub fn streams(protocol: Protocol) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir(protocol)).unwrap() {
        let p = e.unwrap().path().join("response.sse");
        if p.exists() {
            out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}
