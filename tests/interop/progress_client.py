"""The official MCP Python SDK (PyPI `mcp`) as a host that follows a tool call's progress:
connects to an agent-as-model server (a URL for Streamable HTTP, or `stdio` to start the
command given after `--`) on the era given, calls a tool with a progress callback and prints one
JSON object: every progress notification with the seconds since the call started, when the
result came, and the result. Run by tests/e2e/streaming.rs.

Usage: progress_client.py (URL | stdio) MODE TOOL ARGUMENTS_JSON [-- COMMAND ARGS...]"""

import asyncio
import json
import os
import sys
import time

from mcp import Client
from mcp.client.stdio import StdioServerParameters


async def main(target: str, mode: str, tool: str, arguments: dict, command: list) -> None:
    if target == "stdio":
        server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    else:
        server = target
    seen = []
    started = 0.0

    async def progress(value, total, message):
        seen.append({"t": time.monotonic() - started, "progress": value, "total": total,
                     "message": message})

    async with Client(server, mode=mode, read_timeout_seconds=600) as client:
        started = time.monotonic()
        result = await client.call_tool(tool, arguments, progress_callback=progress)
        ended = time.monotonic() - started
        print(json.dumps({
            "protocol_version": client.protocol_version,
            "progress": seen,
            "result_t": ended,
            "is_error": bool(result.is_error),
            "text": result.content[0].text if result.content else None,
            "structured": result.structured_content,
        }))


args = sys.argv[1:]
command = []
if "--" in args:
    command = args[args.index("--") + 1:]
    args = args[:args.index("--")]
asyncio.run(main(args[0], args[1], args[2], json.loads(args[3]), command))
