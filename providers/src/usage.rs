//! Token usage in OpenAI's accounting.

use serde::Serialize;
use serde_json::Value;

/// Token usage of one answer, normalised to OpenAI's accounting: `prompt_tokens`
/// INCLUDES cache reads and cache writes (Anthropic and Bedrock report them apart,
/// Gemini's `promptTokenCount` already includes its cached tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Cache reads, a subset of `prompt_tokens`.
    pub cached_tokens: u64,
    /// Cache writes, a subset of `prompt_tokens`.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// From Anthropic/Bedrock counts, whose `input` excludes cache reads and writes.
    pub fn from_exclusive(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        Self {
            prompt_tokens: input + cache_read + cache_write,
            completion_tokens: output,
            cached_tokens: cache_read,
            cache_write_tokens: cache_write,
        }
    }

    /// From OpenAI/Gemini counts, whose `prompt` already includes cache reads (and
    /// which report no cache writes).
    pub fn from_inclusive(prompt: u64, completion: u64, cached: u64) -> Self {
        Self { prompt_tokens: prompt, completion_tokens: completion, cached_tokens: cached, cache_write_tokens: 0 }
    }

    /// OpenAI's `usage` object. Cache writes have no OpenAI field; they are counted in
    /// `prompt_tokens` and, for the ledger, exposed as `prompt_tokens_details.cache_write_tokens`.
    pub fn to_openai(&self) -> Value {
        serde_json::to_value(self.openai()).unwrap_or_default()
    }

    /// From an OpenAI chat `usage` object as JSON (cache writes, when an upstream
    /// reports them, under `prompt_tokens_details.cache_write_tokens`).
    pub fn of_openai_json(u: &Value) -> Self {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let details = &u["prompt_tokens_details"];
        Self {
            prompt_tokens: n(&u["prompt_tokens"]),
            completion_tokens: n(&u["completion_tokens"]),
            cached_tokens: n(&details["cached_tokens"]),
            cache_write_tokens: n(&details["cache_write_tokens"]),
        }
    }

    /// [`Self::to_openai`] as a type, to serialise without a `Value`.
    pub(crate) fn openai(&self) -> OpenAiUsage {
        OpenAiUsage {
            completion_tokens: self.completion_tokens,
            prompt_tokens: self.prompt_tokens,
            prompt_tokens_details: Details {
                cache_write_tokens: self.cache_write_tokens,
                cached_tokens: self.cached_tokens,
            },
            total_tokens: self.prompt_tokens + self.completion_tokens,
        }
    }
}

/// OpenAI's `usage` object (members in alphabetical order, as a `Value` wrote them).
#[derive(Debug, Serialize)]
pub(crate) struct OpenAiUsage {
    completion_tokens: u64,
    prompt_tokens: u64,
    prompt_tokens_details: Details,
    total_tokens: u64,
}

#[derive(Debug, Serialize)]
struct Details {
    /// Only when there were cache writes.
    #[serde(skip_serializing_if = "is_zero")]
    cache_write_tokens: u64,
    cached_tokens: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}
