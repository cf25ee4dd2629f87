"""``magnetar views create|list|get|watch|rows|delete|as-of``: the views API over REST.

Each command is one call to ``/views`` on the standalone's HTTP port; results print as JSON.
A refused call prints the server's reason and exits with code 1. ``create --wait`` and
``watch`` poll the view and draw its backfill's progress on stderr until it is LIVE.
"""

from __future__ import annotations

import argparse
import json
import urllib.parse
from typing import Any

from magnetar.cli.progress import watch_view
from magnetar.cli.rest import AdminCallError, RestClient, admin_url


def _create(a: argparse.Namespace, r: RestClient) -> Any:
    body: dict[str, Any] = {"source": a.source, "key": a.key, "store": a.store}
    if (a.sql is None) == (a.python is None):
        raise AdminCallError("give exactly one of --sql or --python")
    body.update({"sql": a.sql} if a.sql is not None else {"python": a.python})
    if a.on_unparsed:
        body["onUnparsed"] = a.on_unparsed
    created = r.call("PUT", f"/views/{_q(a.name)}", body)
    return watch_view(r, _q(a.name)) if a.wait else created


def _rows(a: argparse.Namespace, r: RestClient) -> Any:
    query: dict[str, str] = {"limit": str(a.limit)}
    for item in a.where or []:
        column, sep, value = item.partition("=")
        if not sep:
            raise AdminCallError(f"--where takes COLUMN=VALUE, got {item!r}")
        query[column] = value
    return r.call("GET", f"/views/{_q(a.name)}/rows?{urllib.parse.urlencode(query)}")["rows"]


def _as_of(a: argparse.Namespace, r: RestClient) -> Any:
    if (a.timestamp is None) == (a.offsets is None):
        raise AdminCallError("give exactly one of --timestamp or --offsets")
    body: dict[str, Any] = {"timestamp": a.timestamp} if a.timestamp is not None else {}
    if a.offsets is not None:
        try:
            body["offsets"] = json.loads(a.offsets)
        except ValueError as e:
            raise AdminCallError(
                f'--offsets must be JSON like {{"topic": {{"0": 42}}}}: {e}'
            ) from None
    if a.label:
        body["label"] = a.label
    return r.call("POST", f"/views/{_q(a.name)}/as-of", body)


def _q(name: str) -> str:
    return urllib.parse.quote(name, safe="@")


_NAME = (["name"], {"help": "view name (NAME, or NAME@LABEL for an as-of view)"})
COMMANDS: list[tuple[str, str, list[tuple[list[str], dict[str, Any]]], Any]] = [
    (
        "create",
        "create a view, or a new version of it (it backfills, then swaps in)",
        [
            _NAME,
            (["--source", "-s"], {"required": True, "help": "topic, or topics comma-separated"}),
            (["--sql"], {"help": "Spark SQL over the table events"}),
            (["--python"], {"help": "module:function, apply(state, event) -> state"}),
            (["--key", "-k"], {"required": True, "action": "append", "help": "key column"}),
            (["--store"], {"default": "sqlite", "help": "sqlite | postgresql://... | redis://..."}),
            (
                ["--on-unparsed"],
                {
                    "choices": ["count", "fail"],
                    "help": "a value that does not parse as the topic's JSON schema: count it "
                    "(default) or fail the view there",
                },
            ),
            (["--wait"], {"action": "store_true", "help": "show progress until it is LIVE"}),
        ],
        _create,
    ),
    ("list", "list views", [], lambda a, r: r.call("GET", "/views")),
    (
        "get",
        "state, progress, lag, offsets",
        [_NAME],
        lambda a, r: r.call("GET", f"/views/{_q(a.name)}"),
    ),
    (
        "watch",
        "show a view's backfill progress (events, rate, ETA) until it is LIVE",
        [_NAME],
        lambda a, r: watch_view(r, _q(a.name)),
    ),
    (
        "rows",
        "rows by key (--where col=value) or the first --limit",
        [
            _NAME,
            (["--where", "-w"], {"action": "append", "help": "KEYCOLUMN=VALUE"}),
            (["--limit", "-n"], {"type": int, "default": 100}),
        ],
        _rows,
    ),
    (
        "delete",
        "delete a view and its state",
        [_NAME],
        lambda a, r: r.call("DELETE", f"/views/{_q(a.name)}"),
    ),
    (
        "as-of",
        "materialize a view at a past point as NAME@LABEL",
        [
            _NAME,
            (["--timestamp", "-t"], {"type": int, "help": "epoch ms: events published before"}),
            (["--offsets"], {"help": 'JSON end offsets {"topic": {"0": 42}}'}),
            (["--label"], {"help": "label of the as-of view (default t<timestamp>)"}),
        ],
        _as_of,
    ),
]


def _run(args: argparse.Namespace) -> int:
    result = args.views_action(args, RestClient(admin_url(args.url), timeout=300))
    print(json.dumps(result if result is not None else {"ok": True}, indent=2))
    return 0


def add_views(commands: Any) -> None:
    views = commands.add_parser("views", help="event-sourced materialized views")
    views.add_argument(
        "--url", default=None, help="HTTP URL (default MAGNETAR_URL, else from MAGNETAR_HTTP_PORT)"
    )
    subs = views.add_subparsers(dest="action", metavar="ACTION", required=True)
    for name, text, arguments, action in COMMANDS:
        p = subs.add_parser(name, help=text, description=text)
        for flags, options in arguments:
            p.add_argument(*flags, **options)
        p.set_defaults(views_action=action, handler=_run)
