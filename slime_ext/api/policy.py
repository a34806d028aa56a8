"""Which HTTP requests the server accepts before it looks at their content.

- **Host** (DNS rebinding): when the server is bound to a loopback address, a request whose
  ``Host`` header names anything but a loopback name or address (``localhost``, ``*.localhost``,
  ``127.0.0.0/8``, ``::1``; any port) or a host listed in ``--allowed-host`` is refused with a 403.
  A web page whose domain an attacker re-points at 127.0.0.1 still sends its own domain in ``Host``.
- **Origin** (cross-site requests): browsers send ``Origin`` on every cross-origin POST; a request
  with an ``Origin`` not listed in ``--allowed-origin`` is refused with a 403. Clients that are not
  browsers (the ``openai`` SDKs, OpenClaw, curl) send no ``Origin``.
- **Content-Type**: a body must be ``application/json`` (any parameters, e.g. ``; charset=utf-8``),
  else 415: a page can POST ``text/plain`` cross-site without a CORS preflight, never JSON.
- **Content-Encoding**: ``gzip`` and ``deflate`` bodies are inflated here, at most to the body limit
  (413 past it, so a small compressed body cannot expand into gigabytes); a body that does not
  inflate is a 400 naming the encoding; other encodings are a 415.
- **HTTP/0.9** (a request line with no version): refused with a 400, the connection closed.
- **A body declared too big** (``Content-Length`` over the body limit): a 413 before any of it is
  read, the connection closed.
- **Which key was sent** (``sent_key``): ``Authorization: Bearer <key>``, else ``x-api-key: <key>``
  (Anthropic's clients send that): the same key is the same key whichever header carries it.
- **Who the user is** (``request_user``): a per-user key names its user; a request that did not
  authenticate with a per-user key cannot claim one of those names in its ``user`` field (403), so
  a shared key cannot reach a keyed user's sessions or feedback. A shared key without a ``user``
  field is one identity (``key_identity``: a hash of the key, never the key). On a server without
  keys a sent token identifies no one (the ``openai`` SDK must send one, curl sends none): every
  request that names no user is the one local user (``None``, shown as ``-``).
- **What a request may see** (``Access``) of what the server reports (``/healthz``, ``/metrics``):
  without a key, on a server that has keys, liveness and figures that identify no one; per-user and
  filesystem details need a key, and a per-user key sees only its own user's.

Everything here is a pure function of header values and bytes; each raises ``ApiError``.
"""

from __future__ import annotations

import hashlib
import ipaddress
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from slime_ext.api.errors import ApiError

JSON_TYPE = "application/json"
ENCODINGS = ("identity", "gzip", "x-gzip", "deflate")


def host_name(host_header: str) -> str:
    """The host part of a ``Host`` header value, lower-case: ``[::1]:30000`` -> ``::1``."""
    h = host_header.strip().lower()
    if h.startswith("["):
        return h[1:h.find("]")] if "]" in h else h[1:]
    if h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def is_loopback(host: str) -> bool:
    """``localhost``, a ``*.localhost`` name (always loopback, RFC 6761) or a loopback address."""
    h = host_name(host) if host.startswith("[") else host.strip().lower().rstrip(".")
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def check_host(host_header: str | None, allowed: frozenset[str]) -> None:
    """Refuse a ``Host`` that is neither loopback nor listed (for a server bound to loopback)."""
    if host_header is None:  # HTTP/1.0 without Host: not a browser
        return
    name = host_name(host_header)
    if is_loopback(name) or name in allowed:
        return
    raise ApiError(
        f"the Host header {host_header[:100]!r} is not a loopback name or address; this server is bound to "
        "loopback and refuses other names (DNS rebinding). A reverse proxy that forwards its own Host can be "
        "allowed with --allowed-host", status=403, param="host", code="host_not_allowed")


def check_http_version(version: tuple[int, int]) -> None:
    """Refuse HTTP/0.9: a request line without a version (``GET /healthz``) is not a request of this API."""
    if tuple(version) < (1, 0):
        raise ApiError("HTTP/0.9 requests (a request line without an HTTP version) are not served; send HTTP/1.1",
                       param="http-version", code="http_version_not_supported", close=True)


def check_declared_length(content_length: int | None, limit: int) -> None:
    """A 413 at once for a body declared (``Content-Length``) over ``limit`` bytes, on any endpoint: nothing
    of it is read, and the connection is closed rather than held while the rest arrives or does not."""
    if content_length is not None and content_length > limit:
        raise ApiError(f"the request body is declared as {content_length} bytes (Content-Length), larger than the "
                       f"{limit} bytes this server accepts (--max-body-mb)", status=413, code="request_too_large",
                       close=True)


def normalize_origin(origin: str) -> str:
    """``scheme://host[:port]``, lower-case, no trailing slash; ValueError when it is not an origin."""
    o = origin.strip().rstrip("/").lower()
    if o == "null":
        raise ValueError("origin 'null' (sandboxed pages, files) cannot be allowed")
    parts = urlsplit(o)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or parts.fragment:
        raise ValueError(f"allowed origin {origin!r}: expected scheme://host[:port], e.g. http://localhost:3000")
    return o


