"""What the SDK clients in this folder share: the command line, the cases' common inputs, and
one JSON object on stdout with each case's result (or the error it raised), which
tests/e2e/api_sdks.rs asserts on.

    python <sdk>_client.py --base http://127.0.0.1:PORT --key TOKEN \
        --models '{"plain": "...", ...}' [--timeout SECS] CASE...

A case that raises is reported as {"error": {...}} and the next case still runs, so one
failure does not hide the others; the exit status is 0 once the JSON is printed.
"""

import argparse
import json
import sys
import traceback

QUESTION = "What is the capital of France?"

# The tool every tool-call case offers (the scripted provider calls it).
WEATHER_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER_QUESTION = "What is the weather in Paris, in celsius?"

# The structured-output cases' JSON Schema (the pydantic model `Capital` of each client).
CAPITAL_SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "country": {"type": "string"},
        "population_millions": {"type": "number"},
        "landmarks": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["city", "country", "population_millions", "landmarks"],
    "additionalProperties": False,
}


# The embeddings cases' texts: the first twice (identical text, identical vectors), a third
# unlike it; a long text over any context the embedded model embeds at once.
EMBED_TEXTS = [
    "The cat sat on the mat.",
    "The cat sat on the mat.",
    "Stock markets fell sharply after the announcement.",
]
EMBED_LONG = "word " * 10000


def describe(e):
    """An exception as JSON: its class, HTTP status and what it says."""
    status = getattr(e, "status_code", None)
    if status is None:
        status = getattr(e, "code", None)
    body = getattr(e, "body", None)
    if body is None:
        body = getattr(e, "details", None)
    return {
        "class": type(e).__name__,
        "module": type(e).__module__,
        "status": status if isinstance(status, int) else None,
        "api_status": getattr(e, "status", None) if isinstance(getattr(e, "status", None), str) else None,
        "message": str(e),
        "body": body if isinstance(body, (dict, list, str)) else repr(body),
        "traceback": traceback.format_exc(limit=6),
    }


def dedup(items):
    """Items in first-seen order, each once."""
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def main(cases):
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True, help="the server, http://127.0.0.1:PORT")
    parser.add_argument("--key", required=True, help="the server's --auth-token")
    parser.add_argument("--models", required=True, help="JSON: role -> model name")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    parser.add_argument("cases", nargs="+", choices=sorted(cases))
    args = parser.parse_args()
    args.models = json.loads(args.models)
    results = {}
    for name in args.cases:
        try:
            results[name] = cases[name](args)
        except Exception as e:  # noqa: BLE001 - every failure is reported to the Rust side
            results[name] = {"error": describe(e)}
    sys.stdout.write(json.dumps(results, default=str) + "\n")
    sys.stdout.flush()
