"""API-key checks on the `Authorization` header, and what each key may see.

Accepted forms: `Bearer <key>` (what AIMon's SDK sends), a bare `<key>`, and HTTP Basic with the
key as password (so a browser can open the dashboard through its own login prompt).

A key is either an admin key (every application) or scoped to some applications. A scoped key
is told "not found" about everything outside its scope, never "forbidden": a 403 would confirm
that another team's application or job exists.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from fastapi import Request

from assay.server.errors import ServerError

_BASIC_CHALLENGE = {"WWW-Authenticate": 'Basic realm="Assay", charset="UTF-8"'}


@dataclass(frozen=True)
class Access:
    """What the caller may see.

    applications: the applications its key may publish to, read and poll jobs of; None means
        every application (an admin key, or auth turned off).
    """

    applications: frozenset[str] | None = None

    def allows(self, application: str | None) -> bool:
        return self.applications is None or application in self.applications


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


def matching_key(key: str | None, keys: Iterable[str]) -> str | None:
    """The one of `keys` equal to `key` (None if none), compared in constant time to each."""
    if key is None:
        return None
    encoded = key.encode("utf-8", "surrogatepass")
    found = None
    # Compare against every key so timing does not reveal which prefix matched.
    for candidate in keys:
        if hmac.compare_digest(encoded, candidate.encode("utf-8")):
            found = candidate
    return found


def require_key(request: Request, *, browser: bool = False) -> Access:
    """What the request's key may see; a 401 ServerError unless it carries a configured key
    (everything is allowed when auth is off).

    browser: also ask the browser for credentials (Basic challenge), for HTML pages.
    """
    settings = request.app.state.settings
    if not settings.auth:
        return Access()
    header = request.headers.get("authorization")
    key = matching_key(presented_key(header), [*settings.api_keys, *settings.scoped_keys])
    if key is not None:
        return Access(settings.scoped_keys.get(key))
    reason = "missing Authorization header" if not header else "invalid API key"
    raise ServerError(
        401,
        f"{reason}: send 'Authorization: Bearer <key>' with a configured API key",
        _BASIC_CHALLENGE if browser else None,
    )
