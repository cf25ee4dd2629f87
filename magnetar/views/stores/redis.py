"""Redis state store (redis-py). Read a view with redis-cli::

    GET mv:alias:orders            -> "orders__v1"   (the current dataset)
    GET mv:orders__v1:alice        -> {"n":3,"total":42,"user":"alice"}

Shape: ``mv:<dataset>:<key>`` a string holding the row as JSON; ``mv:<dataset>:keys`` a
sorted set of every key (score 0, so ``ZRANGE ... BYLEX`` lists them in key order);
``mv:<dataset>:position`` a hash {batch_id, offsets, committed_ms, epoch}; ``mv:alias:<view>``.
A commit is one MULTI/EXEC transaction guarded by WATCH on the position key.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any

from magnetar.views.errors import InvalidViewError, StateStoreError, ViewFencedError
from magnetar.views.model import Offsets, Position, encode_row
from magnetar.views.stores.base import StateStore


def _driver() -> Any:
    try:
        import redis
    except ImportError:
        raise InvalidViewError(
            "the Redis state store needs redis: pip install 'redis>=5'"
        ) from None
    return redis


class RedisStateStore(StateStore):
    def __init__(self, url: str) -> None:
        self.url = url
        self._redis = _driver()
        try:
            self._db = self._redis.Redis.from_url(url, socket_timeout=30)
            self._db.ping()
        except self._redis.RedisError as e:
            raise StateStoreError(f"cannot reach the Redis state store {url}: {e}") from None

    def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except self._redis.RedisError as e:
            raise StateStoreError(f"Redis {what} failed: {e}") from None

    def position(self, dataset: str) -> Position | None:
        return _position(self._call("read", self._db.hgetall, f"mv:{dataset}:position"))

    def fence(self, dataset: str, epoch: int) -> Position | None:
        key = f"mv:{dataset}:position"

        def raise_epoch(pipe: Any) -> Position | None:
            raw = pipe.hgetall(key)
            if int(raw.get(b"epoch", 0)) > epoch:
                raise ViewFencedError(f"{dataset} is led at epoch {int(raw[b'epoch'])}")
            pipe.multi()
            if not raw:
                pipe.hset(key, mapping={"batch_id": -1, "offsets": "{}", "committed_ms": 0})
            pipe.hset(key, "epoch", epoch)
            return _position(raw)

        found: Position | None = self._call(
            f"fence of {dataset}",
            lambda: self._db.transaction(raise_epoch, key, value_from_callable=True),
        )
        return found

    def commit(
        self,
        dataset: str,
        batch_id: int,
        offsets: Offsets,
        upserts: Mapping[str, Mapping[str, Any]],
        deletes: Iterable[str] = (),
        epoch: int = 0,
    ) -> bool:
        deletes = list(deletes)

        def apply(pipe: Any) -> bool:
            stored, stored_epoch = pipe.hmget(f"mv:{dataset}:position", "batch_id", "epoch")
            if stored_epoch is not None and int(stored_epoch) > epoch:
                raise ViewFencedError(f"{dataset} is led at epoch {int(stored_epoch)}")
            if stored is not None and batch_id <= int(stored):
                return False
            pipe.multi()
            for key, row in upserts.items():
                pipe.set(f"mv:{dataset}:{key}", encode_row(row))
            if upserts:
                pipe.zadd(f"mv:{dataset}:keys", dict.fromkeys(upserts, 0))
            for key in deletes:
                pipe.delete(f"mv:{dataset}:{key}")
            if deletes:
                pipe.zrem(f"mv:{dataset}:keys", *deletes)
            position = {
                "batch_id": batch_id,
                "offsets": json.dumps(offsets, sort_keys=True),
                "committed_ms": int(time.time() * 1000),
                "epoch": epoch,
            }
            pipe.hset(f"mv:{dataset}:position", mapping=position)
            return True

        result: bool = self._call(
            f"commit of {dataset}",
            lambda: self._db.transaction(apply, f"mv:{dataset}:position", value_from_callable=True),
        )
        return result

    def get_many(self, dataset: str, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        wanted = list(keys)
        if not wanted:
            return {}
        values = self._call("read", self._db.mget, [f"mv:{dataset}:{k}" for k in wanted])
        return {k: json.loads(v) for k, v in zip(wanted, values, strict=True) if v is not None}

    def scan(self, dataset: str, limit: int) -> list[dict[str, Any]]:
        keys = self._call("read", self._db.zrangebylex, f"mv:{dataset}:keys", "-", "+", 0, limit)
        found = self.get_many(dataset, [k.decode() for k in keys])
        return [found[k.decode()] for k in keys if k.decode() in found]

    def count(self, dataset: str) -> int:
        return int(self._call("read", self._db.zcard, f"mv:{dataset}:keys"))

    def alias(self, view: str, dataset: str) -> None:
        self._call("alias", self._db.set, f"mv:alias:{view}", dataset)

    def drop(self, dataset: str) -> None:
        keys = [
            k.decode() for k in self._call("read", self._db.zrange, f"mv:{dataset}:keys", 0, -1)
        ]
        pipe = self._db.pipeline(transaction=True)
        for i in range(0, len(keys), 1000):
            pipe.delete(*[f"mv:{dataset}:{k}" for k in keys[i : i + 1000]])
        pipe.delete(f"mv:{dataset}:keys", f"mv:{dataset}:position")
        self._call("drop", pipe.execute)

    def drop_alias(self, view: str) -> None:
        self._call("drop", self._db.delete, f"mv:alias:{view}")

    def close(self) -> None:
        self._db.close()


def _position(raw: dict[bytes, bytes]) -> Position | None:
    """The position hash as a Position; None when nothing was committed (no hash, or only
    a fence)."""
    if not raw or int(raw[b"batch_id"]) < 0:
        return None
    epoch = int(raw.get(b"epoch", 0))
    return Position(
        int(raw[b"batch_id"]), json.loads(raw[b"offsets"]), int(raw[b"committed_ms"]), epoch
    )
