"""Non-streaming chat completions through the real `openai` SDK."""

from conftest import CACHED_MODEL, CHAT_MODEL, EMBED_MODEL, INSTRUCT_MODEL, PRIMARY_CHAT

MESSAGES = [{"role": "user", "content": "Say hello."}]
# What the chaos upstream answers with 5 content chunks (its default).
FIVE_WORDS = "The upstream said hello and "


def test_chat_completion_has_content_and_usage(gateway, primary):
    client = gateway.client()
    before = primary.requests()

    completion = client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)

    assert completion.object == "chat.completion"
    assert completion.model == PRIMARY_CHAT  # the id at the upstream that served
    assert len(completion.choices) == 1
    choice = completion.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content == FIVE_WORDS
    assert choice.finish_reason == "stop"
    usage = completion.usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens == 5
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert primary.requests() == before + 1


def test_raw_response_carries_sluice_headers(gateway):
    client = gateway.client()

    raw = client.chat.completions.with_raw_response.create(
        model=CHAT_MODEL,
        messages=MESSAGES,
        max_tokens=3,
        extra_headers={"x-request-id": "pytest-req-1"},
    )

    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "primary"
    assert raw.headers["x-sluice-attempts"] == "1"
    assert "x-sluice-failover" not in raw.headers
    assert raw.headers["x-request-id"] == "pytest-req-1"
    completion = raw.parse()
    # max_tokens is honoured upstream: 3 words, cut for length.
    assert completion.choices[0].message.content == "The upstream said "
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 3


def test_request_id_is_made_when_absent(gateway):
    raw = gateway.client().chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=MESSAGES)
    assert raw.headers["x-request-id"]


def test_models_list_names_the_routes(gateway):
    ids = sorted(m.id for m in gateway.client().models.list())
    assert ids == sorted([CHAT_MODEL, CACHED_MODEL, EMBED_MODEL, INSTRUCT_MODEL])
