"""API-key checks on the `Authorization` header.

Accepted forms: `Bearer <key>` (what AIMon's SDK sends), a bare `<key>`, and HTTP Basic with the
key as password (so a browser can open the dashboard through its own login prompt).
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable

from fastapi import Request

from assay.server.errors import ServerError

_BASIC_CHALLENGE = {"WWW-Authenticate": 'Basic realm="Assay", charset="UTF-8"'}


def presented_key(header: str | None) -> str | None:
    """The key carried by an `Authorization` header value, or None if there is none."""
    if header is None or not header.strip():
        return None
    scheme, _, rest = header.strip().partition(" ")
    if scheme.lower() == "bearer":
        return rest.strip() or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(rest.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return header.strip()


def key_is_valid(key: str | None, keys: Iterable[str]) -> bool:
    """Whether `key` is one of `keys`, compared in constant time against each."""
    if key is None:
        return False
    encoded = key.encode("utf-8")
    # Compare against every key so timing does not reveal which prefix matched.
    matches = [hmac.compare_digest(encoded, candidate.encode("utf-8")) for candidate in keys]
    return any(matches)


def require_key(request: Request, *, browser: bool = False) -> None:
    """Raise a 401 ServerError unless the request carries a valid key (or auth is off).

    browser: also ask the browser for credentials (Basic challenge), for HTML pages.
    """
    settings = request.app.state.settings
    if not settings.auth:
        return
    header = request.headers.get("authorization")
    if key_is_valid(presented_key(header), settings.api_keys):
        return
    reason = "missing Authorization header" if not header else "invalid API key"
    raise ServerError(
        401,
        f"{reason}: send 'Authorization: Bearer <key>' with a configured API key",
        _BASIC_CHALLENGE if browser else None,
    )
