"""A tiny client for the admin REST API, used by ``magnetar admin``."""

from __future__ import annotations

import http.client
import json
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from magnetar.core.config import build_settings
from magnetar.core.errors import MagnetarError
from magnetar.core.names import TopicName

MAX_REDIRECTS = 5  # 307s followed (a bundle moving twice while asked)


class AdminCallError(MagnetarError):
    """The server refused the call (its reason is in the message) or could not be reached."""

    code = "cli.admin_call"
    http_status = 500
    pulsar_error = "UnknownError"
    kafka_error = "UNKNOWN_SERVER_ERROR"


class RestClient:
    def __init__(self, url: str, timeout: float = 30.0, token: str | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.token = token  # sent as Authorization: Bearer when the node authenticates

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; returns the decoded JSON answer (None for 204). A 307/308
        (another broker owns the topic or bundle) is followed with the same method and body,
        as pulsar-admin does; urllib itself re-sends only GET and HEAD."""
        data = None if body is None else json.dumps(body).encode()
        url = self.url + path
        for _ in range(MAX_REDIRECTS + 1):
            try:
                request = urllib.request.Request(url, data=data, method=method)
            except ValueError:
                raise AdminCallError(
                    f"--url must be an http(s) URL such as http://localhost:8080, got {self.url!r}"
                ) from None
            request.add_header("Content-Type", "application/json")
            if self.token:
                request.add_header("Authorization", f"Bearer {self.token}")
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    raw = response.read()
                break
            except urllib.error.HTTPError as e:
                if e.code in (307, 308) and e.headers.get("Location"):
                    url = urllib.parse.urljoin(url, e.headers["Location"])
                    continue
                raise AdminCallError(f"{_reason(e)} (HTTP {e.code} from {method} {path})") from None
            except (OSError, http.client.HTTPException) as e:  # URLError is an OSError
                reason = e.reason if isinstance(e, urllib.error.URLError) else str(e)
                raise AdminCallError(
                    f"cannot reach Magnetar at {url} ({reason or type(e).__name__}); is "
                    "`magnetar standalone` running there? Pass --url to point elsewhere"
                ) from None
        else:
            raise AdminCallError(f"more than {MAX_REDIRECTS} redirects from {method} {path}")
        return _decode(raw, f"{method} {path}")


def _decode(raw: bytes, call: str) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise AdminCallError(
            f"the answer to {call} is not JSON: is --url the Magnetar admin (HTTP) port?"
        ) from None


def _reason(e: urllib.error.HTTPError) -> str:
    try:
        body = json.loads(e.read() or b"{}")
    except ValueError:
        return str(e.reason)
    return str(body.get("reason", e.reason)) if isinstance(body, dict) else str(e.reason)


def admin_url(flag: str | None) -> str:
    """The HTTP URL of ``magnetar admin`` and ``views``: ``--url``, else ``MAGNETAR_URL``,
    else ``http://HOST:HTTP_PORT`` from the ``MAGNETAR_*`` variables as the server reads
    them (``MAGNETAR_HTTP_PORT``, ``MAGNETAR_ADVERTISED_ADDRESS``, ``MAGNETAR_BIND_ADDRESS``),
    which default to http://127.0.0.1:8080."""
    if flag:
        return flag
    if os.environ.get("MAGNETAR_URL"):
        return os.environ["MAGNETAR_URL"]
    settings = build_settings()
    host = settings.advertised_address or settings.bind_address
    host = "localhost" if host in ("", "0.0.0.0", "::") else host
    return f"http://{f'[{host}]' if ':' in host else host}:{settings.http_port}"


def topic_path(text: str) -> str:
    """``persistent://t/ns/x`` or ``x`` → ``/admin/v2/persistent/t/ns/x``."""
    name = TopicName.parse(text)
    return f"/admin/v2/persistent/{name.path}"


def namespace_path(text: str) -> str:
    tenant, sep, namespace = text.partition("/")
    if not sep or not tenant or not namespace or "/" in namespace:
        raise AdminCallError(f"namespace must be TENANT/NAMESPACE, got {text!r}")
    return f"/admin/v2/namespaces/{tenant}/{namespace}"
