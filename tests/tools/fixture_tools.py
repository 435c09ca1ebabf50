"""Test-only write tools, registered in-process by the `test_tools` fixture
and in the servers the tests start (TOOLS_EXTRA_MODULES=tests.tools.server_tools).

`test.block` signals it is mid-execution (a marker file) and then waits, so a test can SIGKILL
the process while the key is in_progress; `test.explode` writes a row and then raises.
"""

import time
from pathlib import Path
from typing import Any

from rest_framework import serializers

from runs.constants import Effect
from tools.models import Ticket
from tools.registry import StrictArguments, ToolContext, tool_register, tool_unregister

CALLS: dict[str, int] = {"test.explode": 0, "test.block": 0}


class BlockArguments(StrictArguments):
    marker = serializers.CharField(max_length=500)
    seconds = serializers.FloatField(min_value=0, max_value=60)


def block(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    CALLS["test.block"] += 1
    Path(arguments["marker"]).write_text(context.idempotency_key or "")
    time.sleep(arguments["seconds"])
    return {"slept": arguments["seconds"]}


class ExplodeArguments(StrictArguments):
    customer = serializers.EmailField()


def explode(arguments: dict[str, Any], context: ToolContext) -> dict[str, Any]:
    CALLS["test.explode"] += 1
    Ticket.objects.create(
        customer=arguments["customer"],
        subject="half-done work",
        body="written before the tool raised",
        created_by_key=context.idempotency_key,
    )
    raise RuntimeError("the upstream relay fell over mid-request")


NAMES = ("test.block", "test.explode")


def register() -> None:
    tool_register(
        name="test.block", effect=Effect.WRITE, arguments=BlockArguments, fn=block, replace=True
    )
    tool_register(
        name="test.explode",
        effect=Effect.WRITE,
        arguments=ExplodeArguments,
        fn=explode,
        replace=True,
    )


def unregister() -> None:
    for name in NAMES:
        tool_unregister(name=name)
