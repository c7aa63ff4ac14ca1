"""The FastAPI application: routes, error shapes, start-up (migrations, judge, job worker)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import TypeAdapter
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from assay.environment import default_judge_name
from assay.judges.batching import use_batching
from assay.schema import (
    BATCH_LIMIT_HEADER,
    DetectorError,
    DetectorResult,
    DetectRequestItem,
    InstructionResult,
    PublishRequest,
)
from assay.server import dashboard, detect, publish, read
from assay.server.errors import install_error_handlers
from assay.server.settings import ServerSettings
from assay.server.worker import JobWorker
from assay.store.session import Store

logger = logging.getLogger(__name__)


def create_app(settings: ServerSettings) -> FastAPI:
    """Build the server. Nothing touches the database or loads a model until it starts.

    settings: see `ServerSettings`.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await asyncio.to_thread(app.state.store.migrate)
        # Loads the default judge now, so the first request is not the one paying for it.
        await asyncio.to_thread(use_batching, default_judge_name(), settings.batch_window_seconds)
        worker = JobWorker(app.state.store, settings)
        app.state.worker = worker
        worker.start()
        logger.info("Assay server ready (auth %s)", "on" if settings.auth else "OFF")
        try:
            yield
        finally:
            await worker.stop()
            app.state.store.close()

    app = FastAPI(
        title="Assay",
        summary="AIMon-compatible detectors for LLM outputs, with storage and a dashboard.",
        version="0.1.0",
        lifespan=lifespan,
        # FastAPI's /docs and /redoc pages load their scripts from a CDN: blank offline, and a
        # call out of a tool that otherwise makes none. /openapi.json opens in any viewer.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.store = Store(settings.database_url, settings.database_pool_size)
    app.state.in_flight = 0
    install_error_handlers(app)
    app.add_middleware(BatchLimitHeader, limit=settings.max_batch_items)
    # The API's routes refuse a NUL in their URL with a JSON 422; the dashboard does the same
    # check itself, answering with a page.
    no_nul = [Depends(read.refuse_nul_in_url)]
    app.include_router(detect.router, dependencies=no_nul)
    app.include_router(read.router, dependencies=no_nul)
    app.include_router(publish.router, dependencies=no_nul)
    app.include_router(dashboard.router)
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


class BatchLimitHeader:
    """Adds `BATCH_LIMIT_HEADER` to every response, errors included (a plain ASGI middleware:
    Starlette's `BaseHTTPMiddleware` would stand between routes and the client's disconnect).
    """

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.header = (BATCH_LIMIT_HEADER.lower().encode(), str(limit).encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), self.header]
            await send(message)

        await self.app(scope, receive, send_with_header if scope["type"] == "http" else send)


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI's document plus the request item schema the detect routes read by hand."""
    if app.openapi_schema:
        return app.openapi_schema
    document = get_openapi(
        title=app.title, version=app.version, summary=app.summary, routes=app.routes
    )
    item_schema = TypeAdapter(DetectRequestItem).json_schema(
        ref_template="#/components/schemas/{model}"
    )
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(item_schema.pop("$defs", {}))
    schemas["DetectRequestItem"] = item_schema
    # The detect routes build their answers by hand; name the shapes they hold.
    for model in (InstructionResult, DetectorResult, DetectorError, PublishRequest):
        model_schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(model_schema.pop("$defs", {}))
        schemas[model.__name__] = model_schema
    document["components"]["securitySchemes"] = {
        "apiKey": {"type": "http", "scheme": "bearer", "description": "A configured API key."}
    }
    app.openapi_schema = document
    return document
