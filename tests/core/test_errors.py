"""Every MagnetarError class declares its wire codes (http_status, pulsar_error,
kafka_error), itself or through its area's root: a class added without them fails here
instead of answering every wire as an unknown server fault unnoticed. The servers' tables
(tests/http/test_error_statuses.py, tests/protocols/pulsar/test_error_map.py,
tests/kafka/test_error_codes.py) check what each declared code becomes on its wire."""

from __future__ import annotations

from magnetar.core.errors import MagnetarError
from magnetar.testing.errors import WIRE_CODES, declared_by, declares_wire_codes
from tests.errors_table import ERROR_CLASSES, EVERY_ERROR_CLASS


def test_the_walk_finds_every_area() -> None:
    modules = {c.__module__.split(".")[1] for c in ERROR_CLASSES}
    assert {"broker", "storage", "meta", "tier", "views", "protocols", "core"} <= modules
    assert len(ERROR_CLASSES) > 80


@EVERY_ERROR_CLASS
def test_every_error_class_declares_its_wire_codes(cls: type[MagnetarError]) -> None:
    assert declares_wire_codes(cls), (
        f"{cls.__qualname__} declares none of {', '.join(WIRE_CODES)} and derives them from "
        "no class that does: say how each wire answers it (500, UnknownError, "
        "UNKNOWN_SERVER_ERROR for a server fault), or derive from its area's root"
    )


def test_a_class_without_wire_codes_is_caught() -> None:
    class Undeclared(MagnetarError):
        code = "test.undeclared"

    class KafkaOnly(MagnetarError):
        code = "test.kafka_only"
        kafka_error = "INVALID_REQUEST"

    class Below(KafkaOnly):
        code = "test.below"

    assert not declares_wire_codes(Undeclared)
    assert declares_wire_codes(KafkaOnly) and declares_wire_codes(Below)
    assert declared_by(Below, "kafka_error") is KafkaOnly
    assert declared_by(Below, "http_status") is MagnetarError
