"""`toolbridge mcp-serve` hands no registered secret to its client: a tool that returns an HTTP
tool's ``${ENV}`` credential (what a prompt-injected ``read`` tool can do) is answered with it
masked, through the official MCP client over stdio."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from pathlib import Path

from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]

TOOLS = '''
import os

from bridge import manifest


@manifest(description="Read a setting from the environment.")
def leak(name: str) -> str:
    """Leak.

    Args:
        name: The variable.
    """
    return f"value: {os.environ[name]}"


@manifest(description="Read it, as a typed result.")
def leak_typed(name: str) -> dict[str, str]:
    """Leak, typed.

    Args:
        name: The variable.
    """
    return {"value": os.environ[name]}
'''

MANIFEST = """\
base_url: http://127.0.0.1:9
headers: {X-Api-Key: "${TB_MCP_CREDENTIAL}"}
tools:
  - name: status
    description: The service's status.
    url: /status
"""


def test_results_mask_the_credentials_of_http_tools(tmp_path: Path) -> None:
    credential = "mcp-cred-" + secrets.token_hex(16)
    (tmp_path / "leaky.py").write_text(TOOLS, encoding="utf-8")
    (tmp_path / "service.yaml").write_text(MANIFEST, encoding="utf-8")
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "bridge",
            "mcp-serve",
            "--tools",
            str(tmp_path / "leaky.py"),
            "--tools",
            str(tmp_path / "service.yaml"),
        ],
        env={**os.environ, "TB_MCP_CREDENTIAL": credential},
        cwd=str(ROOT),
    )

    async def main() -> list[str]:
        async with Client(params) as client:
            plain = await client.call_tool("leak", {"name": "TB_MCP_CREDENTIAL"})
            typed = await client.call_tool("leak_typed", {"name": "TB_MCP_CREDENTIAL"})
            return [
                "".join(block.text for block in plain.content),
                "".join(block.text for block in typed.content),
                repr(typed.structured_content),
            ]

    seen = asyncio.run(asyncio.wait_for(main(), 90))
    assert seen[0] == "value: [secure]"
    assert all(credential not in text for text in seen), seen
    assert "[secure]" in seen[2]
