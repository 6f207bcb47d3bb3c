//! The chaos script: which faults to inject, as written by users.
//!
//! A [`Script`] comes from `x-chaos-*` request headers or from the JSON body
//! of `POST /_chaos` (same fields, snake_case, without the prefix). Every field
//! is optional; a header script is laid [`over`](Script::over) the default one
//! field by field. Parsing and [`validate`](Script::validate) name the
//! offending field (`fail_rate: …`) or header (`x-chaos-fail-rate: …`).

// A little over 400 lines, a third of them unit tests: the one declaration of the
// fields (the macro), their parser, validation and layering stay in one file so that
// they cannot disagree.

use http::HeaderMap;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Prefix of every chaos request header.
pub const HEADER_PREFIX: &str = "x-chaos-";

/// Upper bound of `chunks`, so a typo cannot stream for hours.
const MAX_CHUNKS: u32 = 100_000;
/// Upper bound of every `*_ms` field: one day.
const MAX_MS: u64 = 86_400_000;
/// Upper bound of `retry_after`: one day in seconds.
const MAX_RETRY_AFTER_S: u64 = 86_400;

/// Declares [`Script`] once, so that its fields, the JSON/header parser and
/// the layering can never disagree.
macro_rules! script {
    ($( $(#[doc = $doc:literal])* $name:ident : $ty:ty, )*) => {
        /// A chaos script: each field that is set changes how requests are
        /// answered (docs/design.md §6). `{}` means a healthy, instant provider.
        #[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Script {
            $(
                $(#[doc = $doc])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $name: Option<$ty>,
            )*
        }

        impl Script {
            /// Field names, as used in JSON (headers use `-` and the prefix).
            pub const FIELDS: &'static [&'static str] = &[$(stringify!($name)),*];

            /// Sets one field from a JSON value; `null` unsets it.
            fn set(&mut self, field: &str, value: Value) -> Result<(), String> {
                match field {
                    $(stringify!($name) => {
                        self.$name = serde_json::from_value(value).map_err(|e| e.to_string())?;
                    })*
                    _ => return Err(format!(
                        "unknown field, expected one of: {}",
                        Self::FIELDS.join(", ")
                    )),
                }
                Ok(())
            }

            /// This script laid over `base`: a field set here wins.
            #[must_use]
            pub fn over(self, base: &Script) -> Script {
                Script { $($name: self.$name.or_else(|| base.$name.clone()),)* }
            }
        }
    };
}

script! {
    /// HTTP status to answer with; 400..=599 answers an error in the
    /// protocol's shape (only to a tool result with `fail_on_tool_result`),
    /// anything below 400 a normal answer with that status.
    status: u16,
    /// The error's name: OpenAI `error.code` (e.g. `context_length_exceeded`),
    /// Anthropic `error.type`, Google `status`, Bedrock exception (e.g.
    /// `ThrottlingException`); it also names the in-stream error.
    error_code: String,
    /// Delay before the response headers (non-streaming) or before the first
    /// SSE event (streaming: `200` headers are sent at once).
    first_byte_ms: u64,
    /// Delay before the response headers, streams included.
    headers_first_byte_ms: u64,
    /// Number of content chunks (and completion tokens); default 5.
    chunks: u32,
    /// Gap between two content chunks of a stream; default 0.
    chunk_ms: u64,
    /// Accept the request and never answer, until the client goes away.
    hang: bool,
    /// Send this many content chunks, then stall forever.
    hang_after_chunks: u32,
    /// 0: reset the connection before headers; N: after N content chunks.
    reset_after_chunks: u32,
    /// `Retry-After` (seconds) on error responses.
    retry_after: u64,
    /// `retry-after-ms` on error responses.
    retry_after_ms: u64,
    /// The Nth SSE event (from 1) is `data: {not json` instead of a chunk.
    malformed_chunk: u32,
    /// End a stream cleanly without `data: [DONE]`.
    no_done: bool,
    /// Keep a stream's body open this long after its last event before ending it
    /// (an upstream slow to close; a client that stops reading at `[DONE]` and drops
    /// the body loses the connection).
    end_ms: u64,
    /// Fraction (0..=1) of requests that fail with `status` (or 503).
    fail_rate: f64,
    /// A stream sends this many content chunks, then the protocol's in-stream
    /// error event (0: before any content) and ends.
    error_after_chunks: u32,
    /// When the request declares a tool of this name (case-sensitive), answer
    /// with a call to it, unless the request's last turn carries a tool
    /// result: that is answered in text, as a model does once its tool answered.
    tool_call: String,
    /// The tool call's arguments, the text of a JSON object (`{"path": "a.txt"}`),
    /// split across the content chunks; unset: `{"query": "<the answer's words>"}`.
    tool_arguments: String,
    /// Only a request whose last turn carries a tool result fails, with
    /// `status` (or 503; at `fail_rate` if set); others are answered normally:
    /// a provider that fails mid-conversation.
    fail_on_tool_result: bool,
    /// Refuse a trailing assistant message (a prefill to continue) with the
    /// protocol's 400, as a model that cannot continue a turn does.
    refuse_prefill: bool,
    /// Prompt tokens reported as read from the provider's prompt cache.
    cache_read_tokens: u64,
    /// Prompt tokens reported as written to the provider's prompt cache.
    cache_write_tokens: u64,
}

/// A script that could not be parsed or validated.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScriptError {
    /// The `POST /_chaos` body is not a JSON object.
    #[error("invalid chaos script: {0}")]
    Json(String),
    /// One field or header is unknown or has a bad value; `path` names it.
    #[error("{path}: {message}")]
    Field {
        /// `fail_rate` for JSON, `x-chaos-fail-rate` for headers.
        path: String,
        /// What is wrong with it.
        message: String,
    },
}

