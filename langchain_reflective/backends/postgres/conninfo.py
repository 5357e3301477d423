"""The Postgres connection string: one checked connection at start-up (a wrong URL, a missing
database or bad credentials fail at once, with the server's reason), TCP keepalives by default
(a server that stops answering is noticed within a minute), and passwords kept out of the
error messages that quote it."""

from __future__ import annotations

import contextlib
import os
import re
import urllib.parse

import psycopg

from langchain_reflective.backends.postgres.failures import storage_error
from langchain_reflective.errors import StorageError

__all__ = ["CONNECT_TIMEOUT", "KEEPALIVES", "check_connection", "redacted", "with_keepalives"]


CONNECT_TIMEOUT = 10
"""Seconds :func:`check_connection` waits for the server (unless ``conninfo`` sets
``connect_timeout``)."""

KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
"""libpq's TCP keepalive settings the backend's connections get unless the connection string
sets them (:func:`with_keepalives`): a connection with nothing to send, e.g. waiting for a
statement's result, is probed after 30 s of silence, then every 10 s, and dropped after 3
unanswered probes. So a server host that stops answering (a network partition, a frozen or
powered-off host) fails the call after about a minute (as a lost connection: reads are run
again, writes say what became of them) instead of the operating system's default, over two
hours of silence. A live server's kernel answers the probes, however long its statement runs
(an index build, a lock wait): only a silent host is cut off. libpq ignores them on a Unix
socket.

``tcp_user_timeout`` is not set: it bounds data sent and not yet acknowledged (keepalives are
not sent then: a statement sent to a host that has just gone waits for TCP's retransmissions,
~15 minutes on Linux), but Linux also applies it to a server that stops reading the connection
(a ``COPY`` whose rows wait for a lock), which it would cut off. Add it to the connection
string (milliseconds, e.g. ``tcp_user_timeout=60000``) if no statement ever waits that long."""


def with_keepalives(conninfo: str) -> str:
    """``conninfo`` with each :data:`KEEPALIVES` setting it does not set itself. One that names
    a service (``service=``, or ``PGSERVICE`` in the environment) is left as it is: its service
    file may set them, and the connection string's settings would override the file's.
    ``conninfo`` must be valid (:func:`check_connection` says what is wrong with one that is
    not, without its password: call it first)."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    if "service" in given or os.environ.get("PGSERVICE"):
        return conninfo
    missing = {key: value for key, value in KEEPALIVES.items() if key not in given}
    return psycopg.conninfo.make_conninfo(conninfo, **missing) if missing else conninfo


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
