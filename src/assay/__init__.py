"""Assay: judge the outputs of LLM applications with AIMon-compatible detectors.

`from assay import Client, AsyncClient, Detect, detect` gives the Python API. Names are imported
on first use, so `import assay` itself does no work (no model, no network).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from assay.client import (
        AsyncClient,
        Client,
        DetectResponse,
        DetectResponseItem,
        Job,
        JobWaitTimeout,
    )
    from assay.decorator import Detect, DetectResult, detect
    from assay.schema import AssayError, DetectorFailed, RequestValidationError
    from assay.transport import (
        APIConnectionError,
        APIError,
        APITimeoutError,
        AuthenticationError,
        BadRequestError,
        ConflictError,
        InternalServerError,
        NotFoundError,
        PayloadTooLargeError,
        PermissionDeniedError,
        RateLimitError,
        RequestTimeoutError,
        UnprocessableEntityError,
    )

__version__ = "0.1.0"

_CLIENT_NAMES = (
    "AsyncClient",
    "Client",
    "DetectResponse",
    "DetectResponseItem",
    "Job",
    "JobWaitTimeout",
)
_DECORATOR_NAMES = ("Detect", "DetectResult", "detect")
_TRANSPORT_NAMES = (
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AuthenticationError",
    "BadRequestError",
    "ConflictError",
    "InternalServerError",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTimeoutError",
    "UnprocessableEntityError",
)
_SCHEMA_NAMES = ("AssayError", "DetectorFailed", "RequestValidationError")
_LAZY: dict[str, str] = {
    **{name: "assay.client" for name in _CLIENT_NAMES},
    **{name: "assay.decorator" for name in _DECORATOR_NAMES},
    **{name: "assay.transport" for name in _TRANSPORT_NAMES},
    **{name: "assay.schema" for name in _SCHEMA_NAMES},
}

__all__ = [
    "APIConnectionError",
    "APIError",
    "APITimeoutError",
    "AssayError",
    "AsyncClient",
    "AuthenticationError",
    "BadRequestError",
    "Client",
    "ConflictError",
    "Detect",
    "DetectResponse",
    "DetectResponseItem",
    "DetectResult",
    "DetectorFailed",
    "InternalServerError",
    "Job",
    "JobWaitTimeout",
    "NotFoundError",
    "PayloadTooLargeError",
    "PermissionDeniedError",
    "RateLimitError",
    "RequestTimeoutError",
    "RequestValidationError",
    "UnprocessableEntityError",
    "__version__",
    "detect",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'assay' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
