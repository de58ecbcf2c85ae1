"""Log-probabilities through the official clients (see harness.py for the command line): the
openai SDK's chat completions (whole and streamed, `logprobs` with `top_logprobs`), legacy
completions (`logprobs`) and Responses (`include: ["message.output_text.logprobs"]` with
`top_logprobs`), and the `ollama` client's chat and generate (`logprobs` with `top_logprobs`),
all greedy (temperature 0) on the model `--models` names as "openai" and "ollama". Each case
prints what the client handed back; tests/e2e/logprobs.rs asserts on it."""

import sys

try:
    import ollama
    import openai
except ImportError as e:
    sys.exit(f"the openai or ollama client is missing from {sys.executable} ({e}): run scripts/peers")

import harness

QUESTION = "In one short sentence: what is the capital of France?"
MESSAGES = [{"role": "user", "content": QUESTION}]


def openai_client(args):
    return openai.OpenAI(
        base_url=args.base + "/v1", api_key=args.key, max_retries=0, timeout=args.timeout
    )


def ollama_client(args):
    return ollama.Client(
        host=args.base, headers={"Authorization": f"Bearer {args.key}"}, timeout=args.timeout
    )


def entries(logprobs):
    """Token entries (the SDKs' objects) as JSON."""
    return [e.model_dump() for e in logprobs or []]


def dumped(logprobs):
    """A choice's `logprobs` (an SDK object) as JSON, or None."""
    return logprobs.model_dump() if logprobs else None


def chat_create(args, **more):
    """The chat completion asked for, greedy, with 3 alternatives a token."""
    return openai_client(args).chat.completions.create(
        model=args.models["openai"],
        messages=MESSAGES,
        max_tokens=24,
        temperature=0,
        logprobs=True,
        top_logprobs=3,
        **more,
    )


def chat(args):
    choice = chat_create(args).choices[0]
    return {"text": choice.message.content, "logprobs": dumped(choice.logprobs)}


def chat_stream(args):
    chunks = []
    for chunk in chat_create(args, stream=True):
        for choice in chunk.choices:
            chunks.append(
                {
                    "text": choice.delta.content,
                    "logprobs": entries(choice.logprobs.content) if choice.logprobs else None,
                    "finish_reason": choice.finish_reason,
                }
            )
    return {"chunks": chunks}


def completion_create(args, **more):
    """The legacy completion asked for, greedy, with 2 alternatives a token."""
    return openai_client(args).completions.create(
        model=args.models["openai"],
        prompt="The capital of France is",
        max_tokens=8,
        temperature=0,
        logprobs=2,
        **more,
    )


def completion(args):
    choice = completion_create(args).choices[0]
    return {"text": choice.text, "logprobs": dumped(choice.logprobs)}


def completion_stream(args):
    chunks = []
    for chunk in completion_create(args, stream=True):
        for choice in chunk.choices:
            chunks.append({"text": choice.text, "logprobs": dumped(choice.logprobs)})
    return {"chunks": chunks}


def responses(args):
    r = openai_client(args).responses.create(
        model=args.models["openai"],
        input=QUESTION,
        max_output_tokens=24,
        temperature=0,
        top_logprobs=2,
        include=["message.output_text.logprobs"],
    )
    parts = [
        {"text": part.text, "logprobs": entries(part.logprobs)}
        for item in r.output
        if item.type == "message"
        for part in item.content
        if part.type == "output_text"
    ]
    return {"text": r.output_text, "parts": parts}


def ollama_chat(args):
    r = ollama_client(args).chat(
        model=args.models["ollama"],
        messages=MESSAGES,
        options={"temperature": 0, "num_predict": 24},
        logprobs=True,
        top_logprobs=3,
        stream=False,
    )
    return {"text": r.message.content, "logprobs": entries(r.logprobs)}


def ollama_stream(args):
    parts = ollama_client(args).generate(
        model=args.models["ollama"],
        prompt=QUESTION,
        options={"temperature": 0, "num_predict": 24},
        logprobs=True,
        top_logprobs=2,
        stream=True,
    )
    return {
        "lines": [
            {"text": p.response, "logprobs": entries(p.logprobs), "done": p.done} for p in parts
        ]
    }


harness.main(
    {
        "chat": chat,
        "chat_stream": chat_stream,
        "completion": completion,
        "completion_stream": completion_stream,
        "responses": responses,
        "ollama_chat": ollama_chat,
        "ollama_stream": ollama_stream,
    }
)
