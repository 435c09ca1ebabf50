"""The model interface the agents use: a scripted model for demos and tests, and an adapter for
any OpenAI-compatible chat-completions endpoint. Django-free (agent processes start fast).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, Protocol


class ModelError(Exception):
    """The model endpoint failed or answered something that is not a chat completion."""


@dataclass(frozen=True)
class Reply:
    content: str
    input_tokens: int
    output_tokens: int

    def as_result(self, model: str) -> dict[str, Any]:
        """What the journal stores for a model step (its `usage` is charged to the run)."""
        return {
            "model": model,
            "content": self.content,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
        }


class Model(Protocol):
    name: str

    def complete(self, messages: list[dict[str, str]]) -> Reply: ...


def _words(text: str) -> int:
    return len(text.split())


class ScriptedModel:
    """Deterministic: the same messages always give the same reply and token counts.

    The reply is built from the task line of the system message and a digest of the
    conversation, so a replay that diverged would show up as a different argument hash.
    """

    name = "scripted"

    def complete(self, messages: list[dict[str, str]]) -> Reply:
        canonical = json.dumps(messages, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(canonical.encode()).hexdigest()[:12]
        task = next((m["content"] for m in messages if m.get("role") == "system"), "answer")
        last = next(
            (m["content"] for m in reversed(messages) if m.get("role") == "user"), ""
        ).strip()
        topic = " ".join(last.split()[:8])
        content = f"{task.split(':', 1)[0].strip()}: {topic} (ref {digest})"
        input_tokens = sum(_words(m.get("content", "")) + 4 for m in messages)
        return Reply(content=content, input_tokens=input_tokens, output_tokens=_words(content))


class OpenAIChatModel:
    """Any OpenAI-compatible `/chat/completions` endpoint (OpenAI, vLLM, llama.cpp, Ollama...).

    Configured by AGENT_OPENAI_BASE_URL (e.g. http://127.0.0.1:8080/v1), AGENT_OPENAI_MODEL and
    AGENT_OPENAI_API_KEY (optional).
    """

    def __init__(
        self, *, base_url: str, model: str, api_key: str | None = None, timeout: float = 60.0
    ) -> None:
        import httpx

        self.name = model
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)
        self._httpx = httpx

    @classmethod
    def from_env(cls) -> OpenAIChatModel:
        base_url = os.environ.get("AGENT_OPENAI_BASE_URL")
        if not base_url:
            raise ModelError("AGENT_OPENAI_BASE_URL is not set (e.g. http://127.0.0.1:8080/v1).")
        return cls(
            base_url=base_url,
            model=os.environ.get("AGENT_OPENAI_MODEL", "gpt-4o-mini"),
            api_key=os.environ.get("AGENT_OPENAI_API_KEY") or None,
        )

    def complete(self, messages: list[dict[str, str]]) -> Reply:
        body = {"model": self.name, "messages": messages, "temperature": 0}
        try:
            response = self._client.post("/chat/completions", json=body)
        except self._httpx.TransportError as exc:
            raise ModelError(f"model endpoint {self.base_url} unreachable: {exc}") from exc
        if response.status_code != 200:
            raise ModelError(
                f"model endpoint answered {response.status_code}: {response.text[:300]}"
            )
        try:
            data = response.json()
            content = data["choices"][0]["message"]["content"] or ""
            usage = data.get("usage") or {}
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise ModelError(f"not a chat completion: {response.text[:300]}") from exc
        return Reply(
            content=str(content),
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )


def model_from_name(name: str) -> Model:
    """`scripted` or `openai` (configured from the environment)."""
    if name == "scripted":
        return ScriptedModel()
    if name == "openai":
        return OpenAIChatModel.from_env()
    raise ModelError(f"unknown model {name!r}: choose 'scripted' or 'openai'")
