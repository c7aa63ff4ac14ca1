"""Every error the server sends is `{"message": ..., "status": ...}`, including FastAPI's own."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError as QueryValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from starlette.exceptions import HTTPException

logger = logging.getLogger(__name__)
#: `retry-after` on a 503 while the database cannot be reached.
DATABASE_RETRY_SECONDS = 5


class ErrorBody(BaseModel):
    """The body of every error response."""

    message: str
    status: int


class ServerError(Exception):
    """An error with its HTTP status; `headers` go on the response (e.g. `retry-after`), and
    `fields` into its JSON body beside `message` and `status`."""

    def __init__(
        self,
        status: int,
        message: str,
        headers: Mapping[str, str] | None = None,
        fields: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.fields = dict(fields or {})


def error_response(
    status: int,
    message: str,
    headers: Mapping[str, str] | None = None,
    fields: Mapping[str, Any] | None = None,
) -> JSONResponse:
    body = {**(fields or {}), "message": message, "status": status}
    return JSONResponse(body, status, headers=dict(headers or {}))


def _location(loc: Sequence[int | str]) -> str:
    """`limit` for FastAPI's ("query", "limit"): the field as the other messages name it."""
    if len(loc) > 1 and loc[0] in ("query", "path", "header", "cookie"):
        loc = loc[1:]
    return ".".join(str(part) for part in loc)


def install_error_handlers(app: FastAPI) -> None:
    """Make FastAPI's validation, routing and unexpected errors use the common shape."""

    @app.exception_handler(ServerError)
    async def _server_error(_: Request, error: ServerError) -> JSONResponse:
        return error_response(error.status, error.message, error.headers, error.fields)

    @app.exception_handler(HTTPException)
    async def _http_error(_: Request, error: HTTPException) -> JSONResponse:
        message = error.detail if isinstance(error.detail, str) else str(error.detail)
        return error_response(error.status_code, message, error.headers)

    @app.exception_handler(QueryValidationError)
    async def _validation_error(_: Request, error: QueryValidationError) -> JSONResponse:
        first = error.errors()[0] if error.errors() else {"loc": (), "msg": "invalid request"}
        message = f"{_location(first.get('loc', ()))}: {first.get('msg', 'invalid')}"
        return error_response(422, message)

    # Registered for the database's own errors so that they are handled here: an exception left
    # to the catch-all below is re-raised after its 500, and uvicorn then drops the connection.
    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    async def _database_down(_: Request, error: DBAPIError) -> JSONResponse:
        logger.warning(
            "database unavailable: %s", (str(error.orig or error).strip() or "?").splitlines()[0]
        )
        return error_response(
            503,
            "the database is unavailable; retry later",
            {"retry-after": str(DATABASE_RETRY_SECONDS)},
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, error: Exception) -> JSONResponse:
        logger.exception("unexpected error")
        return error_response(500, f"internal error: {type(error).__name__}")
