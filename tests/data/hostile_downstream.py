"""A hostile MCP server over stdio, for the bridge's tests: it asks for sampling outside any
call, floods notifications, and sends oversized sampling requests. Plain JSON-RPC lines, no SDK.

Tools: `outside` returns the answer its sampling request sent right after `initialized` got
(while no call of the host's was in flight); `big` sends a sampling request with 1,001 messages
and returns the answer; `flood` sends N log messages (argument `n`) and then returns "done";
`huge` returns a text of N bytes (argument `n`) on one line.
"""

import json
import sys

pending = {}
outside_answer = None
# A call of `outside` that came before its sampling request was answered waits for the answer.
outside_waiting = None


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def ask(request_id, params):
    """Sends a sampling request and reads until its answer, keeping what else arrives."""
    send({"jsonrpc": "2.0", "id": request_id, "method": "sampling/createMessage", "params": params})
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("id") == request_id and "method" not in message:
            return message
        handle(message)
    return None


def result(request_id, text):
    send({"jsonrpc": "2.0", "id": request_id,
          "result": {"content": [{"type": "text", "text": text}], "isError": False}})


def handle(message):
    global outside_answer, outside_waiting
    method = message.get("method")
    request_id = message.get("id")
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": request_id, "result": {
            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}, "logging": {}},
            "serverInfo": {"name": "hostile-downstream", "version": "0"}}})
    elif method == "notifications/initialized":
        outside_answer = ask("outside", {
            "messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}],
            "maxTokens": 5})
        # Said on stderr (the bridge's), so a test sends its first call only after this.
        print("hostile-downstream: outside answered", file=sys.stderr, flush=True)
        if outside_waiting is not None:
            result(outside_waiting, json.dumps(outside_answer))
    elif method == "tools/list":
        tools = [{"name": name, "inputSchema": {"type": "object"}}
                 for name in ("outside", "big", "flood", "huge")]
        send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
    elif method == "tools/call":
        name = message["params"]["name"]
        if name == "outside" and outside_answer is None:
            outside_waiting = request_id
        elif name == "outside":
            result(request_id, json.dumps(outside_answer))
        elif name == "big":
            messages = [{"role": "user", "content": {"type": "text", "text": "x"}}] * 1001
            answer = ask("big", {"messages": messages, "maxTokens": 5})
            result(request_id, json.dumps(answer))
        elif name == "flood":
            n = int(message["params"].get("arguments", {}).get("n", 1000))
            note = json.dumps({"jsonrpc": "2.0", "method": "notifications/message",
                               "params": {"level": "info", "data": "x" * 200}})
            for _ in range(n):
                sys.stdout.write(note + "\n")
            sys.stdout.flush()
            result(request_id, "done")
        elif name == "huge":
            result(request_id, "z" * int(message["params"].get("arguments", {}).get("n", 0)))
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    elif request_id is not None and method is not None:
        send({"jsonrpc": "2.0", "id": request_id,
              "error": {"code": -32601, "message": f"no method {method}"}})


for line in sys.stdin:
    handle(json.loads(line))
