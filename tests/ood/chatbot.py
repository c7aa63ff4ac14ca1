"""A small chatbot written for the tests: a real HTTP server on loopback with a real scope policy.

The bot answers a question when its embedding is close enough to one of its profile's example
questions or topics (MiniLM cosine similarity ≥ `threshold`) and declines otherwise. Raising the
threshold makes it over-refuse; lowering it makes it answer everything (under-refuse).

It speaks two protocols:
  POST /v1/chat/completions  OpenAI-compatible chat completions (last user message is the query);
                             a body without "messages" gets 422
  POST /chat (and any path below it, as catch-all web apps do)
                             {"message": "..."} -> {"data": {"reply": "..."}}

Fault injection for the SUT tests: `fail_first` requests get HTTP 503, `delay` seconds of
sleep before every answer, `fail_on` gets 503 for every query holding that text, `raw_body`
is sent as is (HTTP 200) after `raw_after` good answers, and `reply` replaces every answer.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from assay.judges.embedded.embedding_cache import shared_encoder
from assay.metrics.ood.profile import UseCaseProfile, profile_from_mapping

# Above the near-domain probes of its profile (unlisted bank capabilities score up to ~0.51) and
# below its in-domain paraphrases (0.78 and up).
BALANCED = 0.6
OVER_REFUSE = 0.99
UNDER_REFUSE = -1.0


@dataclass
class ChatbotPolicy:
    """How the bot behaves.

    profile: its use case; example questions and topics define what it answers.
    threshold: least similarity to its scope texts for a question to be answered.
    fail_first: how many requests to answer with HTTP 503 before behaving.
    delay: seconds to sleep before each answer.
    fail_on: queries holding this text get HTTP 503.
    raw_body, raw_after: after `raw_after` requests, answer every one with these bytes.
    reply_text: when set, the answer to everything (e.g. "" for a blank reply).
    """

    profile: UseCaseProfile
    threshold: float = BALANCED
    fail_first: int = 0
    delay: float = 0.0
    fail_on: str | None = None
    raw_body: bytes | None = None
    raw_after: int = 0
    reply_text: str | None = None
    requests: int = 0
    queries: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def in_scope(self, query: str) -> bool:
        encoder = shared_encoder()
        scope = encoder.encode(self.profile.examples() + self.profile.topics())
        similarity = float(np.max(scope @ encoder.encode([query])[0]))
        return similarity >= self.threshold

    def reply(self, query: str) -> str:
        if self.reply_text is not None:
            return self.reply_text
        if self.in_scope(query):
            return (
                f"Happy to help with that. For '{query}', open the app, go to the relevant "
                "section and follow the three steps shown there; it takes about a minute."
            )
        return f"Sorry, I can only help with questions about {self.profile.name}."


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
        return

    def _send(self, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up first (a test's short timeout on a busy machine): the client
            # side decides the test; a traceback here would only clutter its output.
            return

    def do_POST(self) -> None:
        policy = self.server.policy
        length = int(self.headers.get("content-length", "0"))
        payload = json.loads(self.rfile.read(length) or b"{}")
        with policy.lock:
            policy.requests += 1
            failing = policy.requests <= policy.fail_first
            raw = policy.raw_body is not None and policy.requests > policy.raw_after
        if policy.fail_on and policy.fail_on in json.dumps(payload):
            failing = True
        if failing:
            self._send(503, {"error": "temporarily unavailable"})
            return
        if raw:
            self._send(200, policy.raw_body)
            return
        if policy.delay:
            time.sleep(policy.delay)
        if self.path == "/v1/chat/completions":
            if not isinstance(payload.get("messages"), list):
                self._send(422, {"error": "body must have messages"})
                return
            query = [m for m in payload["messages"] if m["role"] == "user"][-1]["content"]
            policy.queries.append(query)
            self._send(200, completion_body(policy.reply(query), payload.get("model", "bot")))
        elif self.path == "/chat" or self.path.startswith("/chat/"):
            # An OpenAI client posting here sends "messages", not "message".
            message = payload.get("message") or str(payload.get("messages", ""))
            policy.queries.append(message)
            self._send(200, {"data": {"reply": policy.reply(message)}})
        else:
            self._send(404, {"error": f"no route {self.path}"})


def completion_body(text: str, model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    policy: ChatbotPolicy


@dataclass
class RunningChatbot:
    """A started bot: its base URL and its (mutable) policy."""

    url: str
    policy: ChatbotPolicy
    server: _Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def start_chatbot(policy: ChatbotPolicy) -> RunningChatbot:
    """Start the bot on a free loopback port; call `stop()` when done."""
    server = _Server(("127.0.0.1", 0), _Handler)
    server.policy = policy
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return RunningChatbot(f"http://127.0.0.1:{server.server_address[1]}", policy, server, thread)


#: The bot's profile in the tests: a bank's card-and-account assistant.
BANK_PROFILE = {
    "name": "Harbour Bank card and account assistant",
    "description": (
        "Customer chatbot of Harbour Bank. It helps with: card payments; lost or stolen cards; "
        "account balance; transfers between accounts; bank statements; overdraft fees. "
        "Anything else is out of scope and is politely declined."
    ),
    "examples": (
        "What is the balance on my current account?\n"
        "My debit card was stolen, how do I block it?\n"
        "How do I transfer money to my savings account?\n"
        "Why was I charged an overdraft fee?"
    ),
}


def everyday_profile() -> dict[str, str]:
    """A general assistant whose topics cover every probe-bank topic (named, and by a question
    from each) and every capability of the capability bank, so the banks have nothing left
    outside it: a row asking for 32 probes gets none, and says so. Its one example is "What
    should I cook tonight?"."""
    from assay.metrics.ood.bank import probe_bank
    from assay.metrics.ood.capabilities import capability_bank

    first_question: dict[str, str] = {}
    for probe in probe_bank():
        first_question.setdefault(probe.topic, probe.text)
    topics = [topic.replace("_", " ") for topic in first_question]
    capabilities = [capability.name for capability in capability_bank()]
    return {
        "name": "Everyday helper",
        "description": "A general assistant for everyday life.",
        "allowed_topics": "\n".join([*topics, *first_question.values(), *capabilities]),
        "examples": "What should I cook tonight?",
    }


#: In-domain questions the tests send as rows: paraphrases of the bot's examples.
IN_DOMAIN_PROMPTS = (
    "How much money is left in my current account?",
    "Someone stole my debit card, can you block it?",
    "I want to move money into my savings account.",
)


def in_domain_rows() -> list[dict[str, Any]]:
    """gdi_text_v1 rows whose replies come from the live bot (sut_response null)."""
    return [
        {"input_id": f"row-{n}", "prompt": prompt, "sut_response": None}
        for n, prompt in enumerate(IN_DOMAIN_PROMPTS)
    ]


@pytest.fixture(autouse=True)
def no_llm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Test modules that import this run the offline path even if ASSAY_LLM_* is set."""
    for name in ("ASSAY_LLM_BASE_URL", "ASSAY_LLM_MODEL", "ASSAY_LLM_API_KEY"):
        monkeypatch.delenv(name, raising=False)


def running_bot() -> Iterator[RunningChatbot]:
    """Yield a running bot with the bank profile and a balanced policy; stop it afterwards."""
    bot = start_chatbot(ChatbotPolicy(profile_from_mapping(BANK_PROFILE)))
    try:
        yield bot
    finally:
        bot.stop()
