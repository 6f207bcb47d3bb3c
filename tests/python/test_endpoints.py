"""Embeddings and legacy completions through the real `openai` SDK."""

import pytest

from conftest import BACKUP_EMBED, EMBED_MODEL, INSTRUCT_MODEL, PRIMARY_EMBED, PRIMARY_INSTRUCT


@pytest.mark.parametrize("encoding_format", [None, "float"], ids=["sdk-default", "float"])
def test_embeddings(gateway, encoding_format):
    client = gateway.client()
    kwargs = {} if encoding_format is None else {"encoding_format": encoding_format}

    raw = client.embeddings.with_raw_response.create(
        model=EMBED_MODEL, input=["first text", "second text", "third"], **kwargs
    )

    assert raw.headers["x-sluice-upstream"] == "primary"
    result = raw.parse()
    assert result.model == PRIMARY_EMBED
    assert [d.index for d in result.data] == [0, 1, 2]
    for d in result.data:
        assert d.object == "embedding"
        assert len(d.embedding) > 0
        assert all(isinstance(x, float) for x in d.embedding)
    assert result.usage.prompt_tokens > 0
    assert result.usage.total_tokens == result.usage.prompt_tokens


def test_embeddings_single_string_and_failover(gateway, primary):
    primary.script(status=502)
    raw = gateway.client(max_retries=0).embeddings.with_raw_response.create(model=EMBED_MODEL, input="just one")
    assert raw.headers["x-sluice-upstream"] == "backup"
    result = raw.parse()
    assert result.model == BACKUP_EMBED
    assert len(result.data) == 1


def test_legacy_completions(gateway):
    client = gateway.client()

    raw = client.completions.with_raw_response.create(model=INSTRUCT_MODEL, prompt="Once upon a time", max_tokens=4)

    assert raw.headers["x-sluice-upstream"] == "primary"
    assert raw.headers["x-sluice-attempts"] == "1"
    completion = raw.parse()
    assert completion.object == "text_completion"
    assert completion.model == PRIMARY_INSTRUCT
    assert completion.choices[0].text == "The upstream said hello "
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 4
    assert completion.usage.prompt_tokens > 0


def test_legacy_completions_prompt_list(gateway):
    completion = gateway.client().completions.create(model=INSTRUCT_MODEL, prompt=["a", "b"])
    assert completion.choices[0].text