/// Where a script came from, to name fields the way the user wrote them.
#[derive(Clone, Copy)]
enum Origin {
    Json,
    Header,
}

impl Script {
    /// Parses and validates a `POST /_chaos` body; an empty body is `{}`.
    pub fn from_json(body: &[u8]) -> Result<Script, ScriptError> {
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Script::default());
        }
        let map: Map<String, Value> = serde_json::from_slice(body).map_err(|e| ScriptError::Json(e.to_string()))?;
        let mut script = Script::default();
        for (field, value) in map {
            // `tool_arguments` may be given as the object itself, not only as its text.
            let value = match value {
                Value::Object(args) if field == "tool_arguments" => Value::String(Value::Object(args).to_string()),
                value => value,
            };
            script.set(&field, value).map_err(|message| ScriptError::Field { path: field.clone(), message })?;
        }
        script.validate_as(Origin::Json)?;
        Ok(script)
    }

    /// Reads the `x-chaos-*` headers; `None` when there are none (the fast
    /// path, which allocates nothing). Values are JSON scalars (`503`,
    /// `true`, `0.5`); `x-chaos-error-code`, `x-chaos-tool-call` and
    /// `x-chaos-tool-arguments` are taken verbatim, the last as UTF-8 (other
    /// values must be visible ASCII).
    pub fn from_headers(headers: &HeaderMap) -> Result<Option<Script>, ScriptError> {
        let mut script: Option<Script> = None;
        for (name, value) in headers {
            let Some(suffix) = name.as_str().strip_prefix(HEADER_PREFIX) else {
                continue;
            };
            let bad = |message: String| ScriptError::Field { path: name.as_str().to_owned(), message };
            let Some(field) = Self::FIELDS.iter().find(|f| same_name(f, suffix)) else {
                let known: Vec<String> = Self::FIELDS.iter().map(|f| header_name(f)).collect();
                return Err(bad(format!("unknown chaos header, expected one of: {}", known.join(", "))));
            };
            let raw = match *field {
                // JSON text, which may hold any UTF-8 (a path with an accent), sent raw.
                "tool_arguments" => {
                    std::str::from_utf8(value.as_bytes()).map_err(|_| bad("value is not UTF-8".to_owned()))
                }
                _ => value.to_str().map_err(|_| bad("value is not visible ASCII".to_owned())),
            }?
            .trim();
            let value = if matches!(*field, "error_code" | "tool_call" | "tool_arguments") {
                Value::String(raw.to_owned())
            } else {
                serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_owned()))
            };
            script.get_or_insert_default().set(field, value).map_err(bad)?;
        }
        if let Some(script) = &script {
            script.validate_as(Origin::Header)?;
        }
        Ok(script)
    }

    /// Checks ranges; the error names the JSON field.
    pub fn validate(&self) -> Result<(), ScriptError> {
        self.validate_as(Origin::Json)
    }

    fn validate_as(&self, origin: Origin) -> Result<(), ScriptError> {
        self.check().map_err(|(field, message)| ScriptError::Field {
            path: match origin {
                Origin::Json => field.to_owned(),
                Origin::Header => header_name(field),
            },
            message,
        })
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(s) = self.status
            && !(200..=599).contains(&s)
        {
            return Err(("status", format!("must be from 200 to 599, got {s}")));
        }
        if let Some(code) = &self.error_code
            && (code.is_empty() || code.len() > 64 || !code.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
        {
            return Err(("error_code", format!("must be 1 to 64 letters, digits or '_', got {code:?}")));
        }
        if let Some(name) = &self.tool_call
            && (name.is_empty()
                || name.len() > 64
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'))
        {
            return Err(("tool_call", format!("must be 1 to 64 letters, digits, '_' or '-', got {name:?}")));
        }
        if let Some(args) = &self.tool_arguments
            && !serde_json::from_str::<Value>(args).is_ok_and(|v| v.is_object())
        {
            return Err(("tool_arguments", format!("must be the text of a JSON object, got {args:?}")));
        }
        let ms_fields = [
            ("first_byte_ms", self.first_byte_ms),
            ("headers_first_byte_ms", self.headers_first_byte_ms),
            ("chunk_ms", self.chunk_ms),
            ("end_ms", self.end_ms),
            ("retry_after_ms", self.retry_after_ms),
        ];
        for (field, ms) in ms_fields {
            if let Some(ms) = ms
                && ms > MAX_MS
            {
                return Err((field, format!("must be at most {MAX_MS} (one day), got {ms}")));
            }
        }
        if let Some(s) = self.retry_after
            && s > MAX_RETRY_AFTER_S
        {
            let msg = format!("must be at most {MAX_RETRY_AFTER_S} seconds, got {s}");
            return Err(("retry_after", msg));
        }
        if let Some(n) = self.chunks
            && n > MAX_CHUNKS
        {
            return Err(("chunks", format!("must be at most {MAX_CHUNKS}, got {n}")));
        }
        if self.malformed_chunk == Some(0) {
            let msg = "must be at least 1 (SSE events are numbered from 1)".to_owned();
            return Err(("malformed_chunk", msg));
        }
        if let Some(r) = self.fail_rate
            && !(0.0..=1.0).contains(&r)
        {
            return Err(("fail_rate", format!("must be from 0 to 1, got {r}")));
        }
        Ok(())
    }
}

/// `x-chaos-fail-rate` for `fail_rate`.
fn header_name(field: &str) -> String {
    format!("{HEADER_PREFIX}{}", field.replace('_', "-"))
}

/// Whether a header suffix (`fail-rate`) names a field (`fail_rate`).
fn same_name(field: &str, suffix: &str) -> bool {
    field.len() == suffix.len() && field.bytes().zip(suffix.bytes()).all(|(f, s)| f == s || (f == b'_' && s == b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, HeaderValue::from_static(v));
        }
        map
    }

    #[test]
    fn json_round_trips_and_resets() {
        let body = br#"{"status":503,"first_byte_ms":100,"chunks":5,"chunk_ms":20,
            "hang":false,"reset_after_chunks":null,"retry_after":1,"fail_rate":0.5}"#;
        let s = Script::from_json(body).unwrap();
        assert_eq!(s.status, Some(503));
        assert_eq!(s.reset_after_chunks, None);
        assert_eq!(s.fail_rate, Some(0.5));
        let again = Script::from_json(&serde_json::to_vec(&s).unwrap()).unwrap();
        assert_eq!(again, s);
        assert_eq!(Script::from_json(b"{}").unwrap(), Script::default());
        assert_eq!(Script::from_json(b"").unwrap(), Script::default());
    }

    #[test]
    fn json_errors_name_the_field() {
        let err = Script::from_json(br#"{"statuss":503}"#).unwrap_err();
        assert!(err.to_string().starts_with("statuss: unknown field, expected one of: status, error_code,"));
        let err = Script::from_json(br#"{"chunks":"many"}"#).unwrap_err();
        assert_eq!(err.to_string(), r#"chunks: invalid type: string "many", expected u32"#);
        let err = Script::from_json(br#"{"fail_rate":1.5}"#).unwrap_err();
        assert_eq!(err.to_string(), "fail_rate: must be from 0 to 1, got 1.5");
        let err = Script::from_json(b"[1]").unwrap_err();
        assert!(matches!(err, ScriptError::Json(_)), "{err}");
    }

    #[test]
    fn headers_parse_and_name_the_header() {
        assert_eq!(Script::from_headers(&headers(&[("accept", "x")])).unwrap(), None);
        let s = Script::from_headers(&headers(&[
            ("x-chaos-status", "400"),
            ("x-chaos-error-code", "context_length_exceeded"),
            ("x-chaos-hang", "true"),
            ("x-chaos-fail-rate", "0.25"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.status, Some(400));
        assert_eq!(s.error_code.as_deref(), Some("context_length_exceeded"));
        assert_eq!(s.hang, Some(true));
        assert_eq!(s.fail_rate, Some(0.25));

        let err = Script::from_headers(&headers(&[("x-chaos-status", "99")])).unwrap_err();
        assert_eq!(err.to_string(), "x-chaos-status: must be from 200 to 599, got 99");
        let err = Script::from_headers(&headers(&[("x-chaos-chunks", "abc")])).unwrap_err();
        assert_eq!(err.to_string(), r#"x-chaos-chunks: invalid type: string "abc", expected u32"#);
        let s = Script::from_headers(&headers(&[
            ("x-chaos-tool-call", "get_weather"),
            ("x-chaos-error-after-chunks", "0"),
            ("x-chaos-cache-read-tokens", "7"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.tool_call.as_deref(), Some("get_weather"));
        assert_eq!((s.error_after_chunks, s.cache_read_tokens), (Some(0), Some(7)));
        let err = Script::from_headers(&headers(&[("x-chaos-tool-call", "a b")])).unwrap_err();
        assert!(err.to_string().starts_with("x-chaos-tool-call: must be"), "{err}");
        let err = Script::from_headers(&headers(&[("x-chaos-bogus", "1")])).unwrap_err();
        assert!(err.to_string().starts_with("x-chaos-bogus: unknown chaos header"));
    }

    #[test]
    fn tool_arguments_must_be_a_json_object() {
        let s = Script::from_json(br#"{"tool_arguments":"{\"path\": \"a.txt\"}","fail_on_tool_result":true}"#).unwrap();
        assert_eq!(s.tool_arguments.as_deref(), Some(r#"{"path": "a.txt"}"#), "kept verbatim");
        assert_eq!(s.fail_on_tool_result, Some(true));
        // The object itself is taken too, as its text.
        let s = Script::from_json(br#"{"tool_arguments":{"command":["ls"]}}"#).unwrap();
        assert_eq!(s.tool_arguments.as_deref(), Some(r#"{"command":["ls"]}"#));
        let err = Script::from_json(br#"{"tool_arguments":"[1]"}"#).unwrap_err();
        assert_eq!(err.to_string(), r#"tool_arguments: must be the text of a JSON object, got "[1]""#);
        let err = Script::from_json(br#"{"tool_arguments":"{\"a\":"}"#).unwrap_err();
        assert!(err.to_string().starts_with("tool_arguments: must be the text of a JSON object"), "{err}");
        let err = Script::from_json(br#"{"fail_on_tool_result":"yes"}"#).unwrap_err();
        assert_eq!(err.to_string(), r#"fail_on_tool_result: invalid type: string "yes", expected a boolean"#);

        let s = Script::from_headers(&headers(&[
            ("x-chaos-tool-arguments", r#" {"command": ["ls", "-l"], "n": 1} "#),
            ("x-chaos-fail-on-tool-result", "true"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(s.tool_arguments.as_deref(), Some(r#"{"command": ["ls", "-l"], "n": 1}"#));
        assert_eq!(s.fail_on_tool_result, Some(true));
        // Verbatim: a JSON string is not unquoted into an object.
        let err = Script::from_headers(&headers(&[("x-chaos-tool-arguments", r#""{}""#)])).unwrap_err();
        assert_eq!(err.to_string(), r#"x-chaos-tool-arguments: must be the text of a JSON object, got "\"{}\"""#);
        let mut map = HeaderMap::new();
        map.insert("x-chaos-tool-arguments", HeaderValue::from_bytes("{\"path\": \"é.rs\"}".as_bytes()).unwrap());
        let s = Script::from_headers(&map).unwrap().unwrap();
        assert_eq!(s.tool_arguments.as_deref(), Some(r#"{"path": "é.rs"}"#), "UTF-8, as sent");
        let err = Script::from_headers(&headers(&[("x-chaos-tool-arguments", "7")])).unwrap_err();
        assert!(err.to_string().starts_with("x-chaos-tool-arguments: must be"), "{err}");
    }

    #[test]
    fn header_script_wins_over_default() {
        let default = Script { status: Some(503), chunks: Some(9), ..Script::default() };
        let header = Script { status: Some(200), ..Script::default() };
        let merged = header.over(&default);
        assert_eq!(merged.status, Some(200));
        assert_eq!(merged.chunks, Some(9));
    }
}
