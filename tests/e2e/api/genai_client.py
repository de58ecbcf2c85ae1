"""The official google-genai SDK against the server's Gemini API, at /v1/models/… as the SDK
calls it (see harness.py for the command line). Retries are off (one attempt) and every
request has a timeout."""

import json
import sys

try:
    from google import genai
    from google.genai import errors, types
    from pydantic import BaseModel
except ImportError as e:
    sys.exit(f"the google-genai SDK is missing from {sys.executable} ({e}): run scripts/peers")

import harness
from harness import EMBED_TEXTS, CAPITAL_SCHEMA, QUESTION, WEATHER_QUESTION, WEATHER_SCHEMA, describe


class Capital(BaseModel):
    city: str
    country: str
    population_millions: float
    landmarks: list[str]


# Gemini's own schema dialect (uppercase types), as most genai code declares a function.
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="Weather for a city",
    parameters=types.Schema(
        type="OBJECT",
        properties={
            "city": types.Schema(type="STRING"),
            "unit": types.Schema(type="STRING", enum=["celsius", "fahrenheit"]),
        },
        required=["city", "unit"],
    ),
)
TOOL_CONFIG = types.GenerateContentConfig(
    tools=[types.Tool(function_declarations=[WEATHER])],
    tool_config=types.ToolConfig(
        function_calling_config=types.FunctionCallingConfig(mode="ANY")
    ),
    automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
)


# Every client made, kept for the run: genai closes a Client's connections when it is
# collected, which in `client(args).models.generate_content(...)` is before the request.
CLIENTS = []


def client(args, key=None):
    c = genai.Client(
        api_key=key or args.key,
        http_options=types.HttpOptions(
            base_url=args.base,
            api_version="v1",
            timeout=int(args.timeout * 1000),
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )
    CLIENTS.append(c)
    return c


def enum(value):
    return getattr(value, "value", value)


def finish_of(response):
    candidates = response.candidates or []
    return enum(candidates[0].finish_reason) if candidates else None


def usage(response):
    u = response.usage_metadata
    return u.model_dump(exclude_none=True, mode="json") if u is not None else None


def calls(response):
    return [{"name": c.name, "args": c.args} for c in response.function_calls or []]


def answer(args, model, config=None):
    r = client(args).models.generate_content(model=model, contents=QUESTION, config=config)
    return {
        "text": r.text,
        "finish_reason": finish_of(r),
        "role": r.candidates[0].content.role if r.candidates else None,
        "usage": usage(r),
    }


def stream(args, model, contents=QUESTION, config=None):
    chunks, finish, used = [], None, None
    for chunk in client(args).models.generate_content_stream(
        model=model, contents=contents, config=config
    ):
        if chunk.text:
            chunks.append(chunk.text)
        if finish_of(chunk) is not None:
            finish = finish_of(chunk)
        if chunk.usage_metadata is not None:
            used = usage(chunk)
    return {"chunks": chunks, "text": "".join(chunks), "finish_reason": finish, "usage": used}


def tool(args):
    r = client(args).models.generate_content(
        model=args.models["tool"], contents=WEATHER_QUESTION, config=TOOL_CONFIG
    )
    return {"function_calls": calls(r), "finish_reason": finish_of(r)}


def tool_json_schema(args):
    """A declaration with `parameters_json_schema` (plain JSON Schema), which this SDK sends
    under its snake_case name."""
    declaration = types.FunctionDeclaration(
        name="get_weather",
        description="Weather for a city",
        parameters_json_schema=WEATHER_SCHEMA,
    )
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[declaration])],
        tool_config=TOOL_CONFIG.tool_config,
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
    )
    r = client(args).models.generate_content(
        model=args.models["tool"], contents=WEATHER_QUESTION, config=config
    )
    return {"function_calls": calls(r), "finish_reason": finish_of(r)}


def tool_stream(args):
    found, finish = [], None
    for chunk in client(args).models.generate_content_stream(
        model=args.models["tool"], contents=WEATHER_QUESTION, config=TOOL_CONFIG
    ):
        found.extend(calls(chunk))
        if finish_of(chunk) is not None:
            finish = finish_of(chunk)
    return {"function_calls": found, "finish_reason": finish}


