"""The chaos fakes checked by the providers' official clients: a fake only our own code
understands proves nothing. One chaos upstream that checks credentials as the providers
do (`CHAOS_CREDENTIALS`) is driven by the `anthropic` SDK (direct and on Vertex AI),
botocore's `bedrock-runtime` client, google-auth, the `openai` SDK's Azure client and
`google-genai`, each plain, streamed and failing."""

from __future__ import annotations

import json

import anthropic
import boto3
import botocore.config
import botocore.exceptions
import google.auth.exceptions
import google.auth.transport.requests
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types
from google.oauth2 import service_account
from sluice_testsupport.chaos import Chaos

from conftest import (API_KEY, AWS_KEY_ID, AWS_REGION, AWS_SECRET, GCP_LOCATION, GCP_PROJECT,
                      sa_key_for, start_credentialed_chaos)

CLAUDE = "claude-opus-4-20250514"
TOOL = {"name": "lookup", "description": "Looks a word up.",
        "input_schema": {"type": "object", "properties": {"query": {"type": "string"}}}}
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def upstream(tmp_path_factory) -> Chaos:
    c = start_credentialed_chaos("official", tmp_path_factory.mktemp("official"))
    try:
        yield c
    finally:
        c.proc.stop()


@pytest.fixture(autouse=True)
def healthy(upstream):
    upstream.reset()
    yield
    upstream.reset()


# ---------------------------------------------------------------- Anthropic


def claude(upstream: Chaos, api_key: str = API_KEY) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=upstream.url, api_key=api_key, max_retries=0, timeout=20.0)


