"""A fault-injecting object store: what tiered storage does when the store misbehaves.

:class:`FaultyObjectStore` wraps a real :class:`ObjectStore` and passes every call through
until a test switches a fault on::

    store = FaultyObjectStore(LocalObjectStore(tmp_path))
    store.fail("put")                  # every put raises ObjectStoreUnavailableError ...
    store.heal()                       # ... until healed
    store.fail("get", times=1)         # only the next get fails
    store.fail("put", partial=True)    # leave a half-written temporary object, then fail
    store.fail("put", after=True)      # the write lands, but the caller is told it failed
    store.corrupt("get")               # get returns the object with one byte flipped
    gate = store.block("put")          # put waits until gate.release() (crash tests kill
                                       # the process while gate.reached is set)

``store.calls["put"]`` counts the calls of each operation, failed ones included.
Blocking like every store: call it from worker threads.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field

import pyarrow as pa

from magnetar.tier import ObjectStore, ObjectStoreUnavailableError
from magnetar.tier.object_store import TMP_MARK

OPERATIONS = ("put", "get", "open", "size", "exists", "delete", "list")
GATE_TIMEOUT = 120.0  # a blocked call gives up after this long, so a forgotten gate never hangs


@dataclass
class _Fault:
    times: int | None  # failures left; None = until healed
    partial: bool  # put: write half of the object under a temporary key first
    after: bool  # put/delete: do the real call, then raise anyway


@dataclass
class Gate:
    """Holds a blocked operation: ``reached`` is set when a call arrives and waits."""

    reached: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)

    def release(self) -> None:
        self.released.set()


class FaultyObjectStore(ObjectStore):
    """A real store with switchable failures on each operation (see the module doc)."""

    def __init__(self, inner: ObjectStore) -> None:
        super().__init__(inner.fs, inner.url)
        self.inner = inner
        self.calls: Counter[str] = Counter()
        self._faults: dict[str, _Fault] = {}
        self._corrupt: set[str] = set()
        self._gates: dict[str, Gate] = {}
        self._lock = threading.Lock()

    # -- switches -------------------------------------------------------------------------

    def fail(
        self, op: str, *, times: int | None = None, partial: bool = False, after: bool = False
    ) -> None:
        """Make ``op`` raise ObjectStoreUnavailableError (``times`` times, or until healed)."""
        _check(op)
        if (partial or after) and op not in ("put", "delete"):
            raise ValueError("partial/after faults apply to put and delete only")
        with self._lock:
            self._faults[op] = _Fault(times, partial, after)

    def corrupt(self, op: str = "get") -> None:
        """``get`` (or ``open``) returns the object with its middle byte flipped."""
        if op not in ("get", "open"):
            raise ValueError("only get and open can return corrupt bytes")
        self._corrupt.add(op)

    def block(self, op: str) -> Gate:
        """Make the next calls of ``op`` wait (before touching the store) until released."""
        _check(op)
        gate = Gate()
        with self._lock:
            self._gates[op] = gate
        return gate

    def heal(self) -> None:
        """Every operation works again; blocked calls go on."""
        with self._lock:
            self._faults.clear()
            self._corrupt.clear()
            gates, self._gates = list(self._gates.values()), {}
        for gate in gates:
            gate.release()

    # -- the store --------------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> None:
        # A partial fault writes its half object before the gate: a test that blocks the
        # put and kills the process then finds what a cut-off upload leaves behind.
        fault = self._take_fault("put")
        if fault is not None and fault.partial:
            self._write_half(key, data)
        self._wait_at_gate("put", key)
        if fault is None or fault.after:
            self.inner.put(key, data)
        if fault is not None:
            raise _failure("put", key)

    def get(self, key: str) -> bytes:
        self._raise_if_faulty("get", key)
        data = self.inner.get(key)
        return _flip(data) if "get" in self._corrupt else data

    def open(self, key: str) -> pa.NativeFile:
        self._raise_if_faulty("open", key)
        if "open" in self._corrupt:
            return pa.BufferReader(_flip(self.inner.get(key)))
        return self.inner.open(key)

    def size(self, key: str) -> int:
        self._raise_if_faulty("size", key)
        return self.inner.size(key)

    def exists(self, key: str) -> bool:
        self._raise_if_faulty("exists", key)
        return self.inner.exists(key)

    def delete(self, key: str) -> None:
        fault = self._enter("delete", key)
        if fault is None or fault.after:
            self.inner.delete(key)
        if fault is not None:
            raise _failure("delete", key)

    def list(self, prefix: str = "") -> list[str]:
        self._raise_if_faulty("list", prefix)
        return self.inner.list(prefix)

    # -- machinery ----------------------------------------------------------------------------

    def _write_half(self, key: str, data: bytes) -> None:
        """What an upload cut off mid-way leaves: half the bytes under a temporary key."""
        parent = key.rpartition("/")[0]
        if parent:
            self.inner.fs.create_dir(parent, recursive=True)
        with self.inner.fs.open_output_stream(f"{key}{TMP_MARK}faulty") as out:
            out.write(data[: len(data) // 2])

    def _raise_if_faulty(self, op: str, key: str) -> None:
        if self._enter(op, key) is not None:
            raise _failure(op, key)

    def _enter(self, op: str, key: str) -> _Fault | None:
        """Count the call, wait at a gate, and return the fault to apply (if any)."""
        fault = self._take_fault(op)
        self._wait_at_gate(op, key)
        return fault

    def _wait_at_gate(self, op: str, key: str) -> None:
        with self._lock:
            gate = self._gates.get(op)
        if gate is not None:
            gate.reached.set()
            if not gate.released.wait(GATE_TIMEOUT):
                raise _failure(op, key, "blocked call was never released")

    def _take_fault(self, op: str) -> _Fault | None:
        """Count the call; the fault to apply to it, if any (one of ``times`` used up)."""
        with self._lock:
            self.calls[op] += 1
            fault = self._faults.get(op)
            if fault is None:
                return None
            if fault.times is not None:
                fault.times -= 1
                if fault.times <= 0:
                    del self._faults[op]
            return fault


def _check(op: str) -> None:
    if op not in OPERATIONS:
        raise ValueError(f"unknown operation {op!r}: use one of {', '.join(OPERATIONS)}")


def _failure(op: str, key: str, why: str = "injected fault") -> ObjectStoreUnavailableError:
    return ObjectStoreUnavailableError(f"{op} {key!r} failed: {why}")


def _flip(data: bytes) -> bytes:
    if not data:
        return data
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]


__all__ = ["OPERATIONS", "FaultyObjectStore", "Gate"]
