"""The Assay server: AIMon-compatible HTTP API, durable async jobs and a web dashboard.

`create_app(settings)` builds the FastAPI application; `assay serve` runs it with uvicorn.
"""

from __future__ import annotations

from assay.server.app import create_app
from assay.server.settings import ServerSettings, load_api_keys

__all__ = ["ServerSettings", "create_app", "load_api_keys"]
