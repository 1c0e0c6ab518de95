#!/usr/bin/env python3
"""Generate the tf-text test fixtures (crates/text/tests/fixtures/) with Python oracles.

Run once, commit the output; Rust tests never need Python.

    python3 scripts/gen_text_fixtures.py [--models DIR] [--llama-cpp SRC]

Needs the `jinja2`, `gguf` and `tokenizers` packages, the three test models
(scripts/fetch-test-models; default DIR: $TENSORFOLD_CACHE/models or ~/.cache/tensorfold/models)
and llama.cpp's source tree for gpt-oss's template (scripts/build-llama-cpp extracts it; default
SRC: target/llama.cpp/src/llama.cpp).

Outputs:
- chat_templates.json: chat templates (three read from the GGUF files, five written here in the
  style of Qwen3, Gemma, Phi-3, Mistral and Llama 3, and gpt-oss's harmony template read from
  llama.cpp's models/templates/openai-gpt-oss-120b.jinja, the same as gpt-oss-20b's) rendered by Python Jinja2 exactly as Hugging Face transformers'
  `apply_chat_template` does (sandboxed env, trim_blocks, lstrip_blocks, loopcontrols, its
  `tojson` = json.dumps(ensure_ascii=False), `raise_exception`, `strftime_now`), over a matrix of
  conversations; a case whose render raises records the error instead. Dates are fixed: the
  Llama-3-style template gets `date_string`, and gpt-oss's one `strftime_now("%Y-%m-%d")` is
  rewritten to prefer a `date_string` too (see gpt_oss_template), which its cases pass.
- gguf_encode.json: token ids of tricky texts for each GGUF vocabulary, from a Python `tokenizers`
  pipeline built from the GGUF tokens/merges exactly as STACK.md describes (it reproduced
  llama.cpp's ids on every reference prompt).
- hf_tiny/: a small byte-level BPE tokenizer.json + tokenizer_config.json, and the ids Python
  `tokenizers` gives for some texts (cases.json).
"""

import argparse
import datetime
import json
import os
from pathlib import Path

import gguf
import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "crates" / "text" / "tests" / "fixtures"

MODELS = {
    "qwen2.5-coder-1.5b": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    "qwen2.5-coder-0.5b": "qwen2.5-coder-0.5b-instruct.gguf",
    "smollm2-135m": "smollm2-135m-instruct-q4_1.gguf",
}

# ---------------------------------------------------------------------------------------------
# Chat templates, rendered as transformers renders them (transformers/utils/chat_template_utils.py)
# ---------------------------------------------------------------------------------------------


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def strftime_now(format):
    return datetime.datetime.now().strftime(format)


