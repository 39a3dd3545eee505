"""This process's catalog write transactions, and a way to hold new ones back.

A process that stops (SIGSTOP, a frozen VM) inside a write transaction keeps the
database's write lock: on SQLite every other process's writer then waits out its busy
timeout and fails. :func:`writes_held` lets a process stop *between* transactions (the
fault points' ``pause``): it waits for the open ones to end and keeps new ones from
beginning until it returns.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager


class _WriteGate:
    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._open = 0
        self._holder: int | None = None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Around one write transaction: it begins once no other thread holds the gate."""
        me = threading.get_ident()
        with self._changed:
            self._changed.wait_for(lambda: self._holder in (None, me))
            self._open += 1
        try:
            yield
        finally:
            with self._changed:
                self._open -= 1
                self._changed.notify_all()

    @contextmanager
    def held(self, timeout: float) -> Iterator[bool]:
        """No write transaction of another thread begins inside; yields whether every open
        one ended within ``timeout`` seconds (one of the calling thread's own cannot)."""
        me = threading.get_ident()
        with self._changed:
            self._changed.wait_for(lambda: self._holder is None)
            self._holder = me
            ended = self._changed.wait_for(lambda: self._open == 0, timeout)
        try:
            yield ended
        finally:
            with self._changed:
                self._holder = None
                self._changed.notify_all()


_gate = _WriteGate()
write_transaction = _gate.transaction


def writes_held(timeout: float = 30.0) -> AbstractContextManager[bool]:
    """See :meth:`_WriteGate.held`: the process's catalog writes, held back."""
    return _gate.held(timeout)


__all__ = ["write_transaction", "writes_held"]
