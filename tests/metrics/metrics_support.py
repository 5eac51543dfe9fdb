"""Scraping a metrics endpoint over HTTP and reading its samples with prometheus_client's parser."""

from __future__ import annotations

import asyncio
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

# The broker tests' helpers: a broker on a free port, raw send / pull / commit requests.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "broker"))


def scrape_blocking(url: str) -> dict[str, list[Sample]]:
    """GET *url*; every family's samples by family name. A family named twice fails the test (the
    text format allows one)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    families: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        assert family.name not in families, f"family {family.name} given twice"
        families[family.name] = family.samples
    return families


async def scrape(url: str) -> dict[str, list[Sample]]:
    """``scrape_blocking`` off the loop: the endpoint is served by the loop of the test's servers."""
    return await asyncio.to_thread(scrape_blocking, url)


def value(samples: list[Sample], name: str | None = None, **labels: str) -> float:
    """The value of the one sample (named *name*, if given) whose labels include *labels*."""
    found = [
        s
        for s in samples
        if (name is None or s.name == name) and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, (name, labels, found)
    return found[0].value
