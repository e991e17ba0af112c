"""Open a store by what names it: a folder, or a PostgreSQL URL.

Apart from ``_store`` because the PostgreSQL room builds on the file store (``_store`` must not
import it back), and imported on use: a file store's agent never loads psycopg.
"""

from __future__ import annotations

import os

from crashpoint.checkpoint._store import Store, is_store_url

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers: True)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["open_store"]


def open_store(url_or_path: str | os.PathLike[str], **kw: Any) -> Any:
    """A :class:`PostgresStore` for a ``postgresql://`` / ``postgres://`` URL, else a file
    :class:`Store` for the folder; ``kw`` are the store's options."""
    if is_store_url(url_or_path):
        # imported here, not above: the PostgreSQL room loads psycopg, which a file store's
        # agent never needs (its face says which extra to install without it)
        from crashpoint.checkpoint.postgres import PostgresStore

        return PostgresStore(os.fspath(url_or_path), **kw)
    return Store(url_or_path, **kw)
