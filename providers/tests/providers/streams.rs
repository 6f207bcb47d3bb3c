//! Every native stream fixture gives the same OpenAI output however its bytes are
//! split: at every single byte boundary, and at random multi-splits.

use proptest::prelude::*;
use sluice_providers::Protocol;

use crate::fixture::{run_stream, streams};

const PROTOCOLS: [Protocol; 6] = [
    Protocol::Anthropic,
    Protocol::VertexAnthropic,
    Protocol::Gemini,
    Protocol::VertexGemini,
    Protocol::OpenAi,
    Protocol::AzureOpenAi,
];

fn all_streams() -> Vec<(Protocol, String, Vec<u8>)> {
    PROTOCOLS.iter().flat_map(|&p| streams(p).into_iter().map(move |(name, bytes)| (p, name, bytes))).collect()
}

#[test]
fn native_streams_split_at_every_byte_give_the_same_output() {
    let all = all_streams();
    assert!(all.len() >= 12, "fixtures missing: {}", all.len());
    for (protocol, name, bytes) in all {
        let whole = run_stream(protocol, &bytes, &[]);
        for at in 0..=bytes.len() {
            assert_eq!(run_stream(protocol, &bytes, &[at]), whole, "{name} split at {at}");
        }
        // And fed one byte at a time.
        let every: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(run_stream(protocol, &bytes, &every), whole, "{name} byte by byte");
    }
}

proptest! {
    #[test]
    fn native_streams_split_anywhere_give_the_same_output(seed in proptest::collection::vec(any::<u16>(), 1..12)) {
        for (protocol, name, bytes) in all_streams() {
            let mut splits: Vec<usize> = seed.iter().map(|&s| usize::from(s) % (bytes.len() + 1)).collect();
            splits.sort_unstable();
            prop_assert_eq!(run_stream(protocol, &bytes, &splits), run_stream(protocol, &bytes, &[]), "{}", name);
        }
    }
}
