"""The official openai SDK against the server's /v1/chat/completions, /v1/completions,
/v1/responses and /v1/models (see harness.py for the command line). Retries are off and every
request has a timeout."""

import json
import sys

try:
    import openai
    from pydantic import BaseModel
except ImportError as e:
    sys.exit(f"the openai SDK is missing from {sys.executable} ({e}): run scripts/peers")

import harness
from harness import EMBED_LONG, EMBED_TEXTS, QUESTION, WEATHER_QUESTION, WEATHER_SCHEMA, dedup, describe


class Capital(BaseModel):
    city: str
    country: str
    population_millions: float
    landmarks: list[str]


CHAT_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": WEATHER_SCHEMA,
    },
}
RESPONSES_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "Weather for a city",
    "parameters": WEATHER_SCHEMA,
    "strict": True,
}
USER = [{"role": "user", "content": QUESTION}]


def client(args, key=None):
    return openai.OpenAI(
        base_url=args.base + "/v1",
        api_key=key or args.key,
        max_retries=0,
        timeout=args.timeout,
    )


def usage(u):
    return u.model_dump() if u is not None else None


def chat_answer(args, model, messages=USER, **extra):
    r = client(args).chat.completions.create(model=model, messages=messages, **extra)
    choice = r.choices[0]
    return {
        "text": choice.message.content,
        "role": choice.message.role,
        "finish_reason": choice.finish_reason,
        "choices": len(r.choices),
        "object": r.object,
        "model": r.model,
        "usage": usage(r.usage),
    }


def chat_stream(args, model, messages=USER, **extra):
    stream = client(args).chat.completions.create(
        model=model,
        messages=messages,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    chunks, roles, finish, used, objects = [], [], None, None, []
    for chunk in stream:
        objects.append(chunk.object)
        if chunk.usage is not None:
            used = usage(chunk.usage)
        for choice in chunk.choices:
            if choice.delta.role:
                roles.append(choice.delta.role)
            if choice.delta.content:
                chunks.append(choice.delta.content)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "chunks": chunks,
        "text": "".join(chunks),
        "roles": roles,
        "finish_reason": finish,
        "usage": used,
        "objects": dedup(objects),
    }


def chat_stream_helper(args, model):
    """The SDK's stream helper: its content.delta events and its final completion."""
    deltas, types = [], []
    with client(args).chat.completions.stream(model=model, messages=USER) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "content.delta":
                deltas.append(event.delta)
        final = stream.get_final_completion()
    return {
        "chunks": deltas,
        "text": "".join(deltas),
        "final_text": final.choices[0].message.content,
        "finish_reason": final.choices[0].finish_reason,
        "event_types": dedup(types),
    }


def completion_answer(args, model, **extra):
    """A legacy text completion (client.completions.create), whole."""
    r = client(args).completions.create(model=model, prompt=QUESTION, max_tokens=32, **extra)
    choice = r.choices[0]
    return {
        "text": choice.text,
        "index": choice.index,
        "logprobs": choice.logprobs,
        "finish_reason": choice.finish_reason,
        "choices": len(r.choices),
        "id": r.id,
        "object": r.object,
        "model": r.model,
        "usage": usage(r.usage),
    }


def completion_stream(args, model, **extra):
    """A legacy text completion streamed, with the usage chunk asked for."""
    stream = client(args).completions.create(
        model=model,
        prompt=QUESTION,
        max_tokens=32,
        stream=True,
        stream_options={"include_usage": True},
        **extra,
    )
    chunks, finish, used, objects, ids, models = [], None, None, [], [], []
    for chunk in stream:
        objects.append(chunk.object)
        ids.append(chunk.id)
        models.append(chunk.model)
        if chunk.usage is not None:
            used = usage(chunk.usage)
        for choice in chunk.choices:
            if choice.text:
                chunks.append(choice.text)
            if choice.finish_reason:
                finish = choice.finish_reason
    return {
        "chunks": chunks,
        "text": "".join(chunks),
        "finish_reason": finish,
        "usage": used,
        "objects": dedup(objects),
        "ids": dedup(ids),
        "models": dedup(models),
    }