def hf_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# The Qwen3 chat template (thinking model with tools), as published with Qwen3.
QWEN3_LIKE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %}
"""

# In the style of Llama 3.x: bos_token, a date from strftime_now (or date_string), tools printed
# with tojson(indent=4), raise_exception, loop controls, string methods.
LLAMA3_LIKE = r"""{{- bos_token }}
{%- if not date_string is defined %}
    {%- if strftime_now is defined %}
        {%- set date_string = strftime_now("%d %b %Y") %}
    {%- else %}
        {%- set date_string = "26 Jul 2024" %}
    {%- endif %}
{%- endif %}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none %}
    {{- "You have access to the following functions.\n\n" }}
    {%- for t in tools %}
        {%- if t.function.name.startswith('skip_') %}
            {%- continue %}
        {%- endif %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}
{%- for message in messages %}
    {%- if message.role not in ['user', 'assistant', 'tool', 'ipython'] %}
        {{- raise_exception("Unsupported role: " + message.role) }}
    {%- endif %}
    {%- if message.tool_calls is defined and message.tool_calls %}
        {%- if message.tool_calls | length != 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role in ["tool", "ipython"] %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable and message.content is not string %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- else %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
{{- eos_token if messages|length == 0 else "" }}
"""

# In the style of Gemma 2/3: no system role (a leading system message becomes the head of the
# first user turn), `model` for the assistant, strict user/model alternation enforced with
# raise_exception, content trimmed, list content of text parts.
GEMMA_LIKE = r"""{{ bos_token }}
{%- if messages[0]['role'] == 'system' -%}
    {%- set head = (messages[0]['content'] if messages[0]['content'] is string else messages[0]['content'][0]['text']) + '\n\n' -%}
    {%- set turns = messages[1:] -%}
{%- else -%}
    {%- set head = '' -%}
    {%- set turns = messages -%}
{%- endif -%}
{%- for m in turns -%}
    {%- if (m['role'] == 'user') != (loop.index0 is even) -%}
        {{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif -%}
    {{ '<start_of_turn>' + ('model' if m['role'] == 'assistant' else m['role']) + '\n' + (head if loop.first else '') }}
    {%- if m['content'] is string -%}
        {{ m['content'] | trim }}
    {%- else -%}
        {%- for part in m['content'] if part['type'] == 'text' -%}
            {{ part['text'] | trim }}
        {%- endfor -%}
    {%- endif -%}
    {{ '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
"""

# In the style of Phi-3: a marker per role, `<|end|>` after each message, the generation prompt
# opens an assistant turn.
PHI3_LIKE = r"""{% for message in messages %}{% if message['role'] in ['system', 'user', 'assistant'] %}{{'<|' + message['role'] + '|>' + '\n' + (message['content'] or '') + '<|end|>' + '\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"""

# In the style of Mistral's [INST] templates: the system message goes before the last user turn,
# alternation checked, assistant turns closed by the eos token.
MISTRAL_LIKE = r"""{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.last and system_message is defined %}
            {{- '[INST] ' + system_message + '\n\n' + message['content'] + '[/INST]' }}
        {%- else %}
            {{- '[INST] ' + message['content'] + '[/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token }}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
"""

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city. Uses <b>HTML</b> & 'quotes' — ünïcödé ☀️",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                    "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
                    "threshold": {"type": "number", "default": 0.5, "tiny": 1e-7, "big": 1e20},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Current time.", "parameters": None},
    },
]

TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {
        "name": "get_weather",
        "arguments": {"city": "Zürich", "unit": "celsius", "days": 3, "nested": {"a": [1, 2.5, None, True]}},
    },
}
TOOL_CALL_2 = {
    "id": "call_2",
    "type": "function",
    "function": {"name": "get_time", "arguments": {}},
}

CONVERSATIONS = {
    "user": [{"role": "user", "content": "Hello!"}],
    "system-user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Explain BPE in one line."},
    ],
    "multi-turn": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?\nThink carefully…  "},
    ],
    "assistant-last": [
        {"role": "system", "content": "Be nice."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello! How can I help?"},
    ],
    "unicode": [{"role": "user", "content": "日本語のテキスト 😀 — «quotes» <tags> & \"dq\" \\ back\ttab"}],
    "tool-call-and-result": [
        {"role": "user", "content": "Weather in Zürich for 3 days?"},
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21}"},
    ],
    "content-and-two-calls-two-results": [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "Weather and time?"},
        {"role": "assistant", "content": "Checking both.", "tool_calls": [TOOL_CALL, TOOL_CALL_2]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "12:00"},
        {"role": "assistant", "content": "Sunny, and it is noon."},
        {"role": "user", "content": "Thanks"},
    ],
    "thinking-history": [
        {"role": "user", "content": "Q1"},
        {"role": "assistant", "content": "<think>\nreasoning one\n</think>\n\nA1"},
        {"role": "user", "content": "Q2"},
        {"role": "assistant", "reasoning_content": "reasoning two", "content": "A2"},
    ],
    "unknown-role": [{"role": "narrator", "content": "Once upon a time"}],
    "system-list-content": [
        {"role": "system", "content": [{"type": "text", "text": "Answer in French."}]},
        {"role": "user", "content": [{"type": "text", "text": "  Hello  "}, {"type": "text", "text": "there"}]},
        {"role": "assistant", "content": "Bonjour."},
        {"role": "user", "content": "Merci"},
    ],
}

# Conversations that use tools get the tool list; others are rendered without (tools=None).
WITH_TOOLS = {"tool-call-and-result", "content-and-two-calls-two-results"}

# gpt-oss (harmony) template: read from llama.cpp's source tree at generation time.
GPT_OSS_TEMPLATE = Path("models") / "templates" / "openai-gpt-oss-120b.jinja"
GPT_OSS_DATE_CALL = 'strftime_now("%Y-%m-%d")'
GPT_OSS_DATE = "2024-07-26"


