"""Topic names: ``persistent://tenant/namespace/topic[-partition-N]``.

A bare name (``events``) means ``persistent://public/default/events``, as in Pulsar.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magnetar.core.errors import InvalidNameError

DEFAULT_TENANT = "public"
DEFAULT_NAMESPACE = "default"
PARTITION_SUFFIX = "-partition-"

# Pulsar allows letters, digits and -=:.% in tenant and namespace names; topics may also
# hold '_' and '.', never '/'.
_PART = re.compile(r"^[A-Za-z0-9_\-=:.%]+$")


def check_part(kind: str, value: str) -> str:
    """Return ``value`` if it is a legal tenant/namespace/topic part, else raise."""
    if not value or not _PART.match(value):
        raise InvalidNameError(
            f"invalid {kind} name {value!r}: use letters, digits and _-=:.% only"
        )
    return value


@dataclass(frozen=True, slots=True)
class TopicName:
    """A fully qualified topic; ``partition`` is -1 for a non-partitioned name."""

    domain: str
    tenant: str
    namespace: str
    local: str
    partition: int = -1

    @classmethod
    def parse(cls, text: str) -> TopicName:
        domain = "persistent"
        rest = text
        if "://" in text:
            domain, rest = text.split("://", 1)
            if domain not in ("persistent", "non-persistent"):
                raise InvalidNameError(f"invalid topic domain {domain!r} in {text!r}")
        parts = rest.split("/")
        if len(parts) == 1:
            tenant, namespace, local = DEFAULT_TENANT, DEFAULT_NAMESPACE, parts[0]
        elif len(parts) == 3:
            tenant, namespace, local = parts
        else:
            raise InvalidNameError(
                f"invalid topic name {text!r}: expected [persistent://]tenant/namespace/topic"
            )
        check_part("tenant", tenant)
        check_part("namespace", namespace)
        check_part("topic", local)
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
        local = f"{self.base_local}{PARTITION_SUFFIX}{index}"
        return TopicName(self.domain, self.tenant, self.namespace, local, index)

    @property
    def path(self) -> str:
        """``tenant/namespace/local``: the key used in metadata and storage."""
        return f"{self.tenant}/{self.namespace}/{self.local}"

    def __str__(self) -> str:
        return f"{self.domain}://{self.path}"
