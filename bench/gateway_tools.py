"""No-op tools the gateway bench registers in the served process (TOOLS_EXTRA_MODULES).

Imported only by a web server the bench starts; never by the product.
"""

from typing import Any

from rest_framework import serializers

from runs.constants import Effect
from tools.registry import StrictArguments, ToolContext, tool


class NoopArguments(StrictArguments):
    n = serializers.IntegerField(min_value=0)


def noop(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    """Does nothing and says so: the cost measured is the gateway's, not the tool's."""
    return {"n": arguments["n"], "ok": True}


tool("bench.noop_write", effect=Effect.WRITE, arguments=NoopArguments)(noop)
tool("bench.noop_read", effect=Effect.READ, arguments=NoopArguments)(noop)
