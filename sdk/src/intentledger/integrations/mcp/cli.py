"""The command lines `intentledger mcp proxy` and `intentledger mcp serve` (argparse in
`intentledger.__main__`)."""

from __future__ import annotations

import asyncio
import os
import secrets
import sys
from typing import Any

from intentledger._ledger import Ledger
from intentledger.integrations.mcp.config import ToolPolicy
from intentledger.integrations.mcp.http import HTTP_TOKEN_ENV, serve_http
from intentledger.integrations.mcp.proxy import proxy_stdio
from intentledger.integrations.mcp.serve import serve_stdio


def serve_main(args: Any) -> int:
    with Ledger(args.ledger_url, args.ledger_token) as ledger:
        if args.http:
            host, _, port = args.http.rpartition(":")
            token = args.http_token or os.environ.get("INTENTLEDGER_MCP_TOKEN") or ""
            if not token:
                token = secrets.token_urlsafe(32)
                print(
                    f"intentledger mcp serve: clients send 'Authorization: Bearer {token}' "
                    f"(set --http-token or {HTTP_TOKEN_ENV} to choose it)",
                    file=sys.stderr,
                    flush=True,
                )
            return asyncio.run(
                serve_http(
                    ledger=ledger,
                    agent=args.agent,
                    run=args.run,
                    host=host or "127.0.0.1",
                    port=int(port),
                    token=token,
                    worker=args.worker,
                )
            )
        return asyncio.run(
            serve_stdio(ledger=ledger, agent=args.agent, run=args.run, worker=args.worker)
        )


def proxy_main(args: Any) -> int:
    upstream = args.upstream.strip()
    if not upstream:
        raise SystemExit("--upstream needs a command or a URL")
    policy = ToolPolicy.of(args.read, args.write, args.keyed)
    with Ledger(args.ledger_url, args.ledger_token) as ledger:
        proxy = proxy_stdio(
            upstream,
            ledger=ledger,
            agent=args.agent,
            external_id=args.run,
            worker=args.worker,
            policy=policy,
        )
        return asyncio.run(proxy)
