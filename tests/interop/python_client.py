"""The official MCP Python SDK (PyPI `mcp`) as a host: connects to an agent-as-model server over
Streamable HTTP on the era given, answers sampling with a fixed text that echoes the prompt,
calls `generate` and prints the tool result's text. Run by tests/e2e/http.rs."""

import asyncio
import json
import sys

from mcp import Client
from mcp import types


async def sample(context, params):
    prompt = params.messages[-1].content
    text = getattr(prompt, "text", None) or str(prompt)
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"python host saw: {text}"),
        model="python-sdk-host",
        stop_reason="endTurn",
    )


async def main(url: str, mode: str) -> None:
    async with Client(url, mode=mode, sampling_callback=sample) as client:
        tools = await client.list_tools()
        result = await client.call_tool("generate", {"prompt": "hello from the python sdk"})
        print(json.dumps({
            "protocol_version": client.protocol_version,
            "tools": sorted(t.name for t in tools.tools),
            "is_error": bool(result.is_error),
            "text": result.content[0].text,
        }))


asyncio.run(main(sys.argv[1], sys.argv[2]))
