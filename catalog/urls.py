"""Catalog URLs as text: where the embedded catalog lives, and passwords masked. No
SQLAlchemy: the read path of the command line resolves a URL without it."""

from __future__ import annotations

import os
import re
from pathlib import Path

from catalog.errors import CatalogUrlError

SUPPORTED_URLS = (
    "sqlite:///PATH (a file)",
    "sqlite:// or memory:// (in memory, this process only)",
    "postgresql://USER:PASSWORD@HOST:PORT/DATABASE (also postgres:// and postgresql+psycopg://)",
)

_USER_COLON = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/]*):(?P<rest>.*)$", re.S)


def url_password(url: str) -> str | None:
    """The password in ``url`` as written, or None: everything between ``scheme://user:``
    (a user name may hold ``@``) and the URL's last ``@``. A password holding unencoded
    ``@ : / # ? %`` is found whole; where a query holds an ``@`` this takes in more than
    the password, never less."""
    match = _USER_COLON.match(url)
    if match is None or "@" not in match["rest"]:
        return None
    return match["rest"].rsplit("@", 1)[0] or None


def mask_url(url: str) -> str:
    """``url`` with its password (see :func:`url_password`) replaced by ``***``, even if
    the URL does not parse."""
    match = _USER_COLON.match(url)
    if match is None or url_password(url) is None:
        return url
    return f"{match['head']}:***@{match['rest'].rsplit('@', 1)[1]}"


CATALOG_FILE_NAME = "_catalog.sqlite"
"""The embedded catalog's file name inside the warehouse."""


def catalog_url(url: str | None, *, warehouse: str | os.PathLike[str] | None) -> str:
    """``url``, or when it is None the embedded SQLite catalog of a local ``warehouse``."""
    if url is not None:
        return url
    if warehouse is None:
        raise CatalogUrlError(
            url="",
            reason="give a catalog URL or a local warehouse directory; supported URLs: "
            + "; ".join(SUPPORTED_URLS),
        )
    location = os.fspath(warehouse)
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    elif "://" in location:
        raise CatalogUrlError(
            url=mask_url(location),
            reason="the embedded SQLite catalog needs a local warehouse directory; "
            "for a warehouse on object storage give a PostgreSQL catalog URL",
        )
    return f"sqlite:///{Path(location).expanduser().resolve() / CATALOG_FILE_NAME}"


__all__ = [
    "CATALOG_FILE_NAME",
    "SUPPORTED_URLS",
    "catalog_url",
    "mask_url",
    "url_password",
]
