"""A downstream MCP server built on the official MCP Python SDK (PyPI `mcp`), for the bridge's
tests. Its tool `ask` sends its client (the bridge) a sampling request with a progress
callback, which puts a progress token in the request's `_meta`, and with the model preferences
given (hints, cost/speed/intelligence priorities), and returns one JSON object: the answer's
text, every progress notification that came for the request (seconds since it was sent,
progress, total, message) and when the answer came. Run by tests/e2e/streaming.rs and
tests/e2e/routing.rs.

Usage: progress_downstream.py   (stdio)"""

import json
import time
import warnings

from mcp import types
from mcp.server.mcpserver import Context, MCPServer

warnings.simplefilter("ignore")
server = MCPServer("progress-downstream")


@server.tool()
async def ask(question: str, max_tokens: int, ctx: Context, hints: list[str] | None = None,
              cost: float | None = None, speed: float | None = None,
              intelligence: float | None = None) -> str:
    """Asks the client's model `question` and reports the progress the client sent."""
    seen = []
    started = time.monotonic()

    async def progress(value, total, message):
        seen.append({"t": time.monotonic() - started, "progress": value, "total": total,
                     "message": message})

    request = types.CreateMessageRequest(params=types.CreateMessageRequestParams(
        messages=[types.SamplingMessage(role="user",
                                        content=types.TextContent(type="text", text=question))],
        max_tokens=max_tokens,
        model_preferences=types.ModelPreferences(
            hints=[types.ModelHint(name=h) for h in hints] if hints else None,
            cost_priority=cost, speed_priority=speed, intelligence_priority=intelligence),
    ))
    result = await ctx.session.send_request(request, types.CreateMessageResult,
                                            progress_callback=progress)
    answered = time.monotonic() - started
    text = result.content.text if isinstance(result.content, types.TextContent) else None
    return json.dumps({"answer": text, "progress": seen, "answer_t": answered})


server.run()
