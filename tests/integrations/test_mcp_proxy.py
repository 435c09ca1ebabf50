"""`intentledger mcp proxy` in front of a real stdio MCP server: journalled, replayed, reviewed.

The MCP SDK's client is imported by the tests that use it, not at collection: importing it costs
each pytest worker two seconds of CPU, the fast loop's workers included, which run none of these.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import subprocess
import sys
from typing import TYPE_CHECKING, Any

import pytest
from django.test import Client

from dashboard.audit import AuditEntry
from dashboard.roles import ADMINS, SUPERVISORS, groups_ensure_now
from tests.conftest import ROOT, free_port, stop_process, wait_for_http
from tests.integrations.conftest import AgentRun, Desk, McpLines
from tests.review.factories import PASSWORD, user_in
from tools.models import McpTool

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters

pytestmark = pytest.mark.slow

UPSTREAM = ROOT / "tests" / "integrations" / "mcp_upstream.py"


def proxy_params(
    run: AgentRun,
    *,
    upstream: str | None = None,
    options: tuple[str, ...] = (),
    preloaded: bool = False,
    **env: str,
) -> StdioServerParameters:
    """`python -m intentledger mcp proxy ...`; `preloaded`: forked from the session's interpreter
    that has imported the proxy's MCP SDK (launch.py), for a proxy the test kills by the pid
    the upstream records (a kill of the command itself would end only launch.py). The upstream,
    unless named, is mcp_upstream.py, forked from an interpreter that has imported the MCP SDK's
    server side."""
    from mcp.client.stdio import StdioServerParameters

    if upstream is None:
        upstream = shlex.join(run.desk.preloaded("mcp_upstream").launch_argv(str(UPSTREAM)))
    proxy = [
        "mcp",
        "proxy",
        "--upstream",
        upstream,
        "--agent",
        run.agent,
        "--run",
        run.external_id,
        "--worker",
        "proxy-1",
        *options,
    ]
    command, *args = (
        run.desk.preloaded("intentledger").launch_argv("intentledger", *proxy)
        if preloaded
        else [sys.executable, "-m", "intentledger", *proxy]
    )
    return StdioServerParameters(
        command=command,
        args=args,
        env={
            "INTENTLEDGER_URL": run.desk.url,
            "INTENTLEDGER_TOKEN": run.desk.token,
            "WORK_DIR": str(run.work),
            "PYTHONPATH": str(ROOT),
            **env,
        },
        cwd=ROOT,
    )


async def session_calls(
    run: AgentRun,
    calls: list[tuple[str, dict[str, Any]]],
    *,
    kill_after: str | None = None,
    options: tuple[str, ...] = (),
    **env: str,
) -> list[Any]:
    """Connect through a fresh proxy, list the tools, make `calls`; SIGKILL the proxy after
    `kill_after` answered (the outcome is journalled before the proxy answers)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    results: list[Any] = []
    try:
        async with (
            stdio_client(proxy_params(run, options=options, preloaded=True, **env)) as (
                read,
                write,
            ),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            await session.list_tools()
            for name, arguments in calls:
                results.append(await asyncio.wait_for(session.call_tool(name, arguments), 30))
                if name == kill_after:
                    os.kill(int((run.work / "proxy.pid").read_text()), signal.SIGKILL)
                    break
    except Exception as exc:  # the proxy died under the client
        results.append(exc)
    return results


def upstream_calls(run: AgentRun) -> list[str]:
    path = run.work / "upstream_calls.txt"
    return path.read_text().splitlines() if path.exists() else []


CALLS = [("lookup", {"ticket": "T-1"}), ("append", {"line": "refund T-1"})]


def test_every_tools_call_is_a_step_named_after_the_upstream(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    results = asyncio.run(session_calls(run, CALLS))
    assert [r.content[0].text for r in results] == ["T-1: open", "appended refund T-1"]
    row = run.row
    assert row.status == "completed"
    steps = list(row.steps.order_by("index").values_list("name", "effect", "enforced_by", "state"))
    assert steps == [
        ("files/lookup", "read", None, "done"),
        ("files/append", "write", "nobody", "done"),
    ]
    # the dashboard shows an MCP run like any other, the upstream server's name on each step
    groups_ensure_now()
    supervisor = Client()
    supervisor.force_login(user_in(SUPERVISORS))
    listed = supervisor.get("/", {"q": run.external_id}).content.decode()
    assert run.external_id in listed and "mcp-desk" in listed  # in the runs list like any run
    page = supervisor.get(f"/runs/{row.pk}/").content.decode()
    assert "files/lookup" in page and "files/append" in page
    assert page.count("files/") >= 2 and "T-1: open" in page  # each step, with its result


def test_proxy_killed_after_a_write_replays_it_without_reaching_the_upstream(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    asyncio.run(session_calls(run, CALLS, kill_after="append"))
    assert run.effects == ["refund T-1"]
    assert run.row.step_count == 2

    results = asyncio.run(session_calls(run, [*CALLS, ("lookup", {"ticket": "T-2"})]))
    assert [r.content[0].text for r in results] == [
        "T-1: open",
        "appended refund T-1",
        "T-2: open",
    ]
    assert run.effects == ["refund T-1"]  # exactly one effect
    assert upstream_calls(run) == ["lookup", "append", "lookup"]  # replays never reached it
    row = run.row
    assert row.status == "completed" and row.step_count == 3
    assert not row.steps.filter(executions__gt=1).exists()


def test_kill_inside_a_write_goes_to_review_and_sent_resumes_it(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    asyncio.run(session_calls(run, CALLS, UPSTREAM_KILL_PROXY_INSIDE="append"))
    assert run.effects == ["refund T-1"]
    assert run.step("files/append").state == "intent"

    held = asyncio.run(session_calls(run, CALLS))
    assert all(r.is_error and "needs_review" in r.content[0].text for r in held)
    assert run.row.status == "needs_review"
    step = run.step("files/append")
    assert step.state == "unknown"

    # the supervisor decides in the review queue, as a person does
    supervisor = Client()
    supervisor.force_login(user_in(SUPERVISORS))
    queue = supervisor.get("/queue/").content.decode()
    assert "files/append" in queue
    decided = supervisor.post(
        f"/queue/{run.row.pk}/{step.index}/resolve",
        {"action": "sent", "note": "in the file"},
        follow=True,
    )
    assert f"Step {step.index} marked as sent." in decided.content.decode()
    results = asyncio.run(session_calls(run, CALLS))
    assert not any(r.is_error for r in results)
    assert run.effects == ["refund T-1"]  # "sent" was not a second effect
    assert upstream_calls(run) == ["lookup", "append"]
    assert run.row.status == "completed"


def test_an_upstream_that_dies_mid_call_leaves_the_step_intent(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    results = asyncio.run(session_calls(run, CALLS, UPSTREAM_DIE_INSIDE="append"))
    assert results[1].is_error and "upstream_lost" in results[1].content[0].text
    step = run.step("files/append")
    assert step.state == "intent"  # recovery decides, not the proxy
    assert run.row.status == "running"


def test_a_read_is_journalled_once_it_answered_in_one_call_a_write_around_its_call(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    asyncio.run(session_calls(run, CALLS))
    lookup, append = run.step("files/lookup"), run.step("files/append")
    # the read's intent and outcome were one call (one transaction: one timestamp), as the SDK
    # journals a read; the write's intent was committed before the upstream ran, its outcome after
    assert lookup.state == "done" and lookup.intent_at == lookup.outcome_at
    assert append.state == "done" and append.outcome_at is not None
    assert append.intent_at < append.outcome_at


def test_proxy_killed_inside_a_read_journals_nothing_and_the_resent_read_runs_again(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    killed = asyncio.run(session_calls(run, CALLS, UPSTREAM_KILL_PROXY_INSIDE="lookup"))
    assert isinstance(killed[0], Exception)  # the client never had the read's answer
    assert upstream_calls(run) == ["lookup"]
    assert run.row.step_count == 0  # a read is journalled after it answered: nothing to replay

    results = asyncio.run(session_calls(run, CALLS))
    assert [r.content[0].text for r in results] == ["T-1: open", "appended refund T-1"]
    assert upstream_calls(run) == ["lookup", "lookup", "append"]  # the lost read ran again
    row = run.row
    assert row.status == "completed" and row.step_count == 2
    assert run.step("files/lookup").executions == 1


def test_an_upstream_that_dies_inside_a_read_journals_nothing(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    results = asyncio.run(session_calls(run, CALLS, UPSTREAM_DIE_INSIDE="lookup"))
    assert results[0].is_error and "upstream_lost" in results[0].content[0].text
    assert results[1].is_error and "upstream_lost" in results[1].content[0].text
    assert run.row.step_count == 0 and run.effects == []


def test_malformed_messages_get_an_error_response_and_the_proxy_keeps_serving(
    desk: Desk,
) -> None:
    run = desk.new_run("mcp-desk")
    params = proxy_params(run)
    proxy = McpLines([params.command, *params.args], params.env or {})
    assert proxy.exchange("{not json")["error"]["code"] == -32700
    assert proxy.exchange("[1, 2")["error"]["code"] == -32700
    assert proxy.exchange('{"foo": 1}')["error"]["code"] == -32600
    assert proxy.request("tools/call", {"nome": "x"})["error"]["code"] == -32602
    answer = proxy.call("lookup", {"ticket": "T-9"})
    assert answer["result"]["content"][0]["text"] == "T-9: open"
    assert proxy.close() == 0
    assert run.row.status == "completed" and run.row.step_count == 1


def test_a_streamable_http_upstream_is_journalled_and_replayed(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    port = free_port()
    upstream = subprocess.Popen(
        desk.preloaded("mcp_upstream").launch_argv(str(UPSTREAM)),
        env={**os.environ, "WORK_DIR": str(run.work), "UPSTREAM_HTTP_PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_http(f"http://127.0.0.1:{port}/mcp", proc=upstream)
        params = proxy_params(run, upstream=f"http://127.0.0.1:{port}/mcp")
        first = McpLines([params.command, *params.args], params.env or {})
        assert (
            first.call("lookup", {"ticket": "T-1"})["result"]["content"][0]["text"] == "T-1: open"
        )
        assert not first.call("append", {"line": "refund T-1"})["result"].get("isError")
        first.kill()  # after the write answered: its outcome is journalled

        again = McpLines([params.command, *params.args], params.env or {})
        assert not again.call("lookup", {"ticket": "T-1"})["result"].get("isError")
        answer = again.call("append", {"line": "refund T-1"})["result"]
        assert answer["content"][0]["text"] == "appended refund T-1"
        assert again.close() == 0
    finally:
        stop_process(upstream)
    assert run.effects == ["refund T-1"]
    assert upstream_calls(run) == ["lookup", "append"]  # the replays never reached it
    row = run.row
    assert row.status == "completed"
    assert list(row.steps.values_list("name", flat=True)) == ["files/lookup", "files/append"]


def test_a_keyed_upstream_write_killed_inside_is_re_executed_under_its_key(desk: Desk) -> None:
    run = desk.new_run("mcp-desk")
    calls = [("append_keyed", {"line": "refund T-1"})]
    keyed = ("--keyed", "append_keyed")
    asyncio.run(session_calls(run, calls, options=keyed, UPSTREAM_KILL_PROXY_INSIDE="append_keyed"))
    step = run.step("files/append_keyed")
    assert step.enforced_by == "tool" and step.state == "intent"

    results = asyncio.run(session_calls(run, calls, options=keyed))
    assert not results[0].is_error
    step.refresh_from_db()
    assert step.state == "done" and step.executions == 2  # interrupted, re-executed, same key
    assert run.effects == [f"refund T-1 {step.idempotency_key}"]  # the upstream refused a repeat
    assert upstream_calls(run) == ["append_keyed", "append_keyed"]
    assert run.row.status == "completed"


def test_a_client_can_name_another_run_in_meta(desk: Desk) -> None:
    session_run, named = desk.new_run("mcp-desk"), desk.new_run("mcp-desk")
    named.work = session_run.work  # one upstream, one work directory
    params = proxy_params(session_run)
    proxy = McpLines([params.command, *params.args], params.env or {})
    assert not proxy.call("lookup", {"ticket": "T-1"})["result"].get("isError")
    answer = proxy.call("append", {"line": "x"}, **{"intentledger/run": named.external_id})
    assert not answer["result"].get("isError")
    assert proxy.close() == 0
    assert list(session_run.row.steps.values_list("name", flat=True)) == ["files/lookup"]
    assert list(named.row.steps.values_list("name", flat=True)) == ["files/append"]
    assert session_run.row.status == named.row.status == "completed"
    assert named.row.output == {"tool_calls": 1}


def test_an_admin_marks_an_upstream_tool_read_in_the_dashboard_and_the_proxy_honours_it(
    desk: Desk,
) -> None:
    first = desk.new_run("mcp-desk")
    asyncio.run(session_calls(first, CALLS))  # the proxy reports what the upstream lists
    assert first.step("files/append").effect == "write"  # no hint: a write

    admin = Client()
    assert admin.login(username=user_in(ADMINS, "mcp-admin").username, password=PASSWORD)
    page = admin.get("/mcp-tools/").content.decode()
    assert "files" in page and "append" in page and "readOnlyHint" in page  # lookup's hint
    append = McpTool.objects.get(server="files", name="append")
    assert not append.read_only_hint and append.effect == "write"

    refused = admin.post(f"/mcp-tools/{append.pk}/mark", {"mark": "read"}, follow=True)
    assert "Say why in a note." in refused.content.decode()
    marked = admin.post(
        f"/mcp-tools/{append.pk}/mark",
        {"mark": "read", "note": "it only appends to a scratch file"},
        follow=True,
    )
    assert "files/append is now treated as a read" in marked.content.decode()
    append.refresh_from_db()
    assert (append.mark, append.marked_by) == ("read", "mcp-admin")
    entry = AuditEntry.objects.get(action="mcp_tool.mark")
    assert entry.actor_name == "mcp-admin" and entry.target == "mcp_tool:files/append"
    assert entry.note == "it only appends to a scratch file"
    assert entry.details["before"] == "" and entry.details["after"] == "read"

    # an annotation is a hint: the admin marks the hinted lookup a write
    lookup = McpTool.objects.get(server="files", name="lookup")
    admin.post(f"/mcp-tools/{lookup.pk}/mark", {"mark": "write", "note": "it logs"})

    second = desk.new_run("mcp-desk")
    second.work = first.work
    asyncio.run(session_calls(second, CALLS))
    assert list(
        second.row.steps.order_by("index").values_list("name", "effect", "enforced_by")
    ) == [("files/lookup", "write", "nobody"), ("files/append", "read", None)]

    supervisor = Client()
    supervisor.force_login(user_in(SUPERVISORS))
    assert supervisor.get("/mcp-tools/").status_code == 403
    denied = supervisor.post(f"/mcp-tools/{append.pk}/mark", {"mark": "", "note": "x"})
    assert denied.status_code == 403
    append.refresh_from_db()
    assert append.mark == "read"
