"""Failover as the SDK sees it: the call succeeds, the backup served."""

import openai
import pytest

from conftest import BACKUP_CHAT, CHAT_MODEL

MESSAGES = [{"role": "user", "content": "Are you there?"}]


@pytest.mark.parametrize("status", [500, 502, 503, 504, 429, 408])
def test_retryable_primary_status_fails_over_to_backup(gateway, primary, backup, status):
    primary.script(status=status)
    p_before, b_before = primary.status_count(status), backup.status_count(200)
    # max_retries=0: the success is the gateway's doing, not an SDK retry.
    client = gateway.client(max_retries=0)

    raw = client.chat.completions.with_raw_response.create(model=CHAT_MODEL, messages=MESSAGES)

    assert raw.status_code == 200
    assert raw.headers["x-sluice-upstream"] == "backup"
    assert raw.headers["x-sluice-attempts"] == "2"
    expected = {429: "http_429"}.get(status, "http_5xx" if status >= 500 else "http_4xx")
    assert raw.headers["x-sluice-failover"] == expected
    completion = raw.parse()
    assert completion.model == BACKUP_CHAT
    assert completion.choices[0].message.content
    assert completion.usage.completion_tokens == 5
    assert primary.status_count(status) == p_before + 1
    assert backup.status_count(200) == b_before + 1


def test_non_retryable_4xx_is_passed_through_without_failover(gateway, primary, backup):
    primary.script(status=400, error_code="context_length_exceeded")
    b_before = backup.requests()
    client = gateway.client(max_retries=0)

    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model=CHAT_MODEL, messages=MESSAGES)
    assert err.value.status_code == 400
    assert err.value.code == "context_length_exceeded"  # the upstream's body, unchanged
    assert backup.requests() == b_before
