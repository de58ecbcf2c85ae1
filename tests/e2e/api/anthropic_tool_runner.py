"""The anthropic SDK's own tool runner (`client.beta.messages.tool_runner`) against the server's
/v1/messages, with message threads on (the runner's default: the beta
`message-threads-2026-08-12`, a `create` and then `continue`s that send only the new turn's
messages). See harness.py for the command line; tests/e2e/anthropic_threads.rs asserts on what
this prints.

Every request the SDK sends and the status it gets back are recorded through the HTTP client's
event hooks, so that the Rust side sees each turn's `thread` field and what its body carried.
"""

import json
import sys

try:
    import anthropic
    from anthropic import beta_tool
except ImportError as e:
    sys.exit(f"the anthropic SDK is missing from {sys.executable} ({e}): run scripts/peers")

import harness

QUESTION = "What is the weather in Paris, in celsius?"
BETA = "message-threads-2026-08-12"


class Recorder:
    """The SDK's requests to /v1/messages (their `thread`, `anthropic-beta` header and body) and
    the status of each response, in order."""

    def __init__(self):
        self.exchanges = []

    def request(self, request):
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            body = None
        self.exchanges.append(
            {
                "path": request.url.path,
                "beta": request.headers.get("anthropic-beta"),
                "body": body,
                "status": None,
            }
        )

    def response(self, response):
        if self.exchanges:
            self.exchanges[-1]["status"] = response.status_code


def client(args, recorder):
    http = anthropic.DefaultHttpxClient(
        event_hooks={"request": [recorder.request], "response": [recorder.response]}
    )
    return anthropic.Anthropic(
        base_url=args.base,
        api_key=args.key,
        max_retries=0,
        timeout=args.timeout,
        http_client=http,
    )


def weather_tool(calls, before=None):
    """The runner's tool: records each call (and runs `before` first, once)."""

    @beta_tool
    def get_weather(city: str, unit: str) -> str:
        """Weather for a city."""
        if before is not None and not calls:
            before()
        calls.append({"city": city, "unit": unit})
        return f"Sunny, 21 degrees {unit} in {city}."

    return get_weather


def summary(message):
    return {
        "id": message.id,
        "stop_reason": message.stop_reason,
        "block_types": [b.type for b in message.content],
        "text": "".join(b.text for b in message.content if b.type == "text"),
        "tool_uses": [
            {"id": b.id, "name": b.name, "input": b.input}
            for b in message.content
            if b.type == "tool_use"
        ],
    }


def run_tools(args, stream=False, before=None, recorder=None):
    """One tool round trip with the runner: what each reply was, the tool's calls, the requests."""
    recorder = recorder or Recorder()
    calls = []
    runner = client(args, recorder).beta.messages.tool_runner(
        model=args.models["tool"],
        max_tokens=200,
        system="You answer weather questions with the get_weather tool.",
        tools=[weather_tool(calls, before)],
        messages=[{"role": "user", "content": QUESTION}],
        stream=stream,
        max_iterations=4,
    )
    replies = []
    deltas = []
    for item in runner:
        if stream:
            for event in item:
                if event.type == "content_block_delta" and event.delta.type == "text_delta":
                    deltas.append(event.delta.text)
            replies.append(summary(item.get_final_message()))
        else:
            replies.append(summary(item))
    return {
        "replies": replies,
        "deltas": deltas,
        "calls": calls,
        "exchanges": recorder.exchanges,
    }


def case_runner(args):
    return run_tools(args)


def case_runner_stream(args):
    return run_tools(args, stream=True)


def case_lost(args):
    """A continue from a message id no thread is held under: the error the SDK raises."""
    recorder = Recorder()
    try:
        client(args, recorder).beta.messages.create(
            model=args.models["tool"],
            max_tokens=50,
            messages=[{"role": "user", "content": "And tomorrow?"}],
            thread={"type": "continue", "previous_message_id": "msg_never_made_here"},
            betas=[BETA],
        )
    except anthropic.APIStatusError as e:
        return {
            "class": type(e).__name__,
            "status": e.status_code,
            "error_code": e.error_code,
            "details": e.details.model_dump() if e.details is not None else None,
            "body": e.body,
            "is_thread_not_found": isinstance(e, anthropic.types.ThreadNotFoundError),
        }
    return {"error": {"message": "the continue was answered"}}


def case_recovers(args):
    """The runner's thread is lost while its tool runs (the tool makes as many other threads as
    the store keeps, so the runner's is evicted): the SDK's continue gets `thread_not_found`, and
    the SDK replays the whole conversation under a new thread by itself."""
    recorder = Recorder()
    other = client(args, Recorder())

    def evict():
        for _ in range(int(args.models.get("evictions", 1))):
            other.beta.messages.create(
                model=args.models["plain"],
                max_tokens=50,
                messages=[{"role": "user", "content": "Say something."}],
                thread={"type": "create"},
                betas=[BETA],
            )

    return run_tools(args, before=evict, recorder=recorder)


CASES = {
    "runner": case_runner,
    "runner_stream": case_runner_stream,
    "lost": case_lost,
    "recovers": case_recovers,
}

if __name__ == "__main__":
    harness.main(CASES)
