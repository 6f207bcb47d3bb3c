//! The translation work of one non-streamed Anthropic attempt, as the gateway does it
//! on the request path (docs/design.md §9): parse the client's OpenAI body, build the
//! Messages request, parse the answer back into a `chat.completion`. The request and
//! answer are those of `bench/run`'s translated route. `cargo bench -p sluice-providers`
//! prints ns per step; `SLUICE_BENCH_ITERS` sets the iterations (under callgrind, a
//! few thousand give instructions per step without the noise of a busy machine).

use std::hint::black_box;
use std::io::Write;
use std::time::Instant;

use sluice_providers::{AnswerOpts, ChatRequest, Protocol, Target};

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
}
