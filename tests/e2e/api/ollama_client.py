"""The official `ollama` Python client against the server's Ollama API (/api/...), as Home
Assistant and scripts use it (see harness.py for the command line; --models gives the name
to ask for as "local"). Every request has a timeout; the key is sent as a bearer token."""

import json
import sys
import urllib.request

try:
    import ollama
except ImportError as e:
    sys.exit(f"the ollama client is missing from {sys.executable} ({e}): run scripts/peers")

import harness
from harness import QUESTION

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}

CITY_SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "country": {"type": "string"}},
    "required": ["city", "country"],
    "additionalProperties": False,
}


def client(args):
    return ollama.Client(
        host=args.base,
        headers={"Authorization": f"Bearer {args.key}"},
        timeout=args.timeout,
    )


def model(args):
    return args.models["local"]


def dump(value):
    """A client object as JSON."""
    return json.loads(value.model_dump_json())


def version(args):
    request = urllib.request.Request(
        args.base + "/api/version", headers={"Authorization": f"Bearer {args.key}"}
    )
    with urllib.request.urlopen(request, timeout=args.timeout) as r:
        return {
            "body": json.loads(r.read()),
            "server": r.headers.get("x-agent-as-model-version"),
        }


def listed(args):
    return dump(client(args).list())


def show(args):
    return dump(client(args).show(model(args)))


def ps(args):
    return dump(client(args).ps())


def chat_whole(args):
    r = client(args).chat(
        model=model(args),
        messages=[{"role": "user", "content": QUESTION}],
        options={"temperature": 0, "num_predict": 48},
        stream=False,
    )
    return dump(r)


def chat_stream(args):
    parts = list(
        client(args).chat(
            model=model(args),
            messages=[{"role": "user", "content": "In one sentence: " + QUESTION}],
            options={"temperature": 0, "num_predict": 48},
            stream=True,
        )
    )
    return {
        "chunks": [p.message.content for p in parts if not p.done and p.message.content],
        "dones": [p.done for p in parts],
        "last": dump(parts[-1]),
    }


def generate_whole(args):
    r = client(args).generate(
        model=model(args),
        prompt=QUESTION,
        system="Answer in one short sentence.",
        options={"temperature": 0, "num_predict": 48},
        stream=False,
    )
    return dump(r)


def generate_stream(args):
    parts = list(
        client(args).generate(
            model=model(args),
            prompt=QUESTION,
            options={"temperature": 0, "num_predict": 48},
            stream=True,
        )
    )
    return {
        "chunks": [p.response for p in parts if not p.done and p.response],
        "last": dump(parts[-1]),
    }


def tools(args):
    r = client(args).chat(
        model=model(args),
        messages=[{"role": "user", "content": "What is the weather in Paris right now?"}],
        tools=[WEATHER_TOOL],
        options={"temperature": 0, "num_predict": 60},
        stream=False,
    )
    return dump(r)


def tool_round_trip(args):
    c = client(args)
    messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]
    first = c.chat(
        model=model(args),
        messages=messages,
        tools=[WEATHER_TOOL],
        options={"temperature": 0, "num_predict": 60},
    )
    calls = first.message.tool_calls or []
    messages.append(first.message)
    for call in calls:
        messages.append(
            {
                "role": "tool",
                "tool_name": call.function.name,
                "content": "Sunny, 24 degrees Celsius.",
            }
        )
    second = c.chat(
        model=model(args),
        messages=messages,
        tools=[WEATHER_TOOL],
        options={"temperature": 0, "num_predict": 60},
    )
    return {"first": dump(first), "second": dump(second)}


def schema(args):
    r = client(args).chat(
        model=model(args),
        messages=[{"role": "user", "content": "Which city is the capital of France?"}],
        format=CITY_SCHEMA,
        options={"temperature": 0, "num_predict": 60},
    )
    out = dump(r)
    out["parsed"] = json.loads(r.message.content)
    return out


def limited(args):
    r = client(args).generate(
        model=model(args),
        prompt="Count from 1 to 30, separated by commas.",
        options={"num_predict": 1, "temperature": 0},
    )
    return dump(r)


def stopped(args):
    r = client(args).generate(
        model=model(args),
        prompt="Count from 1 to 30, separated by commas.",
        options={"stop": ["5"], "temperature": 0, "num_predict": 80},
    )
    return dump(r)


def fill_in_middle(args):
    r = client(args).generate(
        model=model(args),
        prompt="def add(a, b):\n    ",
        suffix="\n\nprint(add(2, 3))\n",
        options={"temperature": 0, "num_predict": 24},
    )
    return dump(r)


def pull(args):
    parts = [dump(p) for p in client(args).pull(model(args), stream=True)]
    whole = dump(client(args).pull(model(args)))
    return {"lines": parts, "whole": whole}


def load_and_unload(args):
    c = client(args)
    loaded = c.generate(model=model(args), prompt="")
    unloaded = c.generate(model=model(args), prompt="", keep_alive=0)
    chat_loaded = c.chat(model=model(args), messages=[])
    return {
        "loaded": dump(loaded),
        "unloaded": dump(unloaded),
        "chat_loaded": dump(chat_loaded),
    }


def unknown_model(args):
    client(args).chat(model="no-such-model", messages=[{"role": "user", "content": "hi"}])
    return {"error": None}


def refused(args):
    out = {}
    c = client(args)
    for field, call in [
        ("template", lambda: c.generate(model=model(args), prompt="a", template="{{ .Prompt }}")),
        ("context", lambda: c.generate(model=model(args), prompt="a", context=[1, 2, 3])),
    ]:
        try:
            call()
            out[field] = None
        except ollama.ResponseError as e:
            out[field] = {"status": e.status_code, "error": e.error}
    return out


def describe_error(e):
    if isinstance(e, ollama.ResponseError):
        return {"class": "ResponseError", "status": e.status_code, "message": e.error}
    return harness.describe(e)


def raising(case):
    """`case`, with a ResponseError reported as such."""

    def run(args):
        try:
            return case(args)
        except ollama.ResponseError as e:
            return {"raised": describe_error(e)}

    return run


harness.main(
    {
        "version": version,
        "list": listed,
        "show": show,
        "ps": ps,
        "chat_whole": chat_whole,
        "chat_stream": chat_stream,
        "generate_whole": generate_whole,
        "generate_stream": generate_stream,
        "tools": tools,
        "tool_round_trip": tool_round_trip,
        "schema": schema,
        "limited": limited,
        "stopped": stopped,
        "fill_in_middle": fill_in_middle,
        "pull": pull,
        "load_and_unload": load_and_unload,
        "unknown_model": raising(unknown_model),
        "refused": refused,
    }
)
