//! What an upstream's answer used, as the gateway reads it from the answer (a whole
//! body or a stream's events, in any inbound API's format) and prices it: the one usage
//! billing, limits, traces and resume add up (docs/design.md §5).

use serde::Deserialize;
use sluice_crds::snapshot::Metered;

/// Token usage reported by an upstream, in OpenAI's accounting: `prompt_tokens`
/// includes cache reads (`prompt_tokens_details.cached_tokens`) and cache writes
/// (`prompt_tokens_details.cache_write_tokens`, which sluice's translation of Anthropic
/// and Bedrock answers reports), so that each is priced apart.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    /// Input tokens, cache reads and writes included.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub completion_tokens: u64,
    /// Where the input tokens came from.
    #[serde(default, deserialize_with = "null_as_default")]
    pub prompt_tokens_details: PromptDetails,
    /// The provider's own tools it ran (web searches), billed per use.
    #[serde(default, deserialize_with = "null_as_default")]
    pub server_tool_use: ServerToolUse,
}

/// What a provider ran for an answer and bills per use, in Anthropic's words (which
/// sluice's chat usage carries too, docs/design.md §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerToolUse {
    /// Web searches.
    #[serde(default)]
    pub web_search_requests: u64,
}

/// The cache part of `prompt_tokens`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct PromptDetails {
    /// Read from the provider's prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Written to it.
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Plain input and output tokens, nothing cached.
    pub fn plain(prompt_tokens: u64, completion_tokens: u64) -> Self {
        Self { prompt_tokens, completion_tokens, ..Self::default() }
    }

    /// The quantities a price has: uncached input, cache reads and writes, output, and
    /// web searches.
    pub fn metered(&self) -> Metered {
        let PromptDetails { cached_tokens, cache_write_tokens } = self.prompt_tokens_details;
        // A provider that reports more cached than prompt tokens is not trusted for the split.
        let cached = cached_tokens.min(self.prompt_tokens);
        let written = cache_write_tokens.min(self.prompt_tokens - cached);
        Metered {
            input_uncached: self.prompt_tokens - cached - written,
            cache_read: cached,
            cache_write: written,
            output: self.completion_tokens,
            web_searches: self.server_tool_use.web_search_requests,
        }
    }
}

impl From<sluice_providers::Usage> for Usage {
    fn from(u: sluice_providers::Usage) -> Self {
        Self {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
            prompt_tokens_details: PromptDetails {
                cached_tokens: u.cached_tokens,
                cache_write_tokens: u.cache_write_tokens,
            },
            server_tool_use: ServerToolUse { web_search_requests: u.web_searches },
        }
    }
}

fn null_as_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}
