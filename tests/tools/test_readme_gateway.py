"""The gateway example of docs/tools.md is real shell: run it with bash and curl against a live ledger."""

import json
import os
import re
import subprocess
from typing import Any

import pytest

from runs.models import Step
from tests.conftest import ROOT, chain_problems
from tests.tools.conftest import SmtpRecorder
from tools.models import IdempotencyKey, OutboundEmail

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def readme_gateway_example() -> str:
    section = (ROOT / "docs" / "tools.md").read_text()
    match = re.search(r"```bash\n(.*?)```", section, re.S)
    assert match, "no shell example in the tool side section"
    return match.group(1)


def json_documents(text: str) -> list[Any]:
    decoder, documents, at = json.JSONDecoder(), [], 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    return documents


def test_the_readme_curl_example_runs_one_call_step_and_shows_the_refusal(
    tools_server: str, smtp_server: SmtpRecorder, worker_token: str
) -> None:
    script = readme_gateway_example()
    assert "Content-Type: application/json" in script
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={**os.environ, "INTENTLEDGER_URL": tools_server, "INTENTLEDGER_TOKEN": worker_token},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    step, refusal = json_documents(done.stdout)
    assert (step["index"], step["state"], step["name"]) == (0, "done", "email.send")
    assert step["result"]["email"]["message_id"]
    assert refusal["error"]["code"] == "intent_not_journalled"
    assert refusal["error"]["details"] == {"key": "my-own-key", "found": None}

    row = Step.objects.get(idempotency_key=step["idempotency_key"])
    assert OutboundEmail.objects.filter(idempotency_key=row.idempotency_key).count() == 1
    assert len(smtp_server.with_message_id(step["result"]["email"]["message_id"])) == 1
    assert not IdempotencyKey.objects.filter(key="my-own-key").exists()
    assert chain_problems(row.run_id) == []