def gpt_oss_template(llama_cpp_src):
    """gpt-oss's chat template, with its one date call made overridable so fixtures are stable.

    The template prints `strftime_now("%Y-%m-%d")` unconditionally; that call becomes
    `(date_string if date_string is defined else strftime_now("%Y-%m-%d"))` (the Llama 3
    templates' own way of fixing the date) and every gpt-oss case passes `date_string`.
    """
    path = llama_cpp_src / GPT_OSS_TEMPLATE
    if not path.is_file():
        raise SystemExit(
            f"{path} is missing: pass --llama-cpp with llama.cpp's source tree "
            "(scripts/build-llama-cpp extracts it to target/llama.cpp/src/llama.cpp)"
        )
    source = path.read_text(encoding="utf-8")
    if source.count(GPT_OSS_DATE_CALL) != 1:
        raise SystemExit(f"{path}: expected exactly one {GPT_OSS_DATE_CALL}, found {source.count(GPT_OSS_DATE_CALL)}")
    return source.replace(GPT_OSS_DATE_CALL, f"(date_string if date_string is defined else {GPT_OSS_DATE_CALL})")


# A function whose parameters cover the harmony TypeScript rendering: string (with description),
# number (default), string enum (default), arrays of strings/numbers/objects, an array without items.
GPT_OSS_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search_flights",
            "description": "Search flights between two airports.",
            "parameters": {
                "type": "object",
                "properties": {
                    "origin": {"type": "string", "description": "IATA code, e.g. \"ZRH\""},
                    "destination": {"type": "string"},
                    "max_price": {"type": "number", "description": "Upper bound in EUR.", "default": 250.5},
                    "cabin": {"type": "string", "enum": ["economy", "business", "first"], "default": "economy"},
                    "airlines": {"type": "array", "items": {"type": "string"}},
                    "days": {"type": "array", "items": {"type": "integer"}},
                    "legs": {
                        "type": "array",
                        "items": {"type": "object", "properties": {"from": {"type": "string"}, "to": {"type": "string"}}},
                    },
                    "extras": {"type": "array"},
                    "direct": {"type": "boolean", "default": False},
                },
                "required": ["origin", "destination"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "Current time.", "parameters": None},
    },
]

GPT_OSS_TOOL_CALL = {
    "id": "call_1",
    "type": "function",
    "function": {
        "name": "search_flights",
        "arguments": {"origin": "ZRH", "destination": "LIS", "max_price": 199.99, "cabin": "economy", "days": [1, 2]},
    },
}

