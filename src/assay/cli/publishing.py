"""`assay run --publish`: check the publishing flags and wire the client to the runner.

The runner (`assay.runner.publish`) decides what is sent and when, and keeps the resumable
state; this module only turns `--base-url`, `--api-key`, `--application-name` and
`--model-name` into a `Publisher` that sends through an `AsyncClient`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from assay.client import AsyncClient, resolve_base_url
from assay.schema import (
    APPLICATION_NAME_PATTERN,
    APPLICATION_NAME_RULE,
    BATCH_LIMIT_HEADER,
    MODEL_NAME_PATTERN,
    MODEL_NAME_RULE,
    RequestValidationError,
    check_name,
)
from assay.transport import status_error, url_problem

#: How the publishing fields are named on the command line, for error messages.
PUBLISH_OPTIONS = {
    "base_url": "--base-url",
    "api_key": "--api-key",
    "application_name": "--application-name",
    "model_name": "--model-name",
    "publish": "--publish",
}

#: Asked once before scoring, with no body: the server checks the key, the application's name
#: and the key's access to it before it reads a body, so a key that may not publish there stops
#: the run before its rows are scored, and nothing is stored.
PUBLISH_PATH = "/v1/applications/{}/detections"


@dataclass
class ClientPublisher:
    """Sends batches with `AsyncClient.detections.publish`; `close()` ends its connections."""

    base_url: str
    application_name: str
    model_name: str
    api_key: str | None = None
    client: AsyncClient = field(init=False)
    #: The server's most items per request, when `check` learnt it (`BATCH_LIMIT_HEADER`).
    max_items: int | None = None

    def __post_init__(self) -> None:
        auth = f"Bearer {self.api_key}" if self.api_key else None
        self.client = AsyncClient(auth_header=auth, base_url=self.base_url, max_retries=4)

    @property
    def target(self) -> Mapping[str, str]:
        return {
            "base_url": self.base_url,
            "application_name": self.application_name,
            "model_name": self.model_name,
        }

    async def check(self) -> None:
        """A key the server refuses (401 or 403) is unusable input, named as --api-key, and so
        is an application the key may not publish to (404) or a name the server refuses (422),
        named as --application-name, and so is a base URL where nothing accepts a connection
        (--base-url). Anything else (a timeout, a 5xx) is left to publishing, which says so
        once the output is complete and continues when the same command is run again."""
        auth = self.client.auth_header
        headers = {"Authorization": auth} if auth else {}
        path = PUBLISH_PATH.format(quote(self.application_name, safe=""))
        try:
            async with httpx.AsyncClient(timeout=httpx.Timeout(30.0)) as http:
                response = await http.post(self.base_url + path, headers=headers)
        except httpx.ConnectError as error:
            # Nothing listens there (a mistyped URL, a server not started): say so before the
            # scoring is spent. A slower failure is left to publishing, which resumes.
            raise RequestValidationError(
                "base_url", f"nothing answers at {self.base_url} ({error}); nothing was scored"
            ) from None
        except (httpx.HTTPError, httpx.InvalidURL):
            return
        limit = response.headers.get(BATCH_LIMIT_HEADER, "")
        self.max_items = int(limit) if limit.isdigit() and int(limit) > 0 else None
        said = status_error(response)
        if response.status_code in (401, 403):
            which = "refused the key given" if auth else "needs a key and none was given"
            raise RequestValidationError(
                "api_key",
                f"the server at {self.base_url} {which} ({said}); nothing was scored: pass a key "
                "it accepts with --api-key or set $ASSAY_API_KEY",
            )
        if response.status_code in (404, 422) and said.message.startswith("application_name:"):
            raise RequestValidationError(
                "application_name",
                f"the server at {self.base_url} will not store detections under "
                f"{self.application_name!r} ({said}); nothing was scored: name an application "
                "the key may publish to, or use a key that may publish to this one",
            )

    async def send(self, run_id: str, items: Sequence[Mapping[str, Any]]) -> None:
        # A batch above the server's limit goes in several requests (a 413 came only once the
        # whole run was scored); the server stores a part sent twice once, by its row keys.
        size = self.max_items or len(items) or 1
        for start in range(0, len(items), size):
            part = items[start : start + size]
            await self.client.detections.publish(
                self.application_name, self.model_name, run_id, part
            )

    async def close(self) -> None:
        await self.client.aclose()


def build_publisher(
    base_url: str | None,
    api_key: str | None,
    application_name: str | None,
    model_name: str | None,
    detector_run: bool,
) -> ClientPublisher:
    """The publisher for `--publish`, or RequestValidationError naming the flag at fault."""
    if not detector_run:
        raise RequestValidationError("publish", "publishes detector results; not with --metric")
    url = resolve_base_url(base_url)
    if url is None:
        raise RequestValidationError(
            "base_url", "is required with --publish (or set $ASSAY_BASE_URL)"
        )
    if not url.startswith(("http://", "https://")):
        raise RequestValidationError("base_url", f"must be an http:// or https:// URL, got {url!r}")
    if (problem := url_problem(url)) is not None:
        raise RequestValidationError("base_url", problem)
    names = (
        ("application_name", application_name, APPLICATION_NAME_PATTERN, APPLICATION_NAME_RULE),
        ("model_name", model_name, MODEL_NAME_PATTERN, MODEL_NAME_RULE),
    )
    for name, value, pattern, rule in names:
        if not value:
            raise RequestValidationError(name, "is required with --publish")
        try:
            check_name(value, pattern, rule)
        except ValueError as error:
            raise RequestValidationError(name, str(error)) from None
    assert application_name is not None and model_name is not None
    return ClientPublisher(url, application_name, model_name, api_key)