def completion_refused(args):
    """n=2: refused before anything is sent, naming the field."""
    return expect_error(
        lambda: client(args).completions.create(
            model=args.models["plain"], prompt=QUESTION, n=2
        )
    )


def responses_answer(args, model, **extra):
    r = client(args).responses.create(model=model, input=QUESTION, **extra)
    return {
        "text": r.output_text,
        "status": r.status,
        "object": r.object,
        "output_types": [o.type for o in r.output],
        "usage": usage(r.usage),
    }


def responses_stream(args, model):
    """The SDK's Responses stream helper (it needs response.created, output_item.added and
    content_part.added before a delta, and response.completed)."""
    deltas, types = [], []
    with client(args).responses.stream(model=model, input=QUESTION) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
        final = stream.get_final_response()
    return {
        "chunks": deltas,
        "text": "".join(deltas),
        "final_text": final.output_text,
        "status": final.status,
        "event_types": dedup(types),
        "usage": usage(final.usage),
    }


def responses_conversation(args):
    """A conversation kept by the server: each turn names the one before by
    previous_response_id (the last one streamed); then retrieve, delete, and the deleted
    one refused."""
    c = client(args)
    first = c.responses.create(model=args.models["plain"], input="My name is Ada.")
    second = c.responses.create(
        model=args.models["plain"], previous_response_id=first.id, input=QUESTION
    )
    events = []
    with c.responses.stream(
        model=args.models["live"], previous_response_id=second.id, input="And of Italy?"
    ) as stream:
        for event in stream:
            events.append(event.type)
        final = stream.get_final_response()
    got = c.responses.retrieve(second.id)
    c.responses.delete(first.id)
    try:
        c.responses.retrieve(first.id)
        gone = None
    except openai.NotFoundError as e:
        gone = e.status_code
    try:
        c.responses.create(model=args.models["plain"], previous_response_id=first.id, input="x")
        refused = None
    except openai.BadRequestError as e:
        refused = {"status": e.status_code, "code": e.code, "param": e.param}
    return {
        "ids": [first.id, second.id, final.id],
        "item_ids": [first.output[0].id, final.output[0].id],
        "second_text": second.output_text,
        "second_previous": second.previous_response_id,
        "final_text": final.output_text,
        "final_previous": final.previous_response_id,
        "final_status": final.status,
        "retrieved": {"id": got.id, "text": got.output_text, "status": got.status},
        "events": dedup(events),
        "gone": gone,
        "refused": refused,
    }


def chat_tool_calls(message):
    return [
        {
            "id": call.id,
            "type": call.type,
            "name": call.function.name,
            "arguments": json.loads(call.function.arguments),
        }
        for call in message.tool_calls or []
    ]


def chat_tool(args):
    r = client(args).chat.completions.create(
        model=args.models["tool"],
        messages=[{"role": "user", "content": WEATHER_QUESTION}],
        tools=[CHAT_TOOL],
        tool_choice="required",
    )
    choice = r.choices[0]
    return {
        "tool_calls": chat_tool_calls(choice.message),
        "content": choice.message.content,
        "finish_reason": choice.finish_reason,
    }


def chat_tool_stream(args):
    """The stream helper, which rebuilds the tool call from its argument deltas."""
    types, done = [], []
    with client(args).chat.completions.stream(
        model=args.models["tool"],
        messages=[{"role": "user", "content": WEATHER_QUESTION}],
        tools=[CHAT_TOOL],
        tool_choice="required",
    ) as stream:
        for event in stream:
            types.append(event.type)
            if event.type == "tool_calls.function.arguments.done":
                done.append({"name": event.name, "arguments": json.loads(event.arguments)})
        final = stream.get_final_completion()
    choice = final.choices[0]
    return {
        "tool_calls": chat_tool_calls(choice.message),
        "arguments_done": done,
        "finish_reason": choice.finish_reason,
        "event_types": dedup(types),
    }


def responses_tool(args):
    r = client(args).responses.create(
        model=args.models["tool"],
        input=WEATHER_QUESTION,
        tools=[RESPONSES_TOOL],
        tool_choice="required",
    )
    return {
        "tool_calls": [
            {"name": o.name, "arguments": json.loads(o.arguments), "call_id": o.call_id}
            for o in r.output
            if o.type == "function_call"
        ],
        "output_types": [o.type for o in r.output],
        "status": r.status,
    }


