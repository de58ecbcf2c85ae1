"""The official `ollama` Python client's embeddings against the server's Ollama API (see
harness.py for the command line): `embed` (batched, with `dimensions`, a long text truncated
and, with `truncate=False`, refused) and the legacy `embeddings`."""

import sys

try:
    import ollama
except ImportError as e:
    sys.exit(f"the ollama client is missing from {sys.executable} ({e}): run scripts/peers")

import harness
from harness import EMBED_LONG, EMBED_TEXTS


def client(args):
    return ollama.Client(
        host=args.base,
        timeout=args.timeout,
        headers={"Authorization": f"Bearer {args.key}"},
    )


def expect_error(call):
    try:
        result = call()
    except ollama.ResponseError as e:
        return {"class": type(e).__name__, "status": e.status_code, "message": e.error}
    return {"class": None, "unexpected_success": repr(result)[:2000]}


def embeddings(args):
    c = client(args)
    model = args.models["local"]
    batch = c.embed(model=model, input=EMBED_TEXTS)
    short = c.embed(model=model, input=EMBED_TEXTS[0], dimensions=32)
    legacy = c.embeddings(model=model, prompt=EMBED_TEXTS[0])
    long = c.embed(model=model, input=EMBED_LONG)
    return {
        "vectors": [list(v) for v in batch.embeddings],
        "model": batch.model,
        "prompt_eval_count": batch.prompt_eval_count,
        "total_duration": batch.total_duration,
        "short": list(short.embeddings[0]),
        "legacy": list(legacy.embedding),
        "long_tokens": long.prompt_eval_count,
        "long_dims": len(long.embeddings[0]),
        "refused": expect_error(
            lambda: c.embed(model=model, input=EMBED_LONG, truncate=False)
        ),
    }


harness.main({"embeddings": embeddings})
