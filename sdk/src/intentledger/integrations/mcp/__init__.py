"""The MCP gateway, both ways: the ledger in front of any MCP server, and the ledger's own tools
as an MCP server. Every `tools/call` is a journalled step.

    intentledger mcp proxy --upstream "python files_server.py" --agent desk --run ticket-42
    intentledger mcp proxy --upstream http://files.internal:8000/mcp --agent desk --run ticket-42
    intentledger mcp serve --agent desk [--run ticket-42] [--http 127.0.0.1:8765 --http-token T]

`proxy` speaks MCP on its stdin/stdout to the client, and to the upstream over stdio (a command
line, started as its child) or streamable HTTP (a URL). One proxy session is one ledger run
(`--agent`, `--run` as its external id, so a restarted proxy attaches to the same run), completed
when the client disconnects with every call answered. A client that disconnects while a call is
still in flight leaves the run open (recovery decides; a write that may have happened goes to
review). A `--run` whose run is finished (an app's config starts every session with the same
`--run`) continues in the next run of its series: `<run>#2`, `<run>#3`, ... Calls may come
concurrently: each takes the next step index in the order it arrived (its intent journalled in
turn), runs on the upstream beside the others, and after a crash a re-sent call is matched to
its recorded step by name and arguments, in whatever order it comes. Each `tools/call` is a step
named `<upstream server>/<tool>`, answered to the client once its outcome is journalled:

- a read is journalled after the upstream answered, intent and outcome in one call (as the SDK
  journals a read: a crash before it costs a re-execution of the read, nothing else), unless a
  later call arrives while the upstream works on it: then its intent is journalled at once, so
  the later call need not wait, and its outcome when the upstream answers; a write's intent is
  journalled before the upstream is called, its outcome after;

- a tool is a write unless an admin marked it read in the dashboard ("MCP tools": the proxy
  reports the upstream's tools to the ledger at each `tools/list` and gets the marks back), or,
  unmarked, the upstream annotates it `readOnlyHint` or `--read TOOL` says so (`--write TOOL`
  overrides an annotation: annotations are hints, not trusted; an admin's mark overrides both);
- every call carries the step's idempotency key in `_meta["intentledger/idempotency_key"]`;
  writes are `enforced_by: nobody` (a crash between the upstream's answer and the journalled
  outcome sends the step to the review queue) unless `--keyed TOOL` says the upstream honours
  that key (`enforced_by: tool`: the step is re-executed under the same key);
- a replayed call answers the recorded result without reaching the upstream; an upstream result
  with `isError: true` is journalled as an `error` step; tools are listed without their output
  schema (a step resolved by a supervisor has only a text answer);
- an upstream that dies mid-call leaves the step `intent` (recovery decides) and the proxy
  answers that call, and every later one, with an error;
- a run that needs review (or is finished, or a ledger that cannot be reached) answers every
  `tools/call` with an error saying so; a line that is not JSON-RPC gets a JSON-RPC error.

`serve` lists the ledger's registered tools (`LedgerToolServer`); writes run on the ledger's
gateway under the step's key.
"""

from intentledger.integrations.mcp.cli import proxy_main, serve_main
from intentledger.integrations.mcp.config import ToolPolicy
from intentledger.integrations.mcp.http import serve_http
from intentledger.integrations.mcp.proxy import Gateway, proxy_stdio
from intentledger.integrations.mcp.serve import LedgerToolServer, serve_stdio
from intentledger.integrations.mcp.sessions import Runs, UpstreamLost

__all__ = [
    "Gateway",
    "LedgerToolServer",
    "Runs",
    "ToolPolicy",
    "UpstreamLost",
    "proxy_main",
    "proxy_stdio",
    "serve_http",
    "serve_main",
    "serve_stdio",
]
