"""The embedding cache (docs/design.md §13) as the official `openai` SDK meets it: a
batch of 100 inputs asked again with 90 of them known sends only the 10 new ones
upstream and answers all 100 in order, billed for the 10; the same batch again is a hit
billed nothing; another account's identical batch is its own."""

from sluice_testsupport.poll import wait_for

from conftest import EMBED_MODEL, PRIMARY_EMBED

IN = 1_000  # nanodollars per input token on the test routes ($1.00 / 1M)


def _inputs_sent(chaos):
    return chaos.counters()["embedding_inputs"]


def _balance(gw, name):
    # Settled before the answer's last byte; only the idle balance grant stays reserved.
    return wait_for(f"{name}'s settlement", lambda: (a := gw.account(name))
                    and a["reserved_nanodollars"] == a["granted_nanodollars"] and a["balance_nanodollars"], 5.0,
                    interval=0.05)


def test_a_batch_with_90_known_inputs_sends_only_the_10_new_ones(keys_gateway, primary):
    client = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    first = [f"document number {i}" for i in range(100)]
    second = first[10:] + [f"a new document {i}" for i in range(10)]

    sent = _inputs_sent(primary)
    a = client.embeddings.create(model=EMBED_MODEL, input=first)
    assert _inputs_sent(primary) == sent + 100
    assert [d.index for d in a.data] == list(range(100))
    # The fake's vectors are made from each input: different inputs, different vectors.
    assert a.data[0].embedding != a.data[1].embedding

    balance = _balance(keys_gateway, "alice")
    raw = client.embeddings.with_raw_response.create(model=EMBED_MODEL, input=second)
    b = raw.parse()
    assert _inputs_sent(primary) == sent + 110, "exactly the 10 new inputs went upstream"
    assert raw.headers["x-sluice-cache"] == "miss"
    assert raw.headers["x-sluice-cache-hits"] == "90/100"
    assert [d.index for d in b.data] == list(range(100))
    assert all(len(d.embedding) == len(a.data[0].embedding) for d in b.data)
    # The known 90, in order, are the vectors the first answer gave them.
    assert [d.embedding for d in b.data[:90]] == [d.embedding for d in a.data[10:]]
    assert b.model == PRIMARY_EMBED
    # Billed for what went upstream: the 10 new inputs' tokens only.
    assert 0 < b.usage.prompt_tokens < a.usage.prompt_tokens / 5
    assert _balance(keys_gateway, "alice") == balance - b.usage.prompt_tokens * IN

    # All of it known: answered without the upstream, billed nothing.
    balance = _balance(keys_gateway, "alice")
    raw = client.embeddings.with_raw_response.create(model=EMBED_MODEL, input=second)
    c = raw.parse()
    assert raw.headers["x-sluice-cache"] == "hit"
    assert int(raw.headers["age"]) >= 0
    assert _inputs_sent(primary) == sent + 110
    assert [d.embedding for d in c.data] == [d.embedding for d in b.data]
    assert c.usage.prompt_tokens == 0
    assert _balance(keys_gateway, "alice") == balance


def test_accounts_do_not_share_entries_and_no_store_leaves_the_cache_alone(keys_gateway, primary):
    alice = keys_gateway.client(api_key=keys_gateway.keys["alice"], max_retries=0)
    poor = keys_gateway.client(api_key=keys_gateway.keys["poor"], max_retries=0)
    inputs = ["shared words", "more shared words"]
    alice.embeddings.create(model=EMBED_MODEL, input=inputs)
    sent = _inputs_sent(primary)
    raw = poor.embeddings.with_raw_response.create(model=EMBED_MODEL, input=inputs)
    assert raw.headers["x-sluice-cache"] == "miss", "one account read another's entries"
    assert _inputs_sent(primary) == sent + 2

    # no-store: neither read nor kept; no-cache: not read, but kept.
    sent = _inputs_sent(primary)
    raw = alice.embeddings.with_raw_response.create(model=EMBED_MODEL, input=["kept apart"],
                                                    extra_headers={"cache-control": "no-store"})
    assert raw.headers["x-sluice-cache"] == "bypass"
    raw = alice.embeddings.with_raw_response.create(model=EMBED_MODEL, input=["kept apart"],
                                                    extra_headers={"cache-control": "no-cache"})
    assert raw.headers["x-sluice-cache"] == "miss"
    raw = alice.embeddings.with_raw_response.create(model=EMBED_MODEL, input=["kept apart"])
    assert raw.headers["x-sluice-cache"] == "hit"
    assert _inputs_sent(primary) == sent + 2
