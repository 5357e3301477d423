"""The Postgres connection string: one checked connection at start-up (a wrong URL, a missing
database or bad credentials fail at once, with the server's reason), and passwords kept out of
the error messages that quote it."""

from __future__ import annotations

import contextlib
import re
import urllib.parse

import psycopg

from langchain_reflective.backends.postgres.failures import storage_error
from langchain_reflective.errors import StorageError

__all__ = ["CONNECT_TIMEOUT", "check_connection", "redacted"]


CONNECT_TIMEOUT = 10
"""Seconds :func:`check_connection` waits for the server (unless ``conninfo`` sets
``connect_timeout``)."""


def check_connection(conninfo: str) -> None:
    """Connect once, so a wrong URL, a missing database, bad credentials or a server that is
    down fail at once with the server's own reason (a pool keeps retrying in the background,
    and its callers wait 30 s for a "couldn't get a connection" that does not say why).

    Raises:
        StorageError: the connection failed (the message says why).
    """
    given = conninfo
    try:
        if "connect_timeout" not in psycopg.conninfo.conninfo_to_dict(conninfo):
            conninfo = psycopg.conninfo.make_conninfo(conninfo, connect_timeout=CONNECT_TIMEOUT)
    except psycopg.ProgrammingError as exc:  # (libpq's reason, without its echo of the URI)
        reason = redacted(str(exc).partition(' in URI: "')[0].strip(), given)
        raise StorageError(
            f"not a valid Postgres connection string: {reason} (characters such as / @ % in "
            "a password must be percent-encoded: %2F %40 %25)"
        ) from None
    try:
        with psycopg.connect(conninfo):
            pass
    except psycopg.Error as exc:  # (not chained: libpq's message may quote the password)
        error = storage_error(exc)
        raise type(error)(redacted(str(error), given)) from None


_URI_USERINFO = re.compile(r"^\s*[A-Za-z][\w+.-]*://(?P<userinfo>.*)@", re.DOTALL)
_PASSWORD_PARAM = re.compile(
    r"(?:^|[?&\s])password\s*=\s*(?:'(?P<quoted>(?:[^'\\]|\\.)*)'|(?P<plain>[^&\s]*))",
    re.IGNORECASE,
)
_URI_DELIMITERS = re.compile(r"[/?#@:&%]")


def redacted(message: str, conninfo: str) -> str:
    """``message`` with every password ``conninfo`` may hold written as ``***``.

    libpq quotes parts of a URL it cannot parse: a password with an unencoded ``/`` turns
    into the "port" it complains about, an unencoded ``%`` into the token it quotes. So the
    password as written, percent-decoded, and its pieces between URI delimiters (3 characters
    or more) are all replaced, longest first."""
    found: list[str] = []
    m = _URI_USERINFO.match(conninfo)
    if m and ":" in m["userinfo"]:
        found.append(m["userinfo"].split(":", 1)[1])
    found += [p["quoted"] or p["plain"] or "" for p in _PASSWORD_PARAM.finditer(conninfo)]
    with contextlib.suppress(psycopg.Error, ValueError):
        found.append(str(psycopg.conninfo.conninfo_to_dict(conninfo).get("password") or ""))
    secrets: set[str] = set()
    for password in filter(None, found):
        secrets |= {password, urllib.parse.unquote(password)}
        secrets |= {piece for piece in _URI_DELIMITERS.split(password) if len(piece) >= 3}
    for secret in sorted(secrets, key=len, reverse=True):
        message = message.replace(secret, "***")
    return message
