"""The ``magnetar`` CLI as a user runs it: a subprocess against a real standalone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from magnetar.testing.server import REPO, StandaloneProcess, free_port
from tests.http.helpers import AdminHttp, unique

ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    code: int
    out: str
    err: str

    def __str__(self) -> str:
        return f"magnetar {' '.join(self.args)} -> {self.code}\n{self.out}\n{self.err}"


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "magnetar.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
    )


def finish(proc: subprocess.Popen[str], args: tuple[str, ...]) -> Run:
    out, err = proc.communicate(timeout=60)
    return Run(args, proc.returncode, out, err)


def magnetar(*args: str) -> Run:
    return finish(start(*args), args)


def ok(*args: str) -> Run:
    run = magnetar(*args)
    assert run.code == 0, str(run)
    assert "Traceback" not in run.err, str(run)
    return run


def failed(*args: str, code: int = 1) -> Run:
    """The command must fail with ``code`` and a one-line-ish message, no traceback."""
    run = magnetar(*args)
    assert run.code == code, str(run)
    assert "Traceback" not in run.err and "Traceback" not in run.out, str(run)
    return run


@pytest.fixture(scope="module")
def url(standalone: StandaloneProcess) -> str:
    return standalone.http_url


# -- help ----------------------------------------------------------------------------------------

HELP = [
    (),
    ("admin",),
    ("admin", "tenants"),
    ("admin", "namespaces"),
    ("admin", "topics"),
    ("admin", "subscriptions"),
    ("admin", "tenants", "create"),
    ("admin", "namespaces", "set-retention"),
    ("admin", "topics", "create-partitioned-topic"),
    ("admin", "subscriptions", "reset-cursor"),
    ("produce",),
    ("consume",),
    ("standalone",),
]


def test_help_on_every_level_exits_zero() -> None:
    procs = [(args, start(*args, "--help")) for args in HELP]  # concurrently: saves seconds
    for args, proc in procs:
        run = finish(proc, args)
        assert run.code == 0, str(run)
        assert run.out.startswith(f"usage: magnetar {' '.join(args)}".rstrip()), str(run)
        assert run.err == ""
    groups = magnetar("admin", "--help").out
    assert all(g in groups for g in ("tenants", "namespaces", "topics", "subscriptions"))
    assert "set-message-ttl" in magnetar("admin", "namespaces", "--help").out


# -- admin commands ------------------------------------------------------------------------------


def test_admin_commands_change_the_store_and_print_json(url: str) -> None:
    admin = AdminHttp(url)
    tenant = unique("cli")
    ns = f"{tenant}/apps"
    topic = f"persistent://{ns}/events"
    ok("admin", "--url", url, "tenants", "create", tenant, "--admin-roles", "ops,dev")
    assert admin.get(f"/admin/v2/tenants/{tenant}")["adminRoles"] == ["ops", "dev"]
    assert ok("admin", "--url", url, "namespaces", "create", ns).out.strip() == "ok"
    ok("admin", "--url", url, "topics", "create", topic)
    ok("admin", "--url", url, "topics", "create-partitioned-topic", f"{topic}-p", "-p", "3")
    assert admin.get(f"/admin/v2/persistent/{ns}/events-p/partitions") == {"partitions": 3}

    listed = ok("admin", "--url", url, "topics", "list", ns).out.split()
    assert listed == [topic]
    as_json = json.loads(ok("admin", "--url", url, "--json", "topics", "list", ns).out)
    assert as_json == [topic]
    tenants = json.loads(ok("admin", "--url", url, "--json", "tenants", "list").out)
    assert tenant in tenants and "public" in tenants

    ok("admin", "--url", url, "namespaces", "set-retention", ns, "--time", "2h", "--size", "1G")
    got = json.loads(ok("admin", "--url", url, "--json", "namespaces", "get-retention", ns).out)
    assert got == {"retentionTimeInMinutes": 120, "retentionSizeInMB": 1024}
    ok("admin", "--url", url, "namespaces", "set-deduplication", ns, "--enable")
    assert admin.get(f"/admin/v2/namespaces/{ns}/deduplication") is True

    ok("admin", "--url", url, "subscriptions", "create", topic, "-s", "audit", "-m", "earliest")
    subs = json.loads(ok("admin", "--url", url, "--json", "subscriptions", "list", topic).out)
    assert subs == ["audit"]
    stats = json.loads(ok("admin", "--url", url, "--json", "topics", "stats", topic).out)
    assert stats["subscriptions"]["audit"]["msgBacklog"] == 0
    done = json.loads(ok("admin", "--url", url, "--json", "topics", "delete", topic).out)
    assert done == {"ok": True}
    assert admin.get(f"/admin/v2/persistent/{ns}") == []


# -- errors --------------------------------------------------------------------------------------


def test_errors_exit_nonzero_with_a_readable_message(
    url: str, standalone: StandaloneProcess
) -> None:
    unknown = failed("admin", "--url", url, "tenants", "get", "no-such-tenant")
    assert unknown.err.startswith("magnetar: error: tenant 'no-such-tenant' does not exist")
    assert "HTTP 404" in unknown.err

    missing_ns = failed("admin", "--url", url, "topics", "create", "persistent://public/nope/t")
    assert "namespace public/nope does not exist" in missing_ns.err

    closed = f"http://127.0.0.1:{free_port()}"
    unreachable = failed("admin", "--url", closed, "tenants", "list")
    assert f"cannot reach Magnetar at {closed}" in unreachable.err

    not_http = failed(
        "admin", "--url", standalone.pulsar_url.replace("pulsar", "http"), "tenants", "list"
    )
    assert "cannot reach Magnetar" in not_http.err

    garbage = failed("admin", "--url", "not a url", "tenants", "list")
    assert "--url must be an http(s) URL" in garbage.err

    bad_name = failed("admin", "--url", url, "topics", "stats", "persistent://public/default/a b")
    assert "invalid topic name 'a b'" in bad_name.err

    flags = failed("admin", "--url", url, "namespaces", "set-deduplication", "public/default")
    assert "exactly one of --enable or --disable" in flags.err

    reset = ("subscriptions", "reset-cursor", "persistent://public/default/t", "-s", "s")
    usage = failed("admin", "--url", url, *reset, "-t", "soon", code=2)
    assert "not a duration: 'soon'" in usage.err
    assert failed("admin", "no-such-group", code=2).err.startswith("usage: magnetar admin")


# -- produce and consume -------------------------------------------------------------------------


def test_produce_then_consume_round_trip(url: str, standalone: StandaloneProcess) -> None:
    topic = f"persistent://public/default/{unique('cli-round-trip')}"
    produce = ("produce", topic, "-m", "hello", "-m", "world", "-k", "greeting")
    produced = ok(*produce, "-n", "2", "--service-url", url)
    assert produced.out == "4 messages successfully produced\n"  # nothing but our output
    as_ids = ok(*produce, "--json", "--service-url", standalone.pulsar_url)
    ids = [json.loads(line) for line in as_ids.out.splitlines()]
    assert len(ids) == 2 and all("messageId" in i for i in ids)

    consume = ("consume", topic, "-p", "Earliest", "--service-url", url)
    consumed = ok(*consume, "-s", "reader", "-n", "6")
    greetings = ["key:[greeting], content:hello", "key:[greeting], content:world"]
    assert consumed.out.splitlines() == [
        line for text in greetings * 3 for line in ("----- got message -----", text)
    ]

    as_json = ok(*consume, "-s", "json-reader", "-n", "2", "--json")
    messages = [json.loads(line) for line in as_json.out.splitlines()]
    assert [(m["key"], m["value"]) for m in messages] == [
        ("greeting", "hello"),
        ("greeting", "world"),
    ]
    stats = AdminHttp(url).get(f"/admin/v2/persistent/{topic.split('://')[1]}/stats")
    assert stats["msgInCounter"] == 6
    assert stats["subscriptions"]["reader"]["msgBacklog"] == 0
