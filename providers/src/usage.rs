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
    /// Web searches the provider ran and bills apart (Anthropic's
    /// `server_tool_use.web_search_requests`, a Responses answer's `web_search_call` items).
    pub web_searches: u64,
}

impl Usage {
    /// From Anthropic/Bedrock counts, whose `input` excludes cache reads and writes.
    pub fn from_exclusive(input: u64, output: u64, cache_read: u64, cache_write: u64) -> Self {
        Self {
            prompt_tokens: input + cache_read + cache_write,
            completion_tokens: output,
            cached_tokens: cache_read,
            cache_write_tokens: cache_write,
            web_searches: 0,
        }
    }

    /// From OpenAI/Gemini counts, whose `prompt` already includes cache reads (and
    /// which report no cache writes).
    pub fn from_inclusive(prompt: u64, completion: u64, cached: u64) -> Self {
        Self {
            prompt_tokens: prompt,
            completion_tokens: completion,
            cached_tokens: cached,
            cache_write_tokens: 0,
            web_searches: 0,
        }
    }

    /// OpenAI's `usage` object. Cache writes and web searches have no OpenAI field: cache
    /// writes are counted in `prompt_tokens` and, for the ledger, exposed as
    /// `prompt_tokens_details.cache_write_tokens`; searches as Anthropic names them,
    /// `server_tool_use.web_search_requests` (both only when there are some).
    pub fn to_openai(&self) -> Value {
        serde_json::to_value(self.openai()).unwrap_or_default()
    }

    /// From an OpenAI chat `usage` object as JSON (cache writes and searches, when an
    /// upstream reports them, as [`Self::to_openai`] writes them).
    pub fn of_openai_json(u: &Value) -> Self {
        let n = |v: &Value| v.as_u64().unwrap_or(0);
        let details = &u["prompt_tokens_details"];
        Self {
            prompt_tokens: n(&u["prompt_tokens"]),
            completion_tokens: n(&u["completion_tokens"]),
            cached_tokens: n(&details["cached_tokens"]),
            cache_write_tokens: n(&details["cache_write_tokens"]),
            web_searches: n(&u["server_tool_use"]["web_search_requests"]),
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
            server_tool_use: (self.web_searches > 0)
                .then_some(ServerToolUse { web_search_requests: self.web_searches }),
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
    #[serde(skip_serializing_if = "Option::is_none")]
    server_tool_use: Option<ServerToolUse>,
    total_tokens: u64,
}

/// The searches of an answer, in Anthropic's words.
#[derive(Debug, Serialize)]
struct ServerToolUse {
    web_search_requests: u64,
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
