"""Read grants: the Flight endpoint checks the credential a Spark plan was issued for.

With authorization on, the HTTP plan endpoint (which needs ``consume``) hands each partition
a grant: ``ROLE:EXPIRY:MAC``, an HMAC-SHA256 under a secret of this node over the partition,
the role and the expiry (``hmac`` from the standard library). An executor's Flight ticket
carries it back; the Flight server reads a partition only for a valid grant naming that
partition, so Flight reads are exactly as allowed as the plan request was. Grants last an
hour; a longer job asks for a new plan (Spark's streaming reads plan each micro-batch).
"""

from __future__ import annotations

import hashlib
import hmac
import time

from magnetar.core.errors import MagnetarError

GRANT_SECONDS = 3600


class GrantError(MagnetarError):
    """A Flight read without a valid grant for its partition: ask for a new plan."""

    code = "auth.grant"
    http_status = 403
    pulsar_error = "AuthorizationError"
    kafka_error = "TOPIC_AUTHORIZATION_FAILED"


class ReadGrants:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret

    def _mac(self, partition: str, role: str, expiry: int) -> str:
        message = f"{partition}|{role}|{expiry}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def issue(self, partition: str, role: str, seconds: int = GRANT_SECONDS) -> str:
        expiry = int(time.time()) + seconds
        return f"{role}:{expiry}:{self._mac(partition, role, expiry)}"

    def check(self, partition: str, grant: str) -> str:
        """The role the grant was issued to; GrantError if it is not valid for ``partition``."""
        parts = grant.rsplit(":", 2)
        if len(parts) != 3 or not parts[1].isdigit():
            raise GrantError("no valid read grant: get a plan from the HTTP endpoint first")
        role, expiry, mac = parts[0], int(parts[1]), parts[2]
        if not hmac.compare_digest(mac, self._mac(partition, role, expiry)):
            raise GrantError(f"the read grant is not for {partition}")
        if time.time() > expiry:
            raise GrantError("the read grant has expired: plan the read again")
        return role
