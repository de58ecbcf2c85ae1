"""The official anthropic SDK against the server's /v1/messages, /v1/messages/count_tokens and
/v1/models (see harness.py for the command line). Retries are off and every request has a
timeout."""

import json
import sys

try:
    import anthropic
    from pydantic import BaseModel
except ImportError as e:
    sys.exit(f"the anthropic SDK is missing from {sys.executable} ({e}): run scripts/peers")

import harness
from harness import (
    CAPITAL_SCHEMA,
    QUESTION,
    WEATHER_QUESTION,
    WEATHER_SCHEMA,
    dedup,
    describe,
)


class Capital(BaseModel):
    city: str
    country: str
    population_millions: float
    landmarks: list[str]


TOOL = {"name": "get_weather", "description": "Weather for a city", "input_schema": WEATHER_SCHEMA}
USER = [{"role": "user", "content": QUESTION}]


def client(args, key=None, bearer=False):
    """`api_key` (the SDK's x-api-key), or `auth_token` (Authorization: Bearer) when `bearer`."""
    credential = {"auth_token": key or args.key} if bearer else {"api_key": key or args.key}
    return anthropic.Anthropic(
        base_url=args.base, max_retries=0, timeout=args.timeout, **credential
    )


def text_of(message):
    return "".join(b.text for b in message.content if b.type == "text")


def tool_uses(message):
    return [
        {"id": b.id, "name": b.name, "input": b.input}
        for b in message.content
        if b.type == "tool_use"
    ]


def answer(args, model, bearer=False, messages=USER, max_tokens=100, **extra):
    r = client(args, bearer=bearer).messages.create(
        model=model, max_tokens=max_tokens, messages=messages, **extra
    )
    return {
        "text": text_of(r),
        "block_types": [b.type for b in r.content],
        "stop_reason": r.stop_reason,
        "type": r.type,
        "role": r.role,
        "model": r.model,
        "usage": r.usage.model_dump(),
    }


def stream(args, model, messages=USER, max_tokens=100, **extra):
    """The SDK's stream helper: the text deltas it yields, the events, the final message."""
    chunks, types = [], []
    with client(args).messages.stream(
        model=model, max_tokens=max_tokens, messages=messages, **extra
    ) as s:
        for event in s:
            types.append(event.type)
            if event.type == "content_block_delta" and event.delta.type == "text_delta":
                chunks.append(event.delta.text)
        final = s.get_final_message()
    return {
        "chunks": chunks,
        "text": "".join(chunks),
        "final_text": text_of(final),
        "stop_reason": final.stop_reason,
        "event_types": dedup(types),
        "usage": final.usage.model_dump(),
    }


def stream_raw(args, model):
    """`create(stream=True)`: the raw events, without the helper's accumulation."""
    chunks, types, stop = [], [], None
    events = client(args).messages.create(
        model=model, max_tokens=100, messages=USER, stream=True
    )
    for event in events:
        types.append(event.type)
        if event.type == "content_block_delta" and event.delta.type == "text_delta":
            chunks.append(event.delta.text)
        if event.type == "message_delta":
            stop = event.delta.stop_reason
    return {"chunks": chunks, "text": "".join(chunks), "stop_reason": stop, "event_types": types}


def tool(args):
    r = client(args).messages.create(
        model=args.models["tool"],
        max_tokens=100,
        messages=[{"role": "user", "content": WEATHER_QUESTION}],
        tools=[TOOL],
        tool_choice={"type": "any"},
    )
    return {"tool_uses": tool_uses(r), "stop_reason": r.stop_reason, "text": text_of(r)}


def tool_stream(args):
    types, partial = [], []
    with client(args).messages.stream(
        model=args.models["tool"],
        max_tokens=100,
        messages=[{"role": "user", "content": WEATHER_QUESTION}],
        tools=[TOOL],
        tool_choice={"type": "any"},
    ) as s:
        for event in s:
            types.append(event.type)
            if event.type == "content_block_delta" and event.delta.type == "input_json_delta":
                partial.append(event.delta.partial_json)
        final = s.get_final_message()
    return {
        "tool_uses": tool_uses(final),
        "stop_reason": final.stop_reason,
        "partial_json": partial,
        "event_types": dedup(types),
    }


