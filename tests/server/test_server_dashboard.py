"""The dashboard in a real headless browser (Debian's chromium driven by Playwright)."""

from __future__ import annotations

import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from .conftest import API_KEY, LiveServer, published

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "artifacts"

ANSWERS = [
    ("What is your return policy?", "Our return policy allows returns within 30 days."),
    ("What is your return policy?", "We sell shoes. Our founder likes sailing on weekends."),
    (
        "How do I reset my password?",
        "Click 'Forgot password' on the login page and follow the email.",
    ),
    ("How do I reset my password?", "The weather in Lisbon is mild in spring."),
    ("When does the store open?", "The store opens at 9am every weekday and 10am on weekends."),
]
CONTEXT = ["Returns are accepted within 30 days with a receipt.", "Refunds take 5 days."]


def _publish(server: LiveServer) -> int:
    body = []
    for n, (query, answer) in enumerate(ANSWERS):
        body.append(
            published(
                "shop",
                "model-a" if n % 2 else "model-b",
                user_query=query,
                generated_text=answer,
                context=CONTEXT,
                config={"output_relevance": {"explain": True}, "completeness": {"explain": True}},
            )
        )
    assert server.post(body).status_code == 200
    # Spread the detections over the last hour so the trend charts have several buckets.
    with sqlite3.connect(server.database) as connection:
        rows = connection.execute("SELECT id, created_at FROM detections").fetchall()
        for detection_id, created_at in rows:
            moved = datetime.fromisoformat(created_at) - timedelta(minutes=20 * (detection_id % 3))
            connection.execute(
                "UPDATE detections SET created_at = ? WHERE id = ?",
                (moved.strftime("%Y-%m-%d %H:%M:%S.%f"), detection_id),
            )
    return len(body)


def test_dashboard_renders_charts_in_a_browser(live_server: LiveServer) -> None:
    items = _publish(live_server)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            context = browser.new_context(
                http_credentials={"username": "assay", "password": API_KEY},
                viewport={"width": 1200, "height": 900},
            )
            page = context.new_page()
            page.goto(live_server.url + "/")
            row = page.locator("#applications tr", has_text="shop")
            assert "model-a, model-b" in row.inner_text()
            page.screenshot(path=str(ARTIFACTS / "dashboard-overview.png"), full_page=True)

            row.locator("a").click()
            page.wait_for_selector("svg.histogram rect.bar", state="attached")
            for detector in ("output_relevance", "completeness"):
                card = page.locator(f'.card[data-detector="{detector}"]')
                bars = card.locator("svg.histogram rect.bar")
                assert bars.count() == 10
                counts = [int(bars.nth(i).get_attribute("data-count") or 0) for i in range(10)]
                assert sum(counts) == items  # every published score is in the distribution
                drawn = [float(bars.nth(i).get_attribute("height") or 0) for i in range(10)]
                assert max(drawn) > 0
                dots = card.locator("svg.trend circle.dot")
                assert dots.count() == 3
                assert card.locator("svg.trend polyline.line").count() == 1
                assert (
                    sum(
                        int(dots.nth(i).get_attribute("data-count") or 0)
                        for i in range(dots.count())
                    )
                    == items
                )
                box = card.locator("svg.trend").bounding_box()
                assert box is not None and box["width"] > 100 and box["height"] > 50

            failures = page.locator("#failures tr")
            assert failures.count() == 1 + 4 + 8  # header + every instruction of both detectors
            assert failures.nth(1).locator("svg.failbar").count() == 1
            rates = [
                float(failures.nth(i).locator("svg.failbar").get_attribute("data-rate") or 0)
                for i in range(1, failures.count())
            ]
            assert rates == sorted(rates, reverse=True)  # most failed first

            recent = page.locator("#recent details").first
            recent.locator("summary").click()
            assert recent.locator("li").count() in (4, 8)
            assert "followed" in recent.inner_text()
            page.screenshot(path=str(ARTIFACTS / "dashboard-application.png"), full_page=True)
        finally:
            browser.close()
    assert (ARTIFACTS / "dashboard-application.png").stat().st_size > 10_000


def test_dashboard_asks_the_browser_for_credentials(live_server: LiveServer) -> None:
    response = httpx.get(live_server.url + "/")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic")
    missing = httpx.get(live_server.url + "/applications/none", auth=("assay", API_KEY))
    assert missing.status_code == 404
