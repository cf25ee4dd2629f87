"""Topic names: ``persistent://tenant/namespace/topic[-partition-N]``, and the rules every
name obeys.

A bare name (``events``) means ``persistent://public/default/events``, as in Pulsar.

One validation serves every entry point (REST, the Pulsar and Kafka protocols, Spark
options, view definitions) and runs before any metadata path or file path is built from a
name, because each part of a name becomes a node of the metadata store and a directory of
the object store (``<tier>/<tenant>/<namespace>/<topic>/...``):

- tenant, namespace and topic names use Pulsar's ``NamedEntity`` characters: ASCII letters,
  digits and ``_ - = : .`` (the pattern ``[-=:.\\w]*``, ``\\w`` being ASCII in Java). Pulsar
  allows anything in a topic's local name; Magnetar keeps it to the same characters, so that
  no name holds a ``/``, a ``%`` escape, a NUL, a control character or text a file system
  might normalise;
- ``.`` and ``..`` are refused (they are directories, not names), and so is the empty name;
- at most 255 characters for a tenant or a namespace (one file name on Linux file systems);
  at most 234 for a topic, not counting a ``-partition-N`` suffix, so that the name of any
  partition (up to ``-partition-2147483647``) still fits in 255. Pulsar sets no limit;
- Kafka topic names follow Kafka's own, stricter rule as well (:func:`check_kafka_topic`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.core.errors import InvalidNameError

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

MAX_NAME_LENGTH = 255  # a tenant, a namespace, a subscription, a partition's full local name
# a topic without its partition suffix: room left for "-partition-" and a 10-digit index
MAX_TOPIC_LENGTH = MAX_NAME_LENGTH - len(PARTITION_SUFFIX) - 10
KAFKA_MAX_TOPIC_LENGTH = 249  # Kafka's own limit (Topic.MAX_NAME_LENGTH)

_NAMED_ENTITY = re.compile(r"[-=:.A-Za-z0-9_]+")
_KAFKA_TOPIC = re.compile(r"[-.A-Za-z0-9_]+")
_NAMED_ENTITY_CHARS = "ASCII letters, digits and _ - = : ."
_KAFKA_CHARS = "ASCII letters, digits and _ - ."


def _shown(value: str) -> str:
    """``value`` as an error message shows it: quoted, escaped, cut short when long."""
    if len(value) <= 64:
        return repr(value)
    return f"{value[:48]!r}... ({len(value)} characters)"


def _problem(value: str, allowed: re.Pattern[str], max_length: int) -> str | None:
    """What is wrong with ``value`` under ``allowed`` and ``max_length``, or None."""
    if not value:
        return "a name cannot be empty"
    if value in (".", ".."):
        return f"{value!r} is a directory, not a name"
    if len(value) > max_length:
        return f"{len(value)} characters, longer than the limit of {max_length}"
    if not allowed.fullmatch(value):
        bad = next(c for c in value if not allowed.fullmatch(c))
        return f"the character {bad!r} is not allowed"
    return None


def _refuse(kind: str, value: str, problem: str, chars: str, max_length: int) -> InvalidNameError:
    return InvalidNameError(
        f"invalid {kind} name {_shown(value)}: {problem}; a {kind} name is 1 to {max_length} "
        f"characters among {chars}, and not '.' or '..'"
    )


def check_part(kind: str, value: str, max_length: int = MAX_NAME_LENGTH) -> str:
    """Return ``value`` if it is a legal ``kind`` name (tenant, namespace, subscription ...),
    else raise InvalidNameError saying what is wrong and what is allowed."""
    problem = _problem(value, _NAMED_ENTITY, max_length)
    if problem is not None:
        raise _refuse(kind, value, problem, _NAMED_ENTITY_CHARS, max_length)
    return value


def check_tenant(tenant: str) -> str:
    return check_part("tenant", tenant)


def check_namespace(namespace: str) -> str:
    return check_part("namespace", namespace)


def check_topic(local: str) -> str:
    """Return a topic's local name (``orders``, ``orders-partition-3``) if legal, else raise:
    the name without its partition suffix is at most MAX_TOPIC_LENGTH, the whole at most
    MAX_NAME_LENGTH."""
    base, sep, index = local.rpartition(PARTITION_SUFFIX)
    if sep and base and index.isdigit():
        check_part("topic", base, MAX_TOPIC_LENGTH)
        return check_part("topic", local)
    return check_part("topic", local, MAX_TOPIC_LENGTH)


def check_kafka_topic(topic: str) -> str:
    """Return ``topic`` if Kafka allows it (``[a-zA-Z0-9._-]``, 1 to 249 characters, not
    ``.`` or ``..``) and Magnetar too (:func:`check_topic`), else raise InvalidNameError
    (INVALID_TOPIC_EXCEPTION on the wire)."""
    problem = _problem(topic, _KAFKA_TOPIC, KAFKA_MAX_TOPIC_LENGTH)
    if problem is not None:
        raise _refuse("topic", topic, problem, _KAFKA_CHARS, KAFKA_MAX_TOPIC_LENGTH)
    return check_topic(topic)


def parse_namespace(text: str | bytes) -> tuple[str, str]:
    """``tenant/namespace`` as (tenant, namespace); InvalidNameError unless both are legal."""
    if not isinstance(text, str):  # e.g. bytes: protobuf's answer for a non-UTF-8 field
        raise InvalidNameError(f"invalid namespace name {repr(text)[:80]}: not UTF-8 text")
    parts = text.split("/")
    if len(parts) != 2:
        raise InvalidNameError(
            f"invalid namespace name {_shown(text)}: expected tenant/namespace"
            " with no '/' inside a part"
        )
    return check_tenant(parts[0]), check_namespace(parts[1])


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified topic; ``partition`` is -1 for a non-partitioned name."""

    domain: str
    tenant: str
    namespace: str
    local: str
    partition: int = -1

    @classmethod
    def parse(cls, text: str | bytes) -> TopicName:
        """The name ``text`` stands for; InvalidNameError (saying what is wrong and what is
        allowed) unless every part obeys the rules of this module. ``bytes`` is what
        protobuf hands over for a string field that is not UTF-8: always refused."""
        if not isinstance(text, str):  # e.g. bytes: protobuf's answer for a non-UTF-8 field
            raise InvalidNameError(
                f"invalid topic name {repr(text)[:80]}: not UTF-8 text; a topic name is "
                f"{_NAMED_ENTITY_CHARS}"
            )
        domain = "persistent"
        rest = text
        if "://" in text:
            domain, rest = text.split("://", 1)
            if domain not in ("persistent", "non-persistent"):
                raise InvalidNameError(
                    f"invalid topic domain {_shown(domain)} in {_shown(text)}: "
                    "use persistent:// or non-persistent://"
                )
        parts = rest.split("/")
        if len(parts) == 1:
            tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
        elif len(parts) == 3:
            tenant, namespace, local = parts
        else:
            raise InvalidNameError(
                f"invalid topic name {_shown(text)}: expected [persistent://]tenant/namespace/topic"
                " with no '/' inside a part"
            )
        check_tenant(tenant)
        check_namespace(namespace)
        check_topic(local)
        partition = -1
        base, sep, index = local.rpartition(PARTITION_SUFFIX)
        if sep and base and index.isdigit():
            partition = int(index)
        return cls(domain, tenant, namespace, local, partition)

    @property
    def namespace_name(self) -> str:
        return f"{self.tenant}/{self.namespace}"

    @property
    def base_local(self) -> str:
        """The local name without a ``-partition-N`` suffix."""
        if self.partition < 0:
            return self.local
        return self.local.rpartition(PARTITION_SUFFIX)[0]

    @property
    def base(self) -> TopicName:
        """The partitioned topic this partition belongs to (or itself)."""
        return TopicName(self.domain, self.tenant, self.namespace, self.base_local)

    def partition_name(self, index: int) -> TopicName:
        local = check_topic(f"{self.base_local}{PARTITION_SUFFIX}{index}")
        return TopicName(self.domain, self.tenant, self.namespace, local, index)

    @property
    def path(self) -> str:
        """``tenant/namespace/local``: the key used in metadata and storage."""
        return f"{self.tenant}/{self.namespace}/{self.local}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.path}"
