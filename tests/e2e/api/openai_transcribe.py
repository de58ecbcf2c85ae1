"""The official openai SDK against the server's /v1/audio/transcriptions
(tests/e2e/transcriptions.rs asserts on what it prints):

    python openai_transcribe.py --base http://127.0.0.1:PORT --key TOKEN \
        --model whisper-1 --local local --audio tone.wav [--timeout SECS]

One JSON object on stdout with each case's result, or the error the SDK raised. Retries are off
and every request has a timeout."""

import argparse
import json
import sys

try:
    import openai
except ImportError as e:
    sys.exit(f"the openai SDK is missing from {sys.executable} ({e}): run scripts/peers")

from harness import describe


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--model", required=True, help="a model that takes audio")
    parser.add_argument("--local", required=True, help="a model that takes text only")
    parser.add_argument("--audio", required=True, help="a WAV file")
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args()
    client = openai.OpenAI(
        base_url=args.base + "/v1", api_key=args.key, max_retries=0, timeout=args.timeout
    )

    def create(model=args.model, **extra):
        with open(args.audio, "rb") as audio:
            return client.audio.transcriptions.create(model=model, file=audio, **extra)

    def as_json():
        r = create()
        return {"type": type(r).__name__, "text": r.text, "usage": r.usage.model_dump() if r.usage else None}

    def as_text():
        r = create(response_format="text")
        return {"type": type(r).__name__, "text": r}

    def verbose():
        r = create(
            response_format="verbose_json",
            language="en",
            prompt="A tone named after Zoë.",
            temperature=0,
            timestamp_granularities=["segment"],
        )
        return {"type": type(r).__name__, "text": r.text, "language": r.language,
                "duration": r.duration, "segments": r.segments, "object": r.model_dump()}

    def refused(call):
        try:
            r = call()
        except openai.APIStatusError as e:
            return describe(e)
        return {"unexpected": repr(r)}

    cases = {
        "json": as_json,
        "text": as_text,
        "verbose_json": verbose,
        "srt": lambda: refused(lambda: create(response_format="srt")),
        "stream": lambda: refused(lambda: create(stream=True)),
        "text_only_model": lambda: refused(lambda: create(model=args.local)),
    }
    results = {}
    for name, case in cases.items():
        try:
            results[name] = case()
        except Exception as e:  # noqa: BLE001 - every failure is reported to the Rust side
            results[name] = {"error": describe(e)}
    sys.stdout.write(json.dumps(results, default=str) + "\n")
    sys.stdout.flush()


main()