# Rendered with the gpt-oss template only (on top of CONVERSATIONS): `thinking` fields, a tool call
# in harmony's one-call-per-message form, system and developer roles.
GPT_OSS_CONVERSATIONS = {
    "gpt-oss-thinking-multi-turn": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "thinking": "Simple arithmetic: 2+2 is 4.", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
    ],
    "gpt-oss-thinking-last": [
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "thinking": "Simple arithmetic.", "content": "4."},
    ],
    "gpt-oss-tool-call-and-result": [
        {"role": "user", "content": "Cheapest flight Zürich → Lisbon?"},
        {"role": "assistant", "thinking": "I should search flights.", "tool_calls": [GPT_OSS_TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"price\": 120, \"airline\": \"TAP\"}"},
    ],
    "gpt-oss-tool-call-result-final": [
        {"role": "system", "content": "Prefer direct flights."},
        {"role": "user", "content": "Cheapest flight Zürich → Lisbon?"},
        {"role": "assistant", "thinking": "I should search flights.", "tool_calls": [GPT_OSS_TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "120 EUR with TAP"},
        {"role": "assistant", "content": "TAP, 120 EUR."},
        {"role": "user", "content": "Book it."},
    ],
    "gpt-oss-system-and-developer": [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hello!"},
    ],
    "gpt-oss-developer": [
        {"role": "developer", "content": "Answer in French."},
        {"role": "user", "content": "Hello!"},
    ],
}
GPT_OSS_WITH_TOOLS = {"gpt-oss-tool-call-and-result", "gpt-oss-tool-call-result-final"}


def chat_template_cases(templates):
    env = hf_env()
    cases = []
    for tname, t in templates.items():
        compiled = env.from_string(t["source"])
        conversations = dict(CONVERSATIONS)
        if tname == "gpt-oss":
            conversations.update(GPT_OSS_CONVERSATIONS)
        for cname, messages in conversations.items():
            variants = [(None, {})]
            if cname in WITH_TOOLS or cname == "user":
                variants.append((TOOLS, {}))
            if cname in GPT_OSS_WITH_TOOLS:
                variants.append((GPT_OSS_TOOLS, {}))
            if tname == "qwen3-like":
                variants.append((None, {"enable_thinking": False}))
                variants.append((None, {"enable_thinking": True}))
            if tname == "gpt-oss":
                variants.append((None, {"reasoning_effort": "low"}))
                variants.append((None, {"reasoning_effort": "high"}))
            if tname == "llama3-like":
                variants = [(tools, {**kw, "date_string": "26 Jul 2024"}) for tools, kw in variants]
            if tname == "gpt-oss":
                variants = [(tools, {**kw, "date_string": GPT_OSS_DATE}) for tools, kw in variants]
            for tools, kwargs in variants:
                for agp in (True, False):
                    case = {
                        "template": tname,
                        "conversation": cname,
                        "messages": messages,
                        "tools": tools,
                        "add_generation_prompt": agp,
                        "kwargs": kwargs,
                    }
                    try:
                        case["expected"] = compiled.render(
                            messages=messages,
                            tools=tools,
                            add_generation_prompt=agp,
                            bos_token=t["bos_token"],
                            eos_token=t["eos_token"],
                            **kwargs,
                        )
                    except Exception as e:  # noqa: BLE001 - any render failure is a fixture fact
                        case["error"] = f"{type(e).__name__}: {e}"
                    cases.append(case)
    return cases


# ---------------------------------------------------------------------------------------------
# GGUF vocabularies through Python tokenizers
# ---------------------------------------------------------------------------------------------

QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def field_strings(reader, key):
    f = reader.fields[key]
    return [bytes(f.parts[i]).decode("utf-8") for i in f.data]


def field_scalar(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    return f.contents()


def gguf_python_tokenizer(path):
    r = gguf.GGUFReader(str(path))
    tokens = field_strings(r, "tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in field_strings(r, "tokenizer.ggml.merges")]
    types = [int(x) for x in r.fields["tokenizer.ggml.token_type"].contents()]
    pre = field_scalar(r, "tokenizer.ggml.pre")
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab, merges))
    if pre == "qwen2":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN2_REGEX), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    elif pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    else:
        raise SystemExit(f"{path}: pre-tokenizer {pre!r} not handled by this script")
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(tokens[i], special=True) for i, t in enumerate(types) if t in (3, 4)])
    return tk, r


ENCODE_TEXTS = [
    "Hello, world! It's a test; we'll see what's (not) done.",
    "    def f(x):\n        return x * 2  # doubled\n\n\n",
    "Numbers: 1234567890, 3.14159, -42, 1e-7, 0x1F, 2024-07-26.",
    "Unicode: 日本語のテキスト, Ελληνικά, русский, עברית, العربية, हिन्दी.",
    "Emoji: 😀🎉👩‍👩‍👧‍👦 🇫🇷 ❤️ and ZWJ sequences.",
    "Whitespace:\t\ttabs,  two  spaces,\r\nCRLF,   \n  \n trailing   ",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "Text with <tool_call>{\"name\": \"f\"}</tool_call> inside and <|endoftext|> at the end",
    "Broken specials: <|im_start <|im_end| |im_start|> <|im_start|><|im_start|>",
    "ALLCAPS CamelCase snake_case kebab-case I'M YOU'RE THEY'LL WE'VE SHE'D",
    "",
    " ",
    "\n",
    "a",
]


def gguf_encode_cases(model_dir):
    out = {}
    for name, file in MODELS.items():
        if name == "qwen2.5-coder-0.5b":
            continue  # same vocabulary as the 1.5B
        tk, _ = gguf_python_tokenizer(model_dir / file)
        out[name] = [{"text": t, "ids": tk.encode(t, add_special_tokens=False).ids} for t in ENCODE_TEXTS]
    return out