def schema(args):
    """`response_schema` with a pydantic model: sent as responseSchema (uppercase types,
    propertyOrdering); the SDK parses the answer into the model."""
    r = client(args).models.generate_content(
        model=args.models["json"],
        contents=QUESTION,
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_schema=Capital
        ),
    )
    parsed = r.parsed
    return {
        "parsed": parsed.model_dump() if isinstance(parsed, BaseModel) else parsed,
        "parsed_type": type(parsed).__name__,
        "text": r.text,
        "finish_reason": finish_of(r),
    }


def json_schema(args):
    """`response_json_schema` with a JSON Schema dict: sent as responseJsonSchema."""
    r = client(args).models.generate_content(
        model=args.models["json"],
        contents=QUESTION,
        config=types.GenerateContentConfig(
            response_mime_type="application/json", response_json_schema=CAPITAL_SCHEMA
        ),
    )
    return {"text": r.text, "json": json.loads(r.text), "finish_reason": finish_of(r)}


def count_tokens(args):
    c = client(args)
    model = args.models["plain"]
    short = c.models.count_tokens(model=model, contents=QUESTION)
    long = c.models.count_tokens(model=model, contents=" ".join([QUESTION] * 40))
    return {"short": short.total_tokens, "long": long.total_tokens}


def models(args):
    listed = list(client(args).models.list())
    return {
        "names": [m.name for m in listed],
        "display_names": [m.display_name for m in listed],
        "actions": [m.supported_actions for m in listed],
    }


def expect_error(call):
    try:
        result = call()
    except errors.APIError as e:
        return describe(e)
    return {"class": None, "unexpected_success": repr(result)[:2000]}


def unknown_model(args):
    return expect_error(
        lambda: client(args).models.generate_content(model="no-such-model", contents=QUESTION)
    )


def unknown_model_stream(args):
    return expect_error(
        lambda: list(
            client(args).models.generate_content_stream(model="no-such-model", contents=QUESTION)
        )
    )


def wrong_key(args):
    return expect_error(
        lambda: client(args, key="wrong-goog-key").models.generate_content(
            model=args.models["plain"], contents=QUESTION
        )
    )


def wrong_key_models(args):
    return expect_error(lambda: list(client(args, key="wrong-goog-key").models.list()))


LOCAL = types.GenerateContentConfig(max_output_tokens=48, temperature=0)


def local_answer(args):
    return answer(args, args.models["local"], config=LOCAL)


def local_stream(args):
    return stream(
        args,
        args.models["local"],
        contents="In one sentence: what is the capital of France?",
        config=LOCAL,
    )



def embeddings(args):
    """One text (`:embedContent` or a batch of one, as the SDK picks), a batch, and a shorter
    vector by `output_dimensionality`."""
    c = client(args)
    model = args.models["local"]
    one = c.models.embed_content(model=model, contents=EMBED_TEXTS[0])
    batch = c.models.embed_content(model=model, contents=EMBED_TEXTS)
    short = c.models.embed_content(
        model=model,
        contents=EMBED_TEXTS[0],
        config=types.EmbedContentConfig(output_dimensionality=32),
    )
    return {
        "one": list(one.embeddings[0].values),
        "batch": [list(e.values) for e in batch.embeddings],
        "short": list(short.embeddings[0].values),
    }

harness.main(
    {
        "plain": lambda a: answer(a, a.models["plain"]),
        "live": lambda a: answer(a, a.models["live"]),
        "stream": lambda a: stream(a, a.models["live"]),
        "tool": tool,
        "tool_json_schema": tool_json_schema,
        "tool_stream": tool_stream,
        "schema": schema,
        "json_schema": json_schema,
        "count_tokens": count_tokens,
        "models": models,
        "unknown_model": unknown_model,
        "unknown_model_stream": unknown_model_stream,
        "wrong_key": wrong_key,
        "wrong_key_models": wrong_key_models,
        "local_answer": local_answer,
        "local_stream": local_stream,
        "embeddings": embeddings,
    }
)
