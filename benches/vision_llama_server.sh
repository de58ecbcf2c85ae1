#!/usr/bin/env bash
# Images on llama-server (--mmproj), the baseline the embedded engine's images are compared with
# (BENCHMARKS.md): per image, the projector's encode time, the time to read the image's
# embeddings into the model, the tokens an image costs, the prompt time with and without the
# image, and a second identical request (is the image read again or taken from the cache?).
#
#   benches/vision_llama_server.sh [LLAMA_SERVER [MODEL [MMPROJ [IMAGE...]]]]
#
# or the same through LLAMA_SERVER, MODEL, MMPROJ (arguments win; an empty one is the default);
# RUNS (5) requests per image, of which the median is shown; THREADS (llama-server's default
# when unset). The defaults: the llama-server on PATH, the default model in the model cache, the
# colour projector for the model (tests/data/vision/color-mmproj builds it), and red, green and
# blue 64x64 PNGs, a 64x64 JPEG and a 640x480 PNG from tests/data/vision. Needs python3 (its
# standard library only) and curl. The timings are only as quiet as the machine: its load
# average is printed before and after.
#
# How each number is taken. llama-server (0.6.0-dev, which this was written against) logs the
# image's steps only at verbosity 4 ("-lv 4"), so it runs with that, and its log is read after
# each request: the encode time is from the line "encoding mtmd batch" to the line "decoding
# image batch" (their time stamps; a build that still prints "image slice encoded in X ms" is
# read from that line instead), the read-in time is the line "image decoded (batch 1/1) in Y ms",
# and the image's own tokens the "n_tokens_batch" of that line. The prompt times are the
# response's `timings.prompt_ms`; the tokens an image costs in the prompt are its
# `usage.prompt_tokens` less those of the same request without the image (the image's own tokens
# plus any text the projector's template puts around them). Every request starts its question
# with its run's number, before the image, so that the server's prompt cache cannot serve the
# image from an earlier run; the last request of each image is then sent again, unchanged.
# "other ms" is the request's wall time less the prompt and answer times: the HTTP exchange, the
# base64 and the image file's decoding and resizing (done before the slot starts) and the chat
# template.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
server="${1:-${LLAMA_SERVER:-$(command -v llama-server || true)}}"
cache="${AGENT_AS_MODEL_CACHE_DIR:-$HOME/.cache/agent-as-model}"
default_model="$cache/models/qwen2.5-coder-0.5b-instruct.gguf"
model="${2:-${MODEL:-$default_model}}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [ -n "${3:-}" ]; then
  mmproj="$3"
elif [ -n "${MMPROJ:-}" ]; then
  mmproj="$MMPROJ"
elif [ "$model" = "$default_model" ]; then
  mmproj="$("$here/tests/data/vision/color-mmproj")"
else
  mmproj="$("$here/tests/data/vision/color-mmproj" "$model" "$work/color-mmproj.gguf")"
fi
shift $(( $# < 3 ? $# : 3 ))
images=("$@")
if [ "${#images[@]}" = 0 ]; then
  for name in red.png green.png blue.png blue.jpg gradient-640x480.png; do
    images+=("$here/tests/data/vision/$name")
  done
fi
runs="${RUNS:-5}"
if ! [ -x "$server" ] || ! [ -f "$model" ] || ! [ -f "$mmproj" ]; then
  echo "usage: $0 [LLAMA_SERVER [MODEL [MMPROJ [IMAGE...]]]]" >&2
  echo "(server '$server', model '$model', projector '$mmproj')" >&2
  exit 2
fi

# A free port: the one the system gives a socket bound to port 0.
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])')"
threads=()
[ -z "${THREADS:-}" ] || threads=(-t "$THREADS")
# One slot, greedy, verbosity 4 for the image lines; the log goes to a file read after each request.
"$server" -m "$model" --mmproj "$mmproj" --host 127.0.0.1 --port "$port" -np 1 -c 4096 \
  --temp 0 -lv 4 ${threads[@]+"${threads[@]}"} >"$work/server.log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 1
done

echo "machine: $(nproc) CPUs, $(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n 1);" \
  "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
echo "server: $server ($("$server" --version 2>&1 | head -n 1)); ${RUNS:-5} runs, medians"
python3 - "$port" "$work/server.log" "$runs" "${images[@]}" <<'PY'
import base64, json, mimetypes, os, re, statistics, sys, time, urllib.request

port, log_path, runs, images = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]
QUESTION = "What colour is this image? Answer with one word."

def stamp(line):
    """A log line's time stamp (minutes.seconds.milliseconds.microseconds) in ms."""
    m = re.match(r"\s*(\d+)\.(\d+)\.(\d+)\.(\d+) ", line)
    return None if not m else (int(m[1]) * 60 + int(m[2])) * 1000 + int(m[3]) + int(m[4]) / 1000

