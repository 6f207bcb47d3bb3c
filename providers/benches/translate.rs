//! The translation work of one non-streamed Anthropic attempt, as the gateway does it
//! on the request path (docs/design.md §9): parse the client's OpenAI body, build the
//! Messages request, parse the answer back into a `chat.completion`; and the inbound
//! translations of docs/design.md §12 (a Messages or Responses request to chat, the
//! chat answer back), for a one-line request and for an agent's turn (a 30 KB system
//! prompt, tools, a tool call and its result). The request and
//! answer are those of `bench/run`'s translated route. `cargo bench -p sluice-providers`
//! prints ns per step; `SLUICE_BENCH_ITERS` sets the iterations (under callgrind, a
//! few thousand give instructions per step without the noise of a busy machine).

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use sluice_providers::{AnswerOpts, ChatRequest, Protocol, Target, ToChat};

const REQUEST: &[u8] = br#"{"model":"bench-claude","messages":[{"role":"user","content":"Say hello in one short sentence."}],"max_tokens":16}"#;

const ANSWER: &[u8] = br#"{"content":[{"text":"Hello! This is a chaos upstream answering your request.","type":"text"}],"id":"msg_chaos_1","model":"bench-claude","role":"assistant","stop_reason":"end_turn","stop_sequence":null,"type":"message","usage":{"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"input_tokens":12,"output_tokens":12}}"#;

fn time(out: &mut impl Write, name: &str, iters: u32, mut f: impl FnMut()) {
    for _ in 0..iters.min(1000) {
        f();
    }
    let start = Instant::now();
    for _ in 0..iters {
        f();
    }
    let per = start.elapsed().as_nanos() / u128::from(iters.max(1));
    let _ = writeln!(out, "{name:<40} {per:>8} ns");
}

const COMPLETION: &[u8] = br#"{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"bench-claude","choices":[{"index":0,"message":{"role":"assistant","content":"Hello! This is a chaos upstream answering your request."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":12,"total_tokens":24}}"#;

/// A Messages request and a Responses request the size of a coding agent's turn.
fn agent_requests() -> (Vec<u8>, Vec<u8>) {
    let prompt = "You are a coding agent. Follow the repository's conventions. ".repeat(500);
    let schema = serde_json::json!({"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]});
    let messages = serde_json::json!({
        "model": "bench-claude", "max_tokens": 4096, "stream": true,
        "system": [{"type": "text", "text": prompt, "cache_control": {"type": "ephemeral"}}],
        "tools": (0..8).map(|i| serde_json::json!({"name": format!("tool_{i}"), "description": "Runs a command.", "input_schema": schema})).collect::<Vec<_>>(),
        "messages": [
            {"role": "user", "content": "List the files."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "tool_0", "input": {"cmd": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt\nb.txt"}]},
        ],
    });
    let responses = serde_json::json!({
        "model": "bench-claude", "stream": true, "store": false, "include": ["reasoning.encrypted_content"],
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": prompt}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "List the files."}]},
            {"type": "function_call", "call_id": "call_1", "name": "tool_0", "arguments": "{\"cmd\":\"ls\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "a.txt\nb.txt"},
        ],
        "tools": (0..8).map(|i| serde_json::json!({"type": "function", "name": format!("tool_{i}"), "description": "Runs a command.", "parameters": schema})).collect::<Vec<_>>(),
    });
    (messages.to_string().into_bytes(), responses.to_string().into_bytes())
}

/// The inbound translations (docs/design.md §12).
fn inbound(out: &mut impl Write, iters: u32) {
    use sluice_providers::{messages, responses};
    const MESSAGES: &[u8] = br#"{"model":"bench-claude","max_tokens":16,"messages":[{"role":"user","content":"Say hello in one short sentence."}]}"#;
    const RESPONSES: &[u8] =
        br#"{"model":"bench-claude","max_output_tokens":16,"input":"Say hello in one short sentence."}"#;
    let (agent_messages, agent_responses) = agent_requests();
    let ids = responses::ResponseIds {
        id: "resp_0123456789abcdef".into(),
        model: "bench-claude".into(),
        created: 1_764_547_200,
        namespaces: Vec::new(),
    };
    time(out, "Messages request to chat", iters, || {
        black_box(messages::to_chat(black_box(MESSAGES), ToChat::default()).is_ok());
    });
    time(out, "Messages agent turn to chat", iters / 20, || {
        black_box(messages::to_chat(black_box(&agent_messages), ToChat::default()).is_ok());
    });
    time(out, "chat answer to a Messages message", iters, || {
        black_box(messages::message_of_completion(black_box(COMPLETION), "msg_1", "bench-claude").is_ok());
    });
    time(out, "Responses request to chat", iters, || {
        black_box(responses::to_chat(black_box(RESPONSES), ToChat::default()).is_ok());
    });
    time(out, "Responses agent turn to chat", iters / 20, || {
        black_box(responses::to_chat(black_box(&agent_responses), ToChat::default()).is_ok());
    });
    time(out, "chat answer to a Responses response", iters, || {
        black_box(responses::response_of_completion(black_box(COMPLETION), &ids).is_ok());
    });
    // What a translated Responses attempt adds on the request path: to chat, then the
    // candidate's own build (here Anthropic's), then the answer back.
    let target = Target::new(Protocol::Anthropic, "bench-claude", 4096);
    let opts = AnswerOpts { id: "chatcmpl-0123456789abcdef".to_owned(), created: 1_764_547_200 };
    time(out, "Responses to Anthropic and back (attempt)", iters, || {
        let Ok(t) = responses::to_chat(black_box(RESPONSES), ToChat::default()) else { return };
        let Ok(chat) = serde_json::from_slice::<ChatRequest>(&t.body) else { return };
        black_box(sluice_providers::build(&target, &chat, false).is_ok());
        let Ok(c) = sluice_providers::parse(&target, black_box(ANSWER), &opts) else { return };
        black_box(responses::response_of_completion(&c.body, &ids).is_ok());
    });
}

fn main() {
    let iters: u32 = std::env::var("SLUICE_BENCH_ITERS").ok().and_then(|v| v.parse().ok()).unwrap_or(200_000);
    let mut out = std::io::stdout().lock();
    let target = Target::new(Protocol::Anthropic, "bench-claude", 4096);
    let opts = AnswerOpts { id: "chatcmpl-0123456789abcdef".to_owned(), created: 1_764_547_200 };
    let Ok(chat) = serde_json::from_slice::<ChatRequest>(REQUEST) else {
        eprintln!("the bench request does not parse");
        std::process::exit(1);
    };
    time(&mut out, "parse the OpenAI request", iters, || {
        let r = serde_json::from_slice::<ChatRequest>(black_box(REQUEST));
        black_box(r.is_ok());
    });
    time(&mut out, "build the Messages request", iters, || {
        let r = sluice_providers::build(&target, black_box(&chat), false);
        black_box(r.is_ok());
    });
    time(&mut out, "parse the Messages answer", iters, || {
        let r = sluice_providers::parse(&target, black_box(ANSWER), &opts);
        black_box(r.is_ok());
    });
    time(&mut out, "all three (one attempt)", iters, || {
        let Ok(chat) = serde_json::from_slice::<ChatRequest>(black_box(REQUEST)) else {
            return;
        };
        let r = sluice_providers::build(&target, &chat, false);
        black_box(r.is_ok());
        let r = sluice_providers::parse(&target, black_box(ANSWER), &opts);
        black_box(r.is_ok());
    });
    inbound(&mut out, iters);
}
