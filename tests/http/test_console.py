"""The web console in a real headless browser: Debian's chromium driven by Selenium through
Debian's chromium-driver (``make test`` installs both), against a real standalone.

Each step saves a screenshot under ``.artifacts/console/`` (``MAGNETAR_ARTIFACTS`` to move it).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pulsar
import pytest
from pulsar.schema import JsonSchema

from magnetar.testing.server import REPO, StandaloneProcess
from tests.http.helpers import unique
from tests.views import helpers as h

pytestmark = pytest.mark.slow
T = TypeVar("T")
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = Path(os.environ.get("MAGNETAR_ARTIFACTS", REPO / ".artifacts")) / "console"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneProcess]:
    args = ["--segment-max-entries", "20", "--offload-check-interval", "0.2"]
    args += ["--offload-deletion-lag-ms", "0", "--spark-master", "local[2]"]
    args += ["--views-max-batch-events", "400"]
    node = StandaloneProcess(tmp_path_factory.mktemp("console"), extra_args=args)
    node.startup_timeout = 120
    node.start()
    try:
        yield node
    finally:
        node.stop()


@pytest.fixture(scope="module")
def client(server: StandaloneProcess) -> Iterator[pulsar.Client]:
    c = pulsar.Client(server.pulsar_url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    yield c
    c.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.fail("Debian's chromium and chromium-driver are missing: `make test` installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    options.add_argument("--window-size=1400,1000")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: Any, name: str) -> None:
    browser.save_screenshot(str(ARTIFACTS / f"{name}.png"))


def errors(browser: Any) -> list[str]:
    """What the page logged as errors (uncaught exceptions, failed requests) since the
    last call."""
    return [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]


def until(check: Callable[[], T | None], what: str, timeout: float = 30) -> T:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = check()
        except Exception:  # the page redrew the element between find and read
            found = None
        if found:
            return found
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.1)  # polling pace; the check decides


def css(browser: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(browser.find_elements(By.CSS_SELECTOR, selector))


def produce(client: pulsar.Client, topic: str, n: int) -> None:
    producer = client.create_producer(topic, batching_enabled=False, block_if_queue_full=True)
    for i in range(n):
        producer.send_async(f'{{"n": {i}}}'.encode(), None)
    producer.flush()
    producer.close()


def test_console_loads_without_errors(server: StandaloneProcess, browser: Any) -> None:
    browser.get(server.http_url + "/console")
    until(lambda: "#/namespace/public/default" in browser.current_url, "the default namespace")
    until(lambda: css(browser, "#tenants .tenant"), "the tenant tree")
    until(lambda: css(browser, "#updated") and css(browser, "#updated")[0].text, "a refresh")
    shot(browser, "01-loaded")
    assert errors(browser) == []


def test_lists_a_topic_just_produced_to(
    server: StandaloneProcess, browser: Any, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('orders')}"
    produce(client, topic, 50)
    browser.get(server.http_url + "/console/#/namespace/public/default")
    row = until(lambda: css(browser, f'tr[data-topic="{topic}"]'), "the topic's row")[0]
    storage = row.find_element("css selector", '[data-field="storage"]')
    until(lambda: int(storage.get_attribute("data-value")) > 0, "its storage size")
    shot(browser, "02-topic-listed")
    assert errors(browser) == []


def test_backlog_falls_as_a_consumer_reads(
    server: StandaloneProcess, browser: Any, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('payments')}"
    client.subscribe(topic, "billing").close()  # the subscription exists before the data
    produce(client, topic, 120)
    browser.get(server.http_url + f"/console/#/topic/{topic.removeprefix('persistent://')}")

    def backlog() -> int | None:
        cells = css(browser, 'tr[data-sub="billing"] [data-field="backlog"]')
        value = cells[0].get_attribute("data-value") if cells else None
        return int(value) if value is not None else None

    until(lambda: backlog() == 120, "the console showing a backlog of 120")
    seen = [backlog()]
    shot(browser, "03-backlog-120")
    consumer = client.subscribe(topic, "billing", receiver_queue_size=10)
    left = 120
    for target in (80, 30, 0):
        while left > target:
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))
            left -= 1
        until(lambda t=target: backlog() == t, f"the console showing a backlog of {target}")
        seen.append(backlog())
        shot(browser, f"03-backlog-{target}")
    consumer.close()
    assert seen == [120, 80, 30, 0]
    assert errors(browser) == []


def test_offloaded_segments_show_as_offloaded(
    server: StandaloneProcess, browser: Any, client: pulsar.Client
) -> None:
    topic = f"persistent://public/default/{unique('history')}"
    produce(client, topic, 100)  # 20 entries a segment: 5 closed segments
    browser.get(server.http_url + f"/console/#/topic/{topic.removeprefix('persistent://')}")
    until(lambda: len(css(browser, "#segments .segment")) >= 5, "the segments on the timeline")
    assert not css(browser, "#segments .segment.offloaded, #segments .segment.both")
    shot(browser, "04-segments-local")
    css(browser, "#offload")[0].click()

    def offloaded() -> list[Any]:
        found = css(browser, "#segments .segment.offloaded")
        return found if len(found) == 5 else []

    segments = until(offloaded, "five segments shown as offloaded", timeout=60)
    assert all("offloaded" in s.text for s in segments)
    assert "OFFLOADED" in {s.get_attribute("data-state") for s in segments}
    shot(browser, "04-segments-offloaded")
    # the message browser still shows the oldest messages, now read from the object store
    form = css(browser, "#browse")[0]
    form.find_element("css selector", 'select[name="position"] option[value="earliest"]').click()
    form.find_element("css selector", "button").click()
    first = until(lambda: css(browser, '#messages tr[data-offset="0"]'), "message 0")[0]
    assert '{"n":0}' in first.text  # the JSON value, decoded and shown
    shot(browser, "05-messages")
    assert errors(browser) == []


def test_create_and_delete_tenants_namespaces_topics_and_reset_a_cursor(
    server: StandaloneProcess, browser: Any, client: pulsar.Client
) -> None:
    tenant = unique("acme").replace("-", "_")
    browser.get(server.http_url + "/console/#/namespace/public/default")
    fill(browser, "#new-tenant", tenant=tenant)
    until(lambda: tenant in [t.text for t in css(browser, "#tenants .tenant")], "the new tenant")
    fill(browser, "#new-namespace", namespace=f"{tenant}/ops")
    until(lambda: f"#/namespace/{tenant}/ops" in browser.current_url, "the new namespace's page")
    fill(browser, "#new-topic", topic="orders")
    topic = f"persistent://{tenant}/ops/orders"
    until(lambda: css(browser, f'tr[data-topic="{topic}"]'), "the new topic's row")
    shot(browser, "08-created")

    # reset to time: a subscription that read everything goes back to before the data
    before = int(time.time() * 1000) - 1000
    consumer = client.subscribe(topic, "replay")
    produce(client, topic, 30)
    for _ in range(30):
        consumer.acknowledge(consumer.receive(timeout_millis=10_000))
    consumer.close()
    browser.get(server.http_url + f"/console/#/topic/{tenant}/ops/orders")
    backlog = '[data-sub="replay"] [data-field="backlog"]'
    until(lambda: css(browser, backlog)[0].get_attribute("data-value") == "0", "backlog 0")
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(before / 1000))
    picker = css(browser, '[data-sub="replay"] input[type="datetime-local"]')[0]
    browser.execute_script("arguments[0].value = arguments[1]", picker, stamp)
    css(browser, '[data-sub="replay"] button[data-reset="replay"]')[0].click()
    until(lambda: css(browser, backlog)[0].get_attribute("data-value") == "30", "backlog 30")
    shot(browser, "09-reset-to-time")

    css(browser, "#delete-topic")[0].click()
    browser.switch_to.alert.accept()
    until(lambda: f"#/namespace/{tenant}/ops" in browser.current_url, "back on the namespace")
    until(lambda: not css(browser, f'tr[data-topic="{topic}"]'), "the topic gone")
    css(browser, "#delete-namespace")[0].click()
    browser.switch_to.alert.accept()
    until(lambda: not [a for a in css(browser, "#tenants a") if a.text == "ops"], "ns gone")
    css(browser, f'[data-delete-tenant="{tenant}"]')[0].click()
    browser.switch_to.alert.accept()
    until(lambda: tenant not in [t.text for t in css(browser, "#tenants .tenant")], "tenant gone")
    shot(browser, "10-deleted")
    assert errors(browser) == []


def fill(browser: Any, form: str, **values: str) -> None:
    found = css(browser, form)[0]
    for name, text in values.items():
        field = found.find_element("css selector", f'[name="{name}"]')
        field.clear()
        field.send_keys(text)
    found.find_element("css selector", "button").click()


def test_a_view_created_in_the_console_reaches_live(
    server: StandaloneProcess, browser: Any, client: pulsar.Client
) -> None:
    topic = unique("txns")
    producer = client.create_producer(
        topic, schema=JsonSchema(h.Txn), batching_enabled=False, block_if_queue_full=True
    )
    for user, amount in h.events(2000, seed=3):
        producer.send_async(h.Txn(user=user, amount=amount), None)
    producer.flush()
    producer.close()
    browser.get(server.http_url + "/console/#/views")
    form = until(lambda: css(browser, "#new-view"), "the view form")[0]
    for field, text in (
        ("name", "per_user"),
        ("source", topic),
        ("key", "user"),
        ("sql", "SELECT data.user AS user, count(*) AS n FROM events GROUP BY data.user"),
    ):
        form.find_element("css selector", f'[name="{field}"]').send_keys(text)
    form.find_element("css selector", "button").click()
    row = until(lambda: css(browser, 'tr[data-view="per_user"]'), "the view's row", 180)[0]
    shot(browser, "06-view-created")
    bar = row.find_element("css selector", '[data-field="progress"]')
    shares = []

    def live() -> bool:
        share = float(bar.find_element("css selector", ".progress").get_attribute("data-progress"))
        shares.append(share)
        return row.get_attribute("data-state") == "LIVE" and share == 1.0

    until(live, "the view LIVE with its progress at 100%", timeout=240)
    events = row.find_element("css selector", '[data-field="events"]').text
    assert events == "2,000 / 2,000"
    assert shares == sorted(shares)  # the bar only moved forward
    shot(browser, "06-view-live")
    row.find_element("css selector", "button[data-rows]").click()
    until(lambda: len(css(browser, "#rows tbody tr")) == len(h.USERS), "the view's rows")
    shot(browser, "07-view-rows")
    row.find_element("css selector", "button[data-delete-view]").click()
    browser.switch_to.alert.accept()
    until(lambda: not css(browser, 'tr[data-view="per_user"]'), "the view deleted", 60)
    assert errors(browser) == []
