"""A scripted OpenAI-compatible provider for the `launch` tests: every chat completion is
answered "Launched fine." (streamed when asked). Usage: launch_provider.py PORT"""

import http.server
import json
import sys

ANSWER = "Launched fine."


class Provider(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        request = json.loads(self.rfile.read(length) or b"{}")
        if request.get("stream"):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("connection", "close")
            self.end_headers()
            for delta, finish in (({"role": "assistant", "content": ANSWER}, None), ({}, "stop")):
                chunk = {"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            usage = {"id": "c", "object": "chat.completion.chunk", "model": "upstream",
                     "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": 3,
                                              "total_tokens": 13}}
            self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())
            self.close_connection = True
            return
        body = json.dumps({
            "id": "c", "object": "chat.completion", "model": "upstream",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
        }).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Provider)
    server.daemon_threads = True
    server.serve_forever()