def check_origin(origin: str | None, allowed: frozenset[str]) -> bool:
    """True when the request carries an allowed ``Origin`` (CORS headers go back), False when it
    carries none; raises a 403 for any other origin."""
    if origin is None:
        return False
    if origin.strip().rstrip("/").lower() in allowed:
        return True
    raise ApiError(
        f"requests from the web origin {origin[:100]!r} are refused: a web page must not use or train this "
        "server; allow a trusted origin with --allowed-origin", status=403, param="origin", code="origin_not_allowed")


def check_content_type(content_type: str | None) -> None:
    """415 unless the body is declared ``application/json`` (parameters such as charset allowed)."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    if mime == JSON_TYPE:
        return
    got = f"{content_type[:100]!r}" if content_type else "none"
    raise ApiError(
        f"the request body must be JSON with 'Content-Type: application/json' (got {got}); with curl, pass "
        "-H 'Content-Type: application/json'", status=415, param="content-type", code="unsupported_media_type")


def decode_body(raw: bytes, encoding: str | None, limit: int) -> bytes:
    """The body with its ``Content-Encoding`` undone, never longer than ``limit`` bytes."""
    enc = (encoding or "identity").strip().lower()
    if enc in ("", "identity"):
        return raw
    if enc not in ENCODINGS:
        raise ApiError(f"Content-Encoding {encoding[:60]!r} is not supported; send the body as is, gzip or deflate",
                       status=415, param="content-encoding", code="unsupported_content_encoding")
    if enc in ("gzip", "x-gzip"):
        return _inflate(raw, zlib.MAX_WBITS | 16, enc, limit)
    # "deflate" is zlib-wrapped by the standard, but some clients send a raw deflate stream
    try:
        return _inflate(raw, zlib.MAX_WBITS, enc, limit)
    except ApiError as e:
        if e.status != 400:
            raise
        return _inflate(raw, -zlib.MAX_WBITS, enc, limit)


def _inflate(raw: bytes, wbits: int, enc: str, limit: int) -> bytes:
    d = zlib.decompressobj(wbits)
    try:
        out = d.decompress(raw, limit + 1)  # never more than one byte past the limit in memory
    except zlib.error as e:
        raise ApiError(f"the request body is not valid {enc} data (Content-Encoding: {enc}): {e}",
                       param="content-encoding", code="invalid_content_encoding") from None
    if len(out) > limit:
        raise ApiError(f"the request body is larger than {limit} bytes once decompressed ({enc})", status=413,
                       code="request_too_large")
    if not d.eof:
        raise ApiError(f"the request body is truncated {enc} data (Content-Encoding: {enc})",
                       param="content-encoding", code="invalid_content_encoding")
    if d.unused_data:
        raise ApiError(f"the request body has {len(d.unused_data)} bytes after the end of its {enc} data",
                       param="content-encoding", code="invalid_content_encoding")
    return out


def request_user(key_user: str | None, field_user: str | None, key_identity: str | None,
                 keyed_users: frozenset[str]) -> str | None:
    """Whose turn this is: the user a per-user key names, else the request's ``user`` field, else a
    hash of its key. A ``user`` field naming a keyed user is refused unless that user's key was sent."""
    if key_user:
        return key_user
    if field_user and field_user in keyed_users:
        raise ApiError(f"user {field_user!r} has a per-user API key: send that key to act as this user",
                       status=403, type="permission_error", param="user", code="user_key_required")
    return field_user or key_identity


def sent_key(headers: Mapping[str, str]) -> str | None:
    """The API key a request carries: ``Authorization: Bearer <key>``, else ``x-api-key: <key>``; None
    when it carries neither (or an empty one)."""
    auth = headers.get("Authorization", "")
    key = auth[7:].strip() if auth[:7].lower() == "bearer " else headers.get("x-api-key", "").strip()
    return key or None


def key_identity(key: str | None) -> str | None:
    """A stable, non-secret identity for an API key (never the key itself): ``key:`` and 12 hex digits."""
    if not key:
        return None
    # aiohttp decodes header bytes that are not UTF-8 to surrogates: hash the bytes that were sent
    return "key:" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:12]


@dataclass(frozen=True)
class Access:
    """What a request may see of what the server reports about itself (``/healthz``, ``/metrics``).

    ``details``: filesystem paths and error texts. ``user``: the one user whose per-user figures it sees
    (a per-user key's); ``everyone``: every user's (the shared key, or a server without keys)."""

    details: bool
    everyone: bool = False
    user: str | None = None

    def sees(self, user: str | None) -> bool:
        """May this request see ``user``'s per-user figures?"""
        return self.everyone or (self.user is not None and user == self.user)

    @property
    def sees_users(self) -> bool:
        return self.everyone or self.user is not None


OPERATOR = Access(details=True, everyone=True)  # the shared key; anyone where the server has no keys
PUBLIC = Access(details=False)  # no key, on a server that has keys: liveness and figures that identify no one