def test_anthropic_sdk_reads_a_message_and_its_stream(upstream):
    client = claude(upstream)
    message = client.messages.create(model=CLAUDE, max_tokens=64, messages=HELLO)
    assert message.type == "message" and message.role == "assistant"
    assert message.model == CLAUDE
    assert message.stop_reason == "end_turn"
    [block] = message.content
    assert block.type == "text" and block.text
    assert message.usage.input_tokens > 0 and message.usage.output_tokens > 0

    with client.messages.stream(model=CLAUDE, max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == block.text
    assert final.stop_reason == "end_turn"
    assert final.content[0].text == text
    assert final.usage.output_tokens > 0


def test_anthropic_sdk_reads_a_tool_use_plain_and_streamed(upstream):
    upstream.script(tool_call="lookup")
    client = claude(upstream)
    message = client.messages.create(model=CLAUDE, max_tokens=64, messages=HELLO, tools=[TOOL])
    assert message.stop_reason == "tool_use"
    [call] = message.content
    assert call.type == "tool_use" and call.name == "lookup" and call.id
    assert isinstance(call.input, dict) and "query" in call.input

    # The SDK accumulates the `input_json_delta` pieces into the same input.
    with client.messages.stream(model=CLAUDE, max_tokens=64, messages=HELLO, tools=[TOOL]) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [streamed] = final.content
    assert streamed.type == "tool_use" and streamed.name == "lookup"
    assert streamed.input == call.input


def test_anthropic_sdk_refuses_a_wrong_key_and_names_an_overload(upstream):
    with pytest.raises(anthropic.AuthenticationError) as denied:
        claude(upstream, api_key="sk-wrong").messages.create(model=CLAUDE, max_tokens=8, messages=HELLO)
    assert denied.value.status_code == 401

    upstream.script(status=529)
    with pytest.raises(anthropic.APIStatusError) as overloaded:
        claude(upstream).messages.create(model=CLAUDE, max_tokens=8, messages=HELLO)
    assert overloaded.value.status_code == 529
    assert overloaded.value.body["error"]["type"] == "overloaded_error"
    assert isinstance(overloaded.value, anthropic.InternalServerError)


def test_anthropic_sdk_raises_on_an_error_event_in_the_stream(upstream):
    upstream.script(error_after_chunks=2)
    seen = []
    with pytest.raises(anthropic.APIStatusError) as broken:
        with claude(upstream).messages.stream(model=CLAUDE, max_tokens=64, messages=HELLO) as stream:
            for piece in stream.text_stream:
                seen.append(piece)
    assert len(seen) == 2, seen
    assert "overloaded" in str(broken.value).lower()


# ---------------------------------------------------------------- Google auth and Vertex AI


def google_token(upstream: Chaos) -> str:
    """An access token for the test-only key, from chaos's `/token`, as google-auth gets it."""
    creds = service_account.Credentials.from_service_account_info(
        sa_key_for(upstream.url), scopes=["https://www.googleapis.com/auth/cloud-platform"])
    assert not creds.valid
    creds.refresh(google.auth.transport.requests.Request())
    assert creds.valid and creds.token and creds.expiry is not None
    return creds.token


def test_google_auth_gets_a_token_for_the_service_account_and_a_foreign_key_is_refused(upstream):
    assert google_token(upstream)
    # The same key under another email: chaos knows only the configured account.
    key = sa_key_for(upstream.url)
    key["client_email"] = "someone-else@sluice-test.iam.gserviceaccount.com"
    creds = service_account.Credentials.from_service_account_info(
        key, scopes=["https://www.googleapis.com/auth/cloud-platform"])
    with pytest.raises(google.auth.exceptions.RefreshError) as refused:
        creds.refresh(google.auth.transport.requests.Request())
    assert "invalid_grant" in str(refused.value)


def vertex(upstream: Chaos, token: str) -> anthropic.AnthropicVertex:
    return anthropic.AnthropicVertex(base_url=f"{upstream.url}/v1", region=GCP_LOCATION,
                                     project_id=GCP_PROJECT, access_token=token,
                                     max_retries=0, timeout=20.0)


def test_anthropic_vertex_client_with_a_google_token(upstream):
    client = vertex(upstream, google_token(upstream))
    model = "claude-opus-4@20250514"
    message = client.messages.create(model=model, max_tokens=64, messages=HELLO)
    assert message.role == "assistant" and message.content[0].text
    assert message.stop_reason == "end_turn"

    with client.messages.stream(model=model, max_tokens=64, messages=HELLO) as stream:
        text = "".join(stream.text_stream)
    assert text == message.content[0].text

    upstream.script(tool_call="lookup")
    called = client.messages.create(model=model, max_tokens=64, messages=HELLO, tools=[TOOL])
    assert called.stop_reason == "tool_use" and called.content[0].name == "lookup"
    upstream.reset()

    # Vertex refuses a token it did not issue, and one that expired, with its 401.
    with pytest.raises(anthropic.AuthenticationError):
        vertex(upstream, "ya29.not-issued-here").messages.create(model=model, max_tokens=8, messages=HELLO)
    upstream.expire_tokens()
    with pytest.raises(anthropic.AuthenticationError) as expired:
        client.messages.create(model=model, max_tokens=8, messages=HELLO)
    assert expired.value.status_code == 401
    assert vertex(upstream, google_token(upstream)).messages.create(
        model=model, max_tokens=8, messages=HELLO).content


# ---------------------------------------------------------------- Bedrock


def bedrock(upstream: Chaos, secret: str = AWS_SECRET):
    return boto3.client(
        "bedrock-runtime", endpoint_url=upstream.url, region_name=AWS_REGION,
        aws_access_key_id=AWS_KEY_ID, aws_secret_access_key=secret,
        config=botocore.config.Config(retries={"mode": "standard", "max_attempts": 1},
                                      read_timeout=20, connect_timeout=5))


BEDROCK_MODEL = "anthropic.claude-3-5-sonnet-20240620-v1:0"
BEDROCK_MESSAGES = [{"role": "user", "content": [{"text": "Say hello."}]}]
BEDROCK_TOOLS = {"tools": [{"toolSpec": {"name": "lookup", "description": "Looks a word up.", "inputSchema": {
    "json": {"type": "object", "properties": {"query": {"type": "string"}}}}}}]}


def test_botocore_converse_and_converse_stream_are_signed_and_parsed(upstream):
    client = bedrock(upstream)
    answer = client.converse(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES,
                             inferenceConfig={"maxTokens": 64})
    assert answer["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert answer["stopReason"] == "end_turn"
    text = answer["output"]["message"]["content"][0]["text"]
    assert answer["output"]["message"]["role"] == "assistant" and text
    assert answer["usage"]["inputTokens"] > 0 and answer["usage"]["outputTokens"] > 0

    # An inference-profile ARN: botocore percent-encodes it into one path segment.
    arn = f"arn:aws:bedrock:{AWS_REGION}:123456789012:inference-profile/us.{BEDROCK_MODEL}"
    events = list(client.converse_stream(modelId=arn, messages=BEDROCK_MESSAGES)["stream"])
    kinds = [next(iter(e)) for e in events]
    assert kinds[0] == "messageStart" and "messageStop" in kinds and kinds[-1] == "metadata", kinds
    streamed = "".join(e["contentBlockDelta"]["delta"].get("text", "") for e in events if "contentBlockDelta" in e)
    assert streamed == text
    assert events[-1]["metadata"]["usage"]["outputTokens"] > 0


def test_botocore_reads_a_tool_use_plain_and_streamed(upstream):
    upstream.script(tool_call="lookup")
    client = bedrock(upstream)
    answer = client.converse(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES, toolConfig=BEDROCK_TOOLS)
    assert answer["stopReason"] == "tool_use"
    [block] = answer["output"]["message"]["content"]
    assert block["toolUse"]["name"] == "lookup" and block["toolUse"]["toolUseId"]
    assert "query" in block["toolUse"]["input"]

    events = list(client.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES,
                                         toolConfig=BEDROCK_TOOLS)["stream"])
    starts = [e["contentBlockStart"]["start"]["toolUse"] for e in events if "contentBlockStart" in e]
    assert [s["name"] for s in starts] == ["lookup"]
    pieces = "".join(e["contentBlockDelta"]["delta"]["toolUse"]["input"]
                     for e in events if "contentBlockDelta" in e)
    assert pieces and json.loads(pieces) == block["toolUse"]["input"]
    assert [e["messageStop"]["stopReason"] for e in events if "messageStop" in e] == ["tool_use"]


def test_botocore_names_a_bad_signature_throttling_and_a_broken_stream(upstream):
    with pytest.raises(botocore.exceptions.ClientError) as refused:
        bedrock(upstream, secret="not-the-secret").converse(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES)
    assert refused.value.response["Error"]["Code"] == "InvalidSignatureException"
    assert refused.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403

    client = bedrock(upstream)
    upstream.script(status=400, error_code="ThrottlingException")
    with pytest.raises(client.exceptions.ThrottlingException) as throttled:
        client.converse(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES)
    assert throttled.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400

    upstream.script(error_after_chunks=1)
    stream = client.converse_stream(modelId=BEDROCK_MODEL, messages=BEDROCK_MESSAGES)["stream"]
    with pytest.raises(botocore.exceptions.EventStreamError) as broken:
        list(stream)
    assert broken.value.response["Error"]["Code"] == "serviceUnavailableException"


# ---------------------------------------------------------------- Azure OpenAI


def azure(upstream: Chaos, api_key: str = API_KEY) -> openai.AzureOpenAI:
    return openai.AzureOpenAI(azure_endpoint=upstream.url, api_version="2024-10-21", api_key=api_key,
                              max_retries=0, timeout=20.0,
                              http_client=openai.DefaultHttpxClient(trust_env=False))


def test_openai_azure_client_plain_streamed_and_refused(upstream):
    client = azure(upstream)
    completion = client.chat.completions.create(model="gpt-4o-prod", messages=HELLO)
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content
    assert completion.choices[0].finish_reason == "stop"

    chunks = list(client.chat.completions.create(model="gpt-4o-prod", messages=HELLO, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == completion.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]

    with pytest.raises(openai.AuthenticationError):
        azure(upstream, api_key="wrong").chat.completions.create(model="gpt-4o-prod", messages=HELLO)
    upstream.script(status=429)
    with pytest.raises(openai.RateLimitError):
        client.chat.completions.create(model="gpt-4o-prod", messages=HELLO)


# ---------------------------------------------------------------- Gemini


def http_options(upstream: Chaos) -> genai_types.HttpOptions:
    return genai_types.HttpOptions(base_url=upstream.url, timeout=20_000,
                                   retry_options=genai_types.HttpRetryOptions(attempts=1))


def gemini(upstream: Chaos, api_key: str = API_KEY) -> genai.Client:
    return genai.Client(api_key=api_key, http_options=http_options(upstream))


def test_google_genai_plain_streamed_tool_and_refused(upstream):
    client = gemini(upstream)
    answer = client.models.generate_content(model="gemini-2.5-pro", contents="Say hello.")
    assert answer.text
    assert answer.candidates[0].finish_reason == genai_types.FinishReason.STOP
    assert answer.usage_metadata.prompt_token_count > 0

    pieces = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="Say hello."))
    assert "".join(p.text or "" for p in pieces) == answer.text

    upstream.script(tool_call="lookup")
    tool = genai_types.Tool(function_declarations=[genai_types.FunctionDeclaration(
        name="lookup", description="Looks a word up.",
        parameters={"type": "OBJECT", "properties": {"query": {"type": "STRING"}}})])
    called = client.models.generate_content(
        model="gemini-2.5-pro", contents="Look it up.",
        config=genai_types.GenerateContentConfig(
            tools=[tool], automatic_function_calling=genai_types.AutomaticFunctionCallingConfig(disable=True)))
    [call] = called.function_calls
    assert call.name == "lookup" and "query" in call.args
    upstream.reset()

    # (The client is kept in a name: a dropped google-genai Client closes its HTTP client.)
    wrong = gemini(upstream, api_key="wrong")
    with pytest.raises(genai_errors.ClientError) as refused:
        wrong.models.generate_content(model="gemini-2.5-pro", contents="Hi")
    assert refused.value.code in (400, 401, 403)
    upstream.script(status=503)
    with pytest.raises(genai_errors.ServerError) as unavailable:
        client.models.generate_content(model="gemini-2.5-pro", contents="Hi")
    assert unavailable.value.code == 503 and unavailable.value.status == "UNAVAILABLE"