# ---------------------------------------------------------------------------------------------
# A tiny Hugging Face tokenizer directory
# ---------------------------------------------------------------------------------------------

HF_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def hello_world():\n    print('Hello, world!')\n",
    "Tokenizers split text into tokens; tokens become ids.",
    "Zürich, São Paulo, 東京 and Москва are cities.",
] * 20

HF_TEXTS = [
    "The lazy fox says hello, world!",
    "<|im_start|>user\nHello there<|im_end|>\n<|im_start|>assistant\n",
    "call <tool_call>fox</tool_call> now",
    "Unseen: 東京 🚀 naïve",
]

HF_CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def hf_tiny(dir):
    dir.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(HF_CORPUS, trainer=trainer)
    tk.add_tokens([AddedToken("<tool_call>", special=False), AddedToken("</tool_call>", special=False)])
    tk.save(str(dir / "tokenizer.json"))
    config = {
        "bos_token": None,
        "eos_token": {"content": "<|im_end|>", "special": True},
        "add_bos_token": False,
        "chat_template": HF_CHAT_TEMPLATE,
    }
    (dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    cases = []
    for text in HF_TEXTS:
        enc = tk.encode(text, add_special_tokens=False)
        cases.append(
            {
                "text": text,
                "ids": enc.ids,
                "decoded_skip_special": tk.decode(enc.ids, skip_special_tokens=True),
            }
        )
    (dir / "cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")


def main():
    default_models = Path(os.environ.get("TENSORFOLD_CACHE", Path.home() / ".cache" / "tensorfold")) / "models"
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", type=Path, default=default_models)
    ap.add_argument(
        "--llama-cpp",
        type=Path,
        default=ROOT / "target" / "llama.cpp" / "src" / "llama.cpp",
        help="llama.cpp source tree, for models/templates/openai-gpt-oss-120b.jinja",
    )
    args = ap.parse_args()
    gpt_oss_source = gpt_oss_template(args.llama_cpp)

    templates = {}
    for name, file in MODELS.items():
        path = args.models / file
        if not path.exists():
            raise SystemExit(f"{path} is missing: run scripts/fetch-test-models")
        r = gguf.GGUFReader(str(path))
        tokens = field_strings(r, "tokenizer.ggml.tokens")
        bos = field_scalar(r, "tokenizer.ggml.bos_token_id")
        eos = field_scalar(r, "tokenizer.ggml.eos_token_id")
        templates[name] = {
            "source": field_scalar(r, "tokenizer.chat_template"),
            "bos_token": tokens[bos] if bos is not None else None,
            "eos_token": tokens[eos] if eos is not None else None,
        }
    templates["qwen3-like"] = {"source": QWEN3_LIKE, "bos_token": None, "eos_token": "<|im_end|>"}
    templates["gemma-like"] = {"source": GEMMA_LIKE, "bos_token": "<bos>", "eos_token": "<eos>"}
    templates["phi3-like"] = {"source": PHI3_LIKE, "bos_token": "<s>", "eos_token": "<|endoftext|>"}
    templates["mistral-like"] = {"source": MISTRAL_LIKE, "bos_token": "<s>", "eos_token": "</s>"}
    templates["llama3-like"] = {
        "source": LLAMA3_LIKE,
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|eot_id|>",
    }
    # gpt-oss's tokenizer_config.json: bos <|startoftext|>, eos <|return|>.
    templates["gpt-oss"] = {"source": gpt_oss_source, "bos_token": "<|startoftext|>", "eos_token": "<|return|>"}

    OUT.mkdir(parents=True, exist_ok=True)
    fixture = {"templates": templates, "cases": chat_template_cases(templates)}
    (OUT / "chat_templates.json").write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")
    (OUT / "gguf_encode.json").write_text(
        json.dumps(gguf_encode_cases(args.models), ensure_ascii=False, indent=1) + "\n"
    )
    hf_tiny(OUT / "hf_tiny")
    n = len(fixture["cases"])
    errors = sum(1 for c in fixture["cases"] if "error" in c)
    print(f"wrote {OUT}: {n} chat template cases ({errors} expected errors)")


if __name__ == "__main__":
    main()