def chat_parse(args):
    r = client(args).chat.completions.parse(
        model=args.models["json"], messages=USER, response_format=Capital
    )
    message = r.choices[0].message
    return {
        "parsed": message.parsed.model_dump() if message.parsed is not None else None,
        "content": message.content,
        "refusal": message.refusal,
        "finish_reason": r.choices[0].finish_reason,
    }


def responses_parse(args):
    r = client(args).responses.parse(model=args.models["json"], input=QUESTION, text_format=Capital)
    parsed = r.output_parsed
    return {
        "parsed": parsed.model_dump() if parsed is not None else None,
        "text": r.output_text,
        "status": r.status,
    }


def models(args):
    page = client(args).models.list()
    listed = list(page)
    return {"ids": [m.id for m in listed], "objects": dedup([m.object for m in listed])}


def expect_error(call):
    try:
        result = call()
    except openai.APIStatusError as e:
        return describe(e)
    return {"class": None, "unexpected_success": repr(result)[:2000]}


def unknown_model_chat(args):
    return expect_error(
        lambda: client(args).chat.completions.create(model="no-such-model", messages=USER)
    )


def unknown_model_responses(args):
    return expect_error(
        lambda: client(args).responses.create(model="no-such-model", input=QUESTION)
    )


def wrong_key_chat(args):
    return expect_error(
        lambda: client(args, key="sk-wrong-key").chat.completions.create(
            model=args.models["plain"], messages=USER
        )
    )


def wrong_key_models(args):
    return expect_error(lambda: list(client(args, key="sk-wrong-key").models.list()))


def local_answer(args):
    return chat_answer(args, args.models["local"], max_tokens=48, temperature=0)


def local_stream(args):
    return chat_stream(
        args,
        args.models["local"],
        messages=[
            {"role": "user", "content": "In one sentence: what is the capital of France?"}
        ],
        max_tokens=48,
        temperature=0,
    )


def embeddings(args):
    """Vectors as the SDK hands them back: by default it asks for base64 and decodes it."""
    c = client(args)
    model = args.models["local"]
    batch = c.embeddings.create(model=model, input=EMBED_TEXTS)
    floats = c.embeddings.create(model=model, input=EMBED_TEXTS[0], encoding_format="float")
    short = c.embeddings.create(model=model, input=EMBED_TEXTS[0], dimensions=32)
    return {
        "vectors": [list(d.embedding) for d in batch.data],
        "indexes": [d.index for d in batch.data],
        "model": batch.model,
        "usage": usage(batch.usage),
        "float": list(floats.data[0].embedding),
        "short": list(short.data[0].embedding),
        "too_long": expect_error(
            lambda: c.embeddings.create(model=model, input=["fine", EMBED_LONG])
        ),
    }


harness.main(
    {
        "chat_plain": lambda a: chat_answer(a, a.models["plain"]),
        "chat_live": lambda a: chat_answer(a, a.models["live"]),
        "chat_stream": lambda a: chat_stream(a, a.models["live"]),
        "chat_stream_helper": lambda a: chat_stream_helper(a, a.models["live"]),
        "completions": lambda a: completion_answer(a, a.models["plain"]),
        "completions_stream": lambda a: completion_stream(a, a.models["live"]),
        "completions_refused": completion_refused,
        "responses_plain": lambda a: responses_answer(a, a.models["plain"]),
        "responses_live": lambda a: responses_answer(a, a.models["live"]),
        "responses_stream": lambda a: responses_stream(a, a.models["live"]),
        "responses_conversation": responses_conversation,
        "chat_tool": chat_tool,
        "chat_tool_stream": chat_tool_stream,
        "responses_tool": responses_tool,
        "chat_parse": chat_parse,
        "responses_parse": responses_parse,
        "models": models,
        "unknown_model_chat": unknown_model_chat,
        "unknown_model_responses": unknown_model_responses,
        "wrong_key_chat": wrong_key_chat,
        "wrong_key_models": wrong_key_models,
        "local_answer": local_answer,
        "local_stream": local_stream,
        "embeddings": embeddings,
    }
)
