"""Watches of the ZooKeeper metadata store: other processes' changes (a recursive cache of
the watched subtree) and the session's state, as the owners of ephemeral nodes must see it.
See :mod:`magnetar.meta.zookeeper`."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.protocol.states import KazooState
from kazoo.recipe.cache import TreeCache, TreeEvent

from magnetar.meta.base import Notification, SessionState, Stat, Versioned, Watcher
from magnetar.meta.rules import deliver

if TYPE_CHECKING:
    from magnetar.meta.zookeeper import ZooKeeperMetadataStore

log = logging.getLogger(__name__)


class RemoteWatch:
    """Changes other processes make at or under ``prefix``, through kazoo's TreeCache.

    Our own writes are announced to it before they commit (``expect_*``), so their echo
    from ZooKeeper is recognised and dropped: the local notification already went out.
    """

    def __init__(
        self,
        store: ZooKeeperMetadataStore,
        prefix: str,
        callback: Watcher,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.store = store
        self.callback = callback
        self.loop = loop
        self.known: dict[str, bool] = {}  # path → had a value when last seen
        self.own_writes: set[tuple[str, int, int]] = set()  # (path, version, created_ms)
        self.own_deletes: Counter[str] = Counter()
        self.initialized = False
        self.cache = TreeCache(store._zk, store._zpath(prefix))
        self.decode: Callable[[bytes], Versioned | None] = store.decode

    def start(self) -> None:
        self.cache.listen(self._on_event)
        self.cache.start()

    def close(self) -> None:
        self.cache.close()

    def expect_write(self, path: str, stat: Stat) -> None:
        self.own_writes.add((path, stat.version, stat.created_ms))

    def expect_delete(self, path: str) -> None:
        self.own_deletes[path] += 1

    def forget(self, path: str, stat: Stat | None) -> None:
        """A write announced with ``expect_*`` did not commit."""
        if stat is not None:
            self.own_writes.discard((path, stat.version, stat.created_ms))
        elif self.own_deletes[path] > 0:
            self.own_deletes[path] -= 1

    def _on_event(self, event: Any) -> None:  # on kazoo's thread
        if event.event_type == TreeEvent.INITIALIZED:
            self.initialized = True
            return
        if event.event_type not in (
            TreeEvent.NODE_ADDED,
            TreeEvent.NODE_UPDATED,
            TreeEvent.NODE_REMOVED,
        ):
            return
        note = self._note(event)
        if note is not None and self.initialized and not self.store._closed:
            self.loop.call_soon_threadsafe(deliver, self.callback, note)

    def _note(self, event: Any) -> Notification | None:
        """The notification for another process's change, or None (ours, already notified;
        or an implicit parent coming and going)."""
        zpath, data = event.event_data.path, event.event_data.data or b""
        path = self.store.store_path(zpath)
        had = self.known.get(path, False)
        if event.event_type == TreeEvent.NODE_REMOVED or not data:
            self.known.pop(path, None)
            if not had:
                return None
            if self.own_deletes[path] > 0:
                self.own_deletes[path] -= 1
                return None
            return Notification(path, "deleted")
        node = self.decode(data)
        assert node is not None
        self.known[path] = True
        own = (path, node.stat.version, node.stat.created_ms)
        if own in self.own_writes:
            self.own_writes.discard(own)
            return None
        return Notification(path, "modified" if had else "created")


class SessionWatch:
    """The session's state as the owner of ephemeral nodes must see it.

    kazoo says SUSPENDED when the connection drops and LOST only once it reconnects and
    learns the session expired — far too late for an owner: the server expires a silent
    session after its timeout and others take over at once. So a suspension that lasts
    the session timeout counts as LOST here, on our own clock, before anyone else can
    act on the expiry.
    """

    def __init__(self, store: ZooKeeperMetadataStore) -> None:
        self.store = store
        self.callbacks: list[Callable[[SessionState], None]] = []
        self.state = SessionState.CONNECTED
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()
        self._given_up: int | None = None  # the session id counted LOST on our own clock

    def add(self, callback: Callable[[SessionState], None]) -> Callable[[], None]:
        self.callbacks.append(callback)

        def cancel() -> None:
            if callback in self.callbacks:
                self.callbacks.remove(callback)

        return cancel

    def on_state(self, state: Any) -> None:  # on kazoo's thread
        with self._lock:
            if state == KazooState.SUSPENDED:
                self._change(SessionState.SUSPENDED)
                self._timer = threading.Timer(self.store.session_timeout, self._expired)
                self._timer.daemon = True
                self._timer.start()
            elif state == KazooState.LOST:
                self._cancel_timer()
                self._change(SessionState.LOST)
            elif state == KazooState.CONNECTED:
                self._cancel_timer()
                if self._revived():
                    return  # not CONNECTED yet: that comes with the new session
                self._change(SessionState.CONNECTED)

    def _revived(self) -> bool:
        """Connected again with the session given up on (a connect request with its id was
        already in flight when it was reset, and the thawed server had not expired it):
        its ephemeral nodes are alive again for an owner that stopped acting on them. Close
        it (the server deletes them) and start a new one, off kazoo's thread."""
        session_id = self.store._zk._session_id
        if self._given_up is None or session_id != self._given_up:
            self._given_up = None
            return False
        log.warning("ZooKeeper revived session 0x%x, given up on: closing it", session_id)
        threading.Thread(target=self._renew, name="zk-renew", daemon=True).start()
        return True

    def _renew(self) -> None:
        try:
            self.store._zk.restart()  # stop closes the session; start opens a new one
        except Exception:  # the store reports the outage through its calls meanwhile
            log.exception("could not replace the revived ZooKeeper session")

    def _expired(self) -> None:
        with self._lock:
            if self.state is SessionState.SUSPENDED:
                # Never reconnect with this session: a server that was frozen or cut off
                # may not have expired it yet and would revive it, ephemeral nodes and
                # all, for an owner that has already stopped acting on them. Curator does
                # the same ("injected" session expiration); the server expires the old
                # session on its own, since nobody speaks for it any more.
                # kazoo's public client_id is None while suspended (it is only given while
                # connected), so the id is read where kazoo keeps it.
                self._given_up = self.store._zk._session_id
                log.info("ZooKeeper session 0x%x given up on our clock", self._given_up or 0)
                self.store._zk._reset_session()
                self._change(SessionState.LOST)

    def _change(self, state: SessionState) -> None:
        if state is self.state:
            return
        self.state = state
        loop = self.store._loop
        if loop is None or self.store._closed:
            return
        for callback in list(self.callbacks):
            loop.call_soon_threadsafe(_call_listener, callback, state)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        with self._lock:
            self._cancel_timer()
            self.callbacks.clear()


def _call_listener(callback: Callable[[SessionState], None], state: SessionState) -> None:
    try:
        callback(state)
    except Exception:
        log.exception("session listener %r failed on %s", callback, state)