def ask(run, image):
    """One request; its answer, usage, timings, wall ms and the log lines it wrote."""
    start = os.path.getsize(log_path)
    content = [{"type": "text", "text": f"Run {run}. {QUESTION}"}]
    if image:
        mime = mimetypes.guess_type(image)[0] or "image/png"
        with open(image, "rb") as f:
            data = base64.b64encode(f.read()).decode()
        content.append({"type": "image_url", "image_url": {"url": f"data:{mime};base64,{data}"}})
    body = json.dumps({"messages": [{"role": "user", "content": content}],
                       "temperature": 0, "max_tokens": 4}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                     {"Content-Type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(request) as response:
        r = json.load(response)
    wall = (time.monotonic() - t0) * 1000
    time.sleep(0.05)  # the log line after the answer
    with open(log_path, "rb") as f:
        f.seek(start)
        lines = f.read().decode("utf-8", "replace").splitlines()
    return r, wall, lines

def image_steps(lines):
    """(encode ms, read-in ms, image tokens) from the log lines; None where absent."""
    encode = read_in = tokens = None
    began = None
    for line in lines:
        if "encoding mtmd batch" in line:
            began = stamp(line)
        elif (m := re.search(r"slice encoded in (\d+) ms", line)):
            encode = float(m[1])
        elif (m := re.search(r"decoding image batch \d+/\d+, n_tokens_batch = (\d+)", line)):
            tokens = int(m[1])
            if encode is None and began is not None and stamp(line) is not None:
                encode = stamp(line) - began
        elif (m := re.search(r"image decoded \(batch \d+/\d+\) in (\d+) ms", line)):
            read_in = float(m[1])
    return encode, read_in, tokens

def size(path):
    """A PNG's or JPEG's width x height, read from its header."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return f"{int.from_bytes(data[16:20], 'big')}x{int.from_bytes(data[20:24], 'big')}"
    i = 2
    while data[:2] == b"\xff\xd8" and i + 9 < len(data):
        marker, length = data[i + 1], int.from_bytes(data[i + 2:i + 4], "big")
        if marker in (0xC0, 0xC1, 0xC2):  # start of frame: precision, height, width
            height, width = data[i + 5:i + 7], data[i + 7:i + 9]
            return f"{int.from_bytes(width, 'big')}x{int.from_bytes(height, 'big')}"
        i += 2 + length
    return "?"

def med(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else float("nan")

header = (f"{'image':22} {'pixels':>9} {'answer':>7} {'tok/img':>7} {'img tok':>7} "
          f"{'encode ms':>9} {'read-in ms':>10} {'prompt ms':>9} {'no-img ms':>9} "
          f"{'other ms':>8} | {'again: cached':>13} {'encoded':>7} {'prompt ms':>9}")
print(header)
print("-" * len(header))
for image in images:
    rows = []
    for run in range(1, runs + 1):
        text, _, _ = ask(run, None)
        r, wall, lines = ask(run, image)
        encode, read_in, tokens = image_steps(lines)
        t = r.get("timings", {})
        rows.append(dict(
            answer=r["choices"][0]["message"]["content"].strip(),
            delta=r["usage"]["prompt_tokens"] - text["usage"]["prompt_tokens"],
            tokens=tokens, encode=encode, read_in=read_in,
            prompt=t.get("prompt_ms"), text_prompt=text.get("timings", {}).get("prompt_ms"),
            other=wall - t.get("prompt_ms", 0) - t.get("predicted_ms", 0)))
    # The last request again, unchanged: is the image read from the slot's cache?
    again, _, lines = ask(runs, image)
    encoded_again = any("encoding mtmd batch" in l or "slice encoded" in l for l in lines)
    cached = again["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
    pixels = size(image)
    again_cached = f"{cached}/{again['usage']['prompt_tokens']}"
    answers = {row["answer"] for row in rows}
    print(f"{os.path.basename(image):22} {pixels:>9} {'/'.join(sorted(answers)):>7} "
          f"{rows[-1]['delta']:>7} {rows[-1]['tokens'] or '?':>7} "
          f"{med(r['encode'] for r in rows):>9.1f} {med(r['read_in'] for r in rows):>10.0f} "
          f"{med(r['prompt'] for r in rows):>9.0f} {med(r['text_prompt'] for r in rows):>9.0f} "
          f"{med(r['other'] for r in rows):>8.0f} | "
          f"{again_cached:>13} {'yes' if encoded_again else 'no':>7} "
          f"{again.get('timings', {}).get('prompt_ms', float('nan')):>9.0f}")
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || uptime)"