def parse(args):
    """`messages.parse(output_format=...)`: sent as output_config.format json_schema."""
    r = client(args).messages.parse(
        model=args.models["json"], max_tokens=200, messages=USER, output_format=Capital
    )
    parsed = r.parsed_output
    return {
        "parsed": parsed.model_dump() if parsed is not None else None,
        "text": text_of(r),
        "stop_reason": r.stop_reason,
    }


def output_config(args):
    r = client(args).messages.create(
        model=args.models["json"],
        max_tokens=200,
        messages=USER,
        output_config={"format": {"type": "json_schema", "schema": CAPITAL_SCHEMA}},
    )
    text = text_of(r)
    return {"text": text, "json": json.loads(text), "stop_reason": r.stop_reason}


def count_tokens(args):
    c = client(args)
    model = args.models["plain"]
    short = c.messages.count_tokens(model=model, messages=USER)
    long = c.messages.count_tokens(
        model=model,
        messages=[{"role": "user", "content": " ".join([QUESTION] * 40)}],
    )
    tools = c.messages.count_tokens(model=model, messages=USER, tools=[TOOL])
    return {
        "short": short.input_tokens,
        "long": long.input_tokens,
        "with_tools": tools.input_tokens,
    }


# What Claude Code sends back after a tool call: the assistant's thinking blocks (Anthropic asks
# clients to return them unchanged) beside its tool_use, then the tool_result followed by text in
# one user message (Anthropic's documented order).
CLAUDE_CODE_HISTORY = [
    {"role": "user", "content": WEATHER_QUESTION},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "The user wants the weather.", "signature": "c2lnbmF0dXJl"},
            {"type": "redacted_thinking", "data": "ZW5jcnlwdGVk"},
            {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Paris"}},
        ],
    },
    {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01", "content": "21C and sunny"},
            {"type": "text", "text": "Now answer the first question."},
        ],
    },
]


def claude_code_history(args):
    c = client(args)
    model = args.models["plain"]
    r = c.messages.create(
        model=model, max_tokens=100, messages=CLAUDE_CODE_HISTORY, tools=[TOOL]
    )
    counted = c.messages.count_tokens(model=model, messages=CLAUDE_CODE_HISTORY, tools=[TOOL])
    return {"text": text_of(r), "stop_reason": r.stop_reason, "counted": counted.input_tokens}


def models(args):
    listed = list(client(args).models.list())
    return {"ids": [m.id for m in listed], "types": dedup([m.type for m in listed])}


def expect_error(call):
    try:
        result = call()
    except anthropic.APIStatusError as e:
        return describe(e)
    return {"class": None, "unexpected_success": repr(result)[:2000]}


def unknown_model(args):
    return expect_error(
        lambda: client(args).messages.create(model="no-such-model", max_tokens=50, messages=USER)
    )


def wrong_key(args):
    return expect_error(
        lambda: client(args, key="sk-ant-wrong-key").messages.create(
            model=args.models["plain"], max_tokens=50, messages=USER
        )
    )


def wrong_bearer(args):
    return expect_error(
        lambda: client(args, key="sk-ant-wrong-key", bearer=True).messages.create(
            model=args.models["plain"], max_tokens=50, messages=USER
        )
    )


def wrong_key_models(args):
    return expect_error(lambda: list(client(args, key="sk-ant-wrong-key").models.list()))


# This SDK's `messages.create` takes no `temperature`: the server's own sampling answers.
def local_answer(args):
    return answer(args, args.models["local"], max_tokens=48)


def local_stream(args):
    return stream(
        args,
        args.models["local"],
        messages=[
            {"role": "user", "content": "In one sentence: what is the capital of France?"}
        ],
        max_tokens=48,
    )


harness.main(
    {
        "plain": lambda a: answer(a, a.models["plain"]),
        "claude_code_history": claude_code_history,
        "plain_bearer": lambda a: answer(a, a.models["plain"], bearer=True),
        "live": lambda a: answer(a, a.models["live"]),
        "stream": lambda a: stream(a, a.models["live"]),
        "stream_raw": lambda a: stream_raw(a, a.models["live"]),
        "tool": tool,
        "tool_stream": tool_stream,
        "parse": parse,
        "output_config": output_config,
        "count_tokens": count_tokens,
        "models": models,
        "unknown_model": unknown_model,
        "wrong_key": wrong_key,
        "wrong_bearer": wrong_bearer,
        "wrong_key_models": wrong_key_models,
        "local_answer": local_answer,
        "local_stream": local_stream,
    }
)
