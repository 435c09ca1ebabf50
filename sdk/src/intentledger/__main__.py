"""`intentledger` on the command line: `intentledger mcp proxy --upstream "CMD ARGS" ...`."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="intentledger", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    mcp = commands.add_parser("mcp", help="the MCP gateway").add_subparsers(
        dest="mcp_command", required=True
    )
    proxy = mcp.add_parser(
        "proxy",
        help="journal every tools/call of an upstream MCP server (stdio or streamable HTTP)",
        description="Speak MCP on stdin/stdout; start the upstream server; journal each "
        "tools/call as a step of one ledger run (INTENTLEDGER_URL / INTENTLEDGER_TOKEN).",
    )
    proxy.add_argument(
        "--upstream", required=True, help='the upstream: a command ("npx srv") or an http(s) URL'
    )
    proxy.add_argument("--agent", default="mcp", help="the run's agent name (default: mcp)")
    proxy.add_argument("--run", required=True, help="the run's external id (attach on restart)")
    proxy.add_argument("--worker", default=None, help="a stable worker name (INTENTLEDGER_WORKER)")
    proxy.add_argument("--read", action="append", default=[], help="a tool to treat as a read")
    proxy.add_argument("--write", action="append", default=[], help="a write despite its hint")
    proxy.add_argument(
        "--keyed", action="append", default=[], help="a write tool that honours the step key"
    )
    proxy.add_argument("--ledger-url", default=None, help="default: INTENTLEDGER_URL")
    proxy.add_argument("--ledger-token", default=None, help="default: INTENTLEDGER_TOKEN")
    serve = mcp.add_parser(
        "serve",
        help="the ledger's registered tools as an MCP server (stdio)",
        description="Each tools/call is a step of the run the client names in "
        '_meta["intentledger/run"] (and "intentledger/agent"), or of --run; writes run on the '
        "ledger's gateway under the step's key.",
    )
    serve.add_argument("--agent", default="mcp", help="the runs' agent name (default: mcp)")
    serve.add_argument("--run", default=None, help="the session's run (external id)")
    serve.add_argument(
        "--http",
        default=None,
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio",
    )
    serve.add_argument(
        "--http-token",
        default=None,
        help="the bearer token HTTP clients must send (default: INTENTLEDGER_MCP_TOKEN, "
        "else one is generated and printed at start)",
    )
    serve.add_argument("--worker", default=None, help="a stable worker name (INTENTLEDGER_WORKER)")
    serve.add_argument("--ledger-url", default=None, help="default: INTENTLEDGER_URL")
    serve.add_argument("--ledger-token", default=None, help="default: INTENTLEDGER_TOKEN")
    args = parser.parse_args(argv)
    if args.command == "mcp" and args.mcp_command == "serve":
        from intentledger.integrations.mcp import serve_main

        return serve_main(args)
    if args.command == "mcp" and args.mcp_command == "proxy":
        from intentledger.integrations.mcp import proxy_main

        return proxy_main(args)
    parser.error("unknown command")
    return 2


if __name__ == "__main__":
    sys.exit(main())
