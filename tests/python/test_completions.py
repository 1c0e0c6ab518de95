"""POST /v1/completions through the openai client: raw string and token-id prompts, drafted vs
serial on code, `echo`."""

from __future__ import annotations

import pytest

from support import HEX12, tensorfold_ext

CODE = "def fibonacci(n):\n"
# The Qwen2.5 ids of TEXT (crates/text/tests/fixtures/gguf_encode.json, from Python `tokenizers`).
TEXT = "Hello, world! It's a test; we'll see what's (not) done."
TEXT_IDS = [9707, 11, 1879, 0, 1084, 594, 264, 1273, 26, 582, 3278, 1490, 1128, 594, 320, 1921, 8, 2814, 13]
GREEDY = dict(max_tokens=32, temperature=0, seed=1)


@pytest.fixture(scope="module")
def code(oai, model_id):
    return oai.completions.create(model=model_id, prompt=CODE, **GREEDY)


def test_completion_raw_code(code, model_id):
    assert code.object == "text_completion"
    assert code.id
    assert code.model == model_id
    assert len(code.choices) == 1
    c = code.choices[0]
    assert c.index == 0
    assert isinstance(c.text, str) and c.text.strip()
    assert not c.text.startswith(CODE), "the prompt must not be echoed"
    assert c.finish_reason in ("stop", "length")
    assert code.usage.prompt_tokens > 0
    assert 0 < code.usage.completion_tokens <= GREEDY["max_tokens"]
    assert code.usage.total_tokens == code.usage.prompt_tokens + code.usage.completion_tokens
    assert HEX12.match(tensorfold_ext(code)["token_sha"])


def test_completion_draft_off_same(oai, model_id, code):
    serial = oai.completions.create(model=model_id, prompt=CODE, extra_body={"draft": False}, **GREEDY)
    assert tensorfold_ext(serial)["token_sha"] == tensorfold_ext(code)["token_sha"]
    assert serial.choices[0].text == code.choices[0].text
    assert tensorfold_ext(serial)["min_rows"] == 1


def test_completion_streamed(oai, model_id, code):
    chunks = list(oai.completions.create(model=model_id, prompt=CODE, stream=True, **GREEDY))
    assert "".join(ch.choices[0].text for ch in chunks if ch.choices) == code.choices[0].text
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finishes == [code.choices[0].finish_reason]


def test_completion_string_and_token_ids_agree(oai, model_id):
    by_text = oai.completions.create(model=model_id, prompt=TEXT, max_tokens=12, temperature=0)
    by_ids = oai.completions.create(model=model_id, prompt=TEXT_IDS, max_tokens=12, temperature=0)
    assert by_ids.usage.prompt_tokens == len(TEXT_IDS)
    assert by_text.usage.prompt_tokens == by_ids.usage.prompt_tokens
    assert by_ids.choices[0].text == by_text.choices[0].text
    assert tensorfold_ext(by_ids)["token_sha"] == tensorfold_ext(by_text)["token_sha"]


def test_completion_echo(oai, model_id, code):
    r = oai.completions.create(model=model_id, prompt=CODE, echo=True, **GREEDY)
    assert r.choices[0].text == CODE + code.choices[0].text
    assert tensorfold_ext(r)["token_sha"] == tensorfold_ext(code)["token_sha"]
