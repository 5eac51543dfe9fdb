"""Take the screenshots of docs/dashboard.md: a name server, a broker and a dashboard in this process,
some traffic (a producer at a changing rate, a slow consumer group, a few dead letters, a message
sent and consumed with message trace on), then each main page in headless Chromium, saved as
docs/images/dashboard-<page>.png.

    .venv/bin/python scripts/dashboard_screenshots.py [--seconds 60] [--out docs/images]

Needs Debian's chromium and chromedriver (scripts/_chromium.sh installs them).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import tempfile
import time
from pathlib import Path
from typing import Any

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service

from cometmq.broker import Broker
from cometmq.broker.config import BrokerConfig
from cometmq.client import AdminClient, LitePullConsumer, Message, Producer, PushConsumer, ReceivedMessage
from cometmq.dashboard import start_dashboard
from cometmq.namesrv import NameServer
from cometmq.protocol import RemotingCommand, RequestCode
from cometmq.protocol.record import decode_offset_msg_id
from cometmq.protocol.subscription_group import SubscriptionGroupConfig
from cometmq.remoting import RemotingClient

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1400


def new_browser() -> webdriver.Chrome:
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        f"--window-size={WIDTH},900",
    ):
        options.add_argument(argument)
    return webdriver.Chrome(options=options, service=Service("/usr/bin/chromedriver"))


def screenshot(browser: webdriver.Chrome, url: str, path: Path, wait_for_charts: bool) -> None:
    browser.set_window_size(WIDTH, 900)
    browser.get(url)
    if wait_for_charts:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and browser.execute_script(
            "return [...document.querySelectorAll('.chart')].some(c => !c.dataset.points)"
        ):
            time.sleep(0.2)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(WIDTH, min(max(int(height) + 160, 400), 2400))
    browser.save_screenshot(str(path))
    print(f"wrote {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")


async def slow_consumer(namesrv: str) -> PushConsumer:
    """GID_billing on Orders, too slow to keep up at the peak of the traffic: its lag rises and falls."""

    async def slow(messages: list[ReceivedMessage]) -> None:
        await asyncio.sleep(0.01 * len(messages))

    consumer = PushConsumer("GID_billing", namesrv, consume_from="first", concurrency=1)
    consumer.subscribe("Orders")
    consumer.listen(slow)
    await consumer.start()
    return consumer


async def traffic(namesrv: str, seconds: float) -> list[Any]:
    """Orders at a rate that rises and falls for ``seconds``, then three payments."""
    sent: list[Any] = []
    async with Producer("PID_shop", namesrv) as producer:
        start = time.monotonic()
        n = 0
        while (elapsed := time.monotonic() - start) < seconds:
            rate = 120 + 100 * math.sin(elapsed / seconds * 2 * math.pi)  # messages per second
            batch = [
                Message("Orders", b'{"order": %d}' % (n + i), tags="created", keys=f"order-{n + i}")
                for i in range(10)
            ]
            sent.append(await producer.send_batch(batch))
            n += len(batch)
            await asyncio.sleep(len(batch) / rate)
        for i in range(3):
            sent.append(await producer.send(Message("Payments", b"charge card %d" % i, keys=f"pay-{i}")))
    return sent


async def dead_letters(broker_addr: str, payments: list[Any]) -> None:
    """Two payments given up on by GID_payments (a consumer's send-back with delay level -1)."""
    client = RemotingClient()
    try:
        for result in payments[:2]:
            offset = decode_offset_msg_id(result.offset_msg_id)[2]
            fields = {"offset": str(offset), "group": "GID_payments", "delayLevel": "-1"}
            await client.invoke(
                broker_addr, RemotingCommand(code=RequestCode.CONSUMER_SEND_MSG_BACK, ext_fields=fields)
            )
    finally:
        await client.close()


async def traced_audit(admin: AdminClient, namesrv: str) -> str:
    """An audit record sent by PID_audit and consumed by GID_audit, both with message trace on; its id
    once its three trace records are stored."""
    async with Producer("PID_audit", namesrv, trace=True) as producer:
        sent = await producer.send(Message("Audit", b"user 42 signed in", tags="login", keys="user-42"))
    consumer = LitePullConsumer("GID_audit", namesrv, consume_from="first", trace=True)
    consumer.subscribe("Audit")
    async with consumer:
        while not await consumer.poll(1.0):
            pass
    while len(await admin.message_trace(sent.msg_id)) < 3:
        await asyncio.sleep(0.1)
    return sent.msg_id


async def main(seconds: float, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as data:
        namesrv = NameServer("127.0.0.1", 0)
        await namesrv.start()
        addr = f"127.0.0.1:{namesrv.port}"
        config = BrokerConfig()
        config.update(
            {
                "storePathRootDir": data,
                "listenPort": 0,
                "listenHost": "127.0.0.1",
                "namesrvAddr": addr,
                "traceTopicEnable": True,  # as cometmq standalone
            }
        )
        broker = Broker(config)
        await broker.start()
        admin = AdminClient(addr)
        await admin.start()
        await admin.create_topic("Orders", 4)
        await admin.create_topic("Payments", 2)
        await admin.create_topic("Audit", 1)
        for group in ("GID_billing", "GID_payments"):
            await admin.create_group(SubscriptionGroupConfig(group))
        # Started after the groups exist, so that their lag is sampled from the first sample on.
        dashboard = await start_dashboard(addr, "127.0.0.1", 0, sample_interval_s=1.0)
        loop = asyncio.get_running_loop()
        browser = await loop.run_in_executor(None, new_browser)
        consumer = await slow_consumer(addr)
        try:
            sent = await traffic(addr, seconds)
            await dead_letters(f"127.0.0.1:{broker.port}", sent[-3:])
            while not await admin.dead_letters("GID_payments"):  # routed once the broker registers it
                await asyncio.sleep(0.1)
            [order] = await admin.query_message("Orders", "order-17")
            audit_id = await traced_audit(admin, addr)
            url = dashboard.url
            pages = [
                ("cluster", "/", True),
                ("topics", "/topics", False),
                ("topic", "/topics/Orders", False),
                ("groups", "/groups", False),
                ("group", "/groups/GID_billing", True),
                ("messages", "/messages?by=key&topic=Orders&value=order-17", False),
                ("message", f"/messages/view?id={order.offset_msg_id}&topic=Orders", False),
                ("dlq", "/dlq?group=GID_payments", False),
                ("trace", f"/trace?id={audit_id}", False),
            ]
            for name, path, charts in pages:
                await loop.run_in_executor(
                    None, screenshot, browser, url + path, out / f"dashboard-{name}.png", charts
                )
        finally:
            await consumer.close()
            await loop.run_in_executor(None, browser.quit)
            await dashboard.stop()
            await admin.close()
            await broker.stop()
            await namesrv.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the traffic runs (default: 60)")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    options = parser.parse_args()
    asyncio.run(main(options.seconds, options.out))
