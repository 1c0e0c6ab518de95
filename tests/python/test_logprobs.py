"""Log-probabilities through the openai client: chat `logprobs` / `top_logprobs` and the
completions API's `logprobs`, the same numbers drafted and serial, streamed and not."""

from __future__ import annotations

import math

import pytest

from support import tensorfold_ext

SEA = [{"role": "user", "content": "Write two sentences about the sea."}]
GREEDY = dict(max_tokens=24, temperature=0, seed=1)
SAMPLED = dict(max_tokens=24, temperature=0.8, seed=7)


def entries(r):
    return [
        (e.token, e.logprob, e.bytes, [(t.token, t.logprob) for t in e.top_logprobs])
        for e in r.choices[0].logprobs.content
    ]


@pytest.mark.parametrize("params", [GREEDY, SAMPLED], ids=["greedy", "sampled"])
def test_chat_logprobs_drafted_equal_serial(oai, model_id, params):
    drafted = oai.chat.completions.create(
        model=model_id, messages=SEA, logprobs=True, top_logprobs=3, **params
    )
    serial = oai.chat.completions.create(
        model=model_id, messages=SEA, logprobs=True, top_logprobs=3,
        extra_body={"draft": False}, **params,
    )
    assert tensorfold_ext(drafted)["token_sha"] == tensorfold_ext(serial)["token_sha"]
    assert entries(drafted) == entries(serial), "log-probabilities differ drafted vs serial"
    content = drafted.choices[0].logprobs.content
    assert content, "no log-probabilities"
    # One entry per reply token but the end-of-turn token.
    u = drafted.usage.completion_tokens
    assert len(content) in (u, u - 1)
    for e in content:
        assert e.logprob <= 0.0
        assert len(e.top_logprobs) == 3
        tops = [t.logprob for t in e.top_logprobs]
        assert tops == sorted(tops, reverse=True)
        assert e.logprob <= tops[0]
        assert bytes(e.bytes).decode("utf-8", "replace") == e.token
        if params is GREEDY:
            # Greedy draws the most likely token.
            assert (e.token, e.logprob) == (e.top_logprobs[0].token, e.top_logprobs[0].logprob)
    text = "".join(e.token for e in content)
    assert text == drafted.choices[0].message.content
    # The reply's mass adds up: the top 3 of each row never exceed probability 1.
    assert all(sum(math.exp(t.logprob) for t in e.top_logprobs) <= 1.0 + 1e-5 for e in content)


def test_chat_logprobs_streamed_equal_whole(oai, model_id):
    whole = oai.chat.completions.create(
        model=model_id, messages=SEA, logprobs=True, top_logprobs=2, **GREEDY
    )
    chunks = oai.chat.completions.create(
        model=model_id, messages=SEA, logprobs=True, top_logprobs=2, stream=True, **GREEDY
    )
    got = []
    for ch in chunks:
        if ch.choices and ch.choices[0].logprobs and ch.choices[0].logprobs.content:
            got.extend(ch.choices[0].logprobs.content)
    want = whole.choices[0].logprobs.content
    assert [(e.token, e.logprob) for e in got] == [(e.token, e.logprob) for e in want]


def test_chat_without_logprobs_has_none(oai, model_id):
    r = oai.chat.completions.create(model=model_id, messages=SEA, max_tokens=4, temperature=0)
    assert r.choices[0].logprobs is None


def test_completion_logprobs(oai, model_id):
    code = "def fibonacci(n):\n"
    drafted = oai.completions.create(
        model=model_id, prompt=code, logprobs=2, max_tokens=24, temperature=0
    )
    serial = oai.completions.create(
        model=model_id, prompt=code, logprobs=2, max_tokens=24, temperature=0,
        extra_body={"draft": False},
    )
    lp, lq = drafted.choices[0].logprobs, serial.choices[0].logprobs
    assert lp.tokens and lp.tokens == lq.tokens
    assert lp.token_logprobs == lq.token_logprobs
    assert lp.top_logprobs == lq.top_logprobs
    assert len(lp.token_logprobs) == len(lp.tokens) == len(lp.top_logprobs) == len(lp.text_offset)
    assert "".join(lp.tokens) == drafted.choices[0].text
    offsets = [0]
    for t in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(t))
    assert lp.text_offset == offsets
    for tok, v, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert v <= 0.0 and 1 <= len(top) <= 2
        # Greedy: the drawn token is the most likely one.
        assert max(top.values()) == v
    # Streamed: the same entries, chunk by chunk.
    streamed = oai.completions.create(
        model=model_id, prompt=code, logprobs=2, max_tokens=24, temperature=0, stream=True
    )
    toks, vals = [], []
    for ch in streamed:
        if ch.choices and ch.choices[0].logprobs:
            toks.extend(ch.choices[0].logprobs.tokens)
            vals.extend(ch.choices[0].logprobs.token_logprobs)
    assert toks == lp.tokens and vals == lp.token_logprobs


def test_completion_echo_scores_the_prompt(oai, model_id):
    """lm-evaluation-harness's loglikelihood request: echo, max_tokens 0, logprobs."""
    code = "def fibonacci(n):\n    return n"
    r = oai.completions.create(
        model=model_id, prompt=code, echo=True, max_tokens=0, logprobs=1, temperature=0
    )
    n = r.usage.prompt_tokens
    c = r.choices[0]
    assert c.text == code
    lp = c.logprobs
    assert len(lp.tokens) == n and "".join(lp.tokens) == code
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(v <= 0.0 for v in lp.token_logprobs[1:])
    assert r.usage.completion_tokens == 0
    # The same numbers when a reply follows, drafted or serial, and streamed.
    for extra in ({}, {"draft": False}):
        more = oai.completions.create(
            model=model_id, prompt=code, echo=True, max_tokens=6, logprobs=1, temperature=0,
            extra_body=extra,
        )
        m = more.choices[0]
        assert m.text.startswith(code)
        assert m.logprobs.token_logprobs[:n] == lp.token_logprobs
        assert len(m.logprobs.tokens) > n
        assert "".join(m.logprobs.tokens) == m.text
    chunks = oai.completions.create(
        model=model_id, prompt=code, echo=True, max_tokens=0, logprobs=1, temperature=0,
        stream=True,
    )
    toks, vals, text = [], [], ""
    for ch in chunks:
        if ch.choices:
            text += ch.choices[0].text
            if ch.choices[0].logprobs:
                toks.extend(ch.choices[0].logprobs.tokens)
                vals.extend(ch.choices[0].logprobs.token_logprobs)
    assert text == code and toks == lp.tokens and vals == lp.token_logprobs