def test_google_genai_on_vertex_with_service_account_credentials(upstream):
    # google-genai refreshes the service-account credentials itself, at chaos's /token.
    creds = service_account.Credentials.from_service_account_info(
        sa_key_for(upstream.url), scopes=["https://www.googleapis.com/auth/cloud-platform"])
    client = genai.Client(vertexai=True, project=GCP_PROJECT, location=GCP_LOCATION, credentials=creds,
                          http_options=http_options(upstream))
    issued = upstream.counters()["tokens_issued"]
    answer = client.models.generate_content(model="gemini-2.5-pro", contents="Say hello.")
    assert answer.text
    assert answer.candidates[0].finish_reason == genai_types.FinishReason.STOP
    pieces = list(client.models.generate_content_stream(model="gemini-2.5-pro", contents="Say hello."))
    assert "".join(p.text or "" for p in pieces) == answer.text
    assert upstream.counters()["tokens_issued"] == issued + 1
    assert upstream.counters()["by_protocol"]["vertex-gemini"] >= 2

    # Expired on the server before the client thinks so: Vertex's 401, as Google answers.
    upstream.expire_tokens()
    with pytest.raises(genai_errors.ClientError) as expired:
        client.models.generate_content(model="gemini-2.5-pro", contents="Say hello.")
    assert expired.value.code == 401 and expired.value.status == "UNAUTHENTICATED"
