"""The dashboard in a real headless browser (Debian's chromium driven by Playwright): counts of
items, one row per item with all its detectors, its context and explanations, axes with units,
a trend whose buckets follow the data's span, filters, paging, a model comparison, and a page
that uses its width. Data goes in through the server's own endpoints; timestamps are spread in
the SQLite file so the trend has a known shape."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, sync_playwright

from published_instructions import COMPLETENESS, OUTPUT_RELEVANCE

from .conftest import API_KEY, LiveServer, published

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".cache" / "artifacts"
CONTEXT = ["Returns are accepted within 30 days with a receipt.", "Refunds take 5 days."]
RUBRICS = {"output_relevance": OUTPUT_RELEVANCE, "completeness": COMPLETENESS}


def result(detector: str, followed: int, tag: str) -> dict[str, Any]:
    """A detector result following its first `followed` instructions, each explained."""
    texts = RUBRICS[detector]
    entries = [
        {
            "explanation": f"{tag}: reason {n}",
            "follow_probability": 0.9 if n < followed else 0.2,
            "instruction": text,
            "label": n < followed,
        }
        for n, text in enumerate(texts)
    ]
    return {"instructions_list": entries, "score": followed / len(texts)}


def item(n: int, relevance: int, completeness: int) -> dict[str, Any]:
    return {
        "key": str(n),
        "user_query": f"Question {n}: what is your return policy?",
        "context": CONTEXT,
        "generated_text": f"Answer {n}: returns within 30 days.",
        "results": {
            "output_relevance": result("output_relevance", relevance, f"item {n}"),
            "completeness": result("completeness", completeness, f"item {n}"),
        },
    }


def publish(server: LiveServer, model: str, items: list[dict[str, Any]]) -> None:
    body = {"model_name": model, "run_id": f"run-{model}", "items": items}
    response = server.post(body, path="/v1/applications/shop/detections")
    assert response.status_code == 200, response.text


def spread(server: LiveServer, start: datetime, step: timedelta) -> None:
    """Give the n-th item (by key) the time start + n * step (both its detections)."""
    with sqlite3.connect(server.database) as connection:
        keys = {
            request_id: int(text.split(":")[0].split()[1])
            for request_id, text in connection.execute(
                "SELECT request_id, user_query FROM detections"
            )
        }
        for request_id, number in keys.items():
            moment = start + step * number
            connection.execute(
                "UPDATE detections SET created_at = ? WHERE request_id = ?",
                (moment.strftime("%Y-%m-%d %H:%M:%S.%f"), request_id),
            )


@pytest.fixture
def browser_page() -> Iterator[Page]:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            context = browser.new_context(
                http_credentials={"username": "assay", "password": API_KEY},
                viewport={"width": 1280, "height": 900},
            )
            yield context.new_page()
        finally:
            browser.close()


def numbers(page: Page, selector: str, attribute: str) -> list[float]:
    found = page.locator(selector)
    return [float(found.nth(i).get_attribute(attribute) or "nan") for i in range(found.count())]


def test_counts_are_of_items_and_each_item_is_one_row_with_all_its_detectors(
    live_server: LiveServer, browser_page: Page
) -> None:
    publish(live_server, "model-a", [item(n, n % 5, n % 9) for n in range(1, 4)])
    publish(live_server, "model-b", [item(n, 4, 8) for n in range(4, 6)])
    page = browser_page

    page.goto(live_server.url + "/")
    row = page.locator("#applications tr", has_text="shop")
    assert row.locator("td.items").get_attribute("data-items") == "5"  # not 10 detections
    row.locator("a").click()

    assert page.locator("#item-count").get_attribute("data-items") == "5"
    items = page.locator("#items tr.item")
    assert items.count() == 5
    for index in range(5):
        scores = items.nth(index).locator(".score")
        assert [scores.nth(i).get_attribute("data-detector") for i in range(2)] == [
            "completeness",
            "output_relevance",
        ]
    # Opening an item shows its text, its context (folded until opened) and every verdict's
    # explanation.
    newest = items.first
    newest.locator(":scope > td > details > summary").click()
    assert "Answer 5: returns within 30 days." in newest.locator(".response").inner_text()
    context = newest.locator("details.context")
    assert not context.locator("li").first.is_visible()
    context.locator("summary").click()
    assert context.locator("li").all_inner_texts() == CONTEXT
    for detector, texts in RUBRICS.items():
        verdicts = newest.locator(f'.verdicts[data-detector="{detector}"] li')
        assert verdicts.count() == len(texts)
        assert all(f"item 5: reason {n}" in verdicts.nth(n).inner_text() for n in range(len(texts)))
    page.screenshot(path=str(ARTIFACTS / "dashboard-application.png"), full_page=True)


def test_charts_have_axes_with_units_and_the_trend_follows_the_datas_span(
    live_server: LiveServer, browser_page: Page
) -> None:
    publish(live_server, "model-a", [item(n, n % 5, 8) for n in range(1, 7)])
    # Everything arrived within twelve seconds: still one point per bucket, not one dot.
    spread(live_server, datetime(2026, 3, 1, 12, 0, 0), timedelta(seconds=2))
    page = browser_page

    page.goto(live_server.url + "/applications/shop")

    card = page.locator('.card[data-detector="output_relevance"]')
    histogram = card.locator("svg.histogram")
    assert histogram.locator("text.x-label").text_content() == "score"
    assert histogram.locator("text.y-label").text_content() == "items"
    ticks = numbers(
        page, '.card[data-detector="output_relevance"] svg.histogram text.y-tick', "data-value"
    )
    counts = numbers(
        page, '.card[data-detector="output_relevance"] svg.histogram rect.bar', "data-count"
    )
    assert ticks[0] == 0 and ticks[-1] >= max(counts) and sum(counts) == 6
    trend = card.locator("svg.trend")
    assert trend.locator("text.y-label").text_content() == "mean score"
    assert trend.locator("text.x-label").text_content() == "time (UTC), one point per second"
    dots = trend.locator("circle.dot")
    assert dots.count() == 6
    means = numbers(
        page, '.card[data-detector="output_relevance"] svg.trend circle.dot', "data-mean"
    )
    assert means == [(n % 5) / 4 for n in range(1, 7)]
    assert dots.first.get_attribute("data-start") == "12:00:02"

    # Over two days, the same page picks hour-wide buckets.
    spread(live_server, datetime(2026, 3, 1, 0, 0, 0), timedelta(hours=9))
    page.reload()
    label = page.locator('.card[data-detector="output_relevance"] svg.trend text.x-label')
    assert label.text_content() == "time (UTC), one point per hour"


def two_models(server: LiveServer, a: int, b: int, step: timedelta) -> None:
    """`a` items of model-a that follow everything, then `b` of model-b that follow little,
    `step` apart from 2026-03-01 12:00 UTC."""
    publish(server, "model-a", [item(n, 4, 8) for n in range(1, a + 1)])
    publish(server, "model-b", [item(n, 1, 2) for n in range(a + 1, a + b + 1)])
    spread(server, datetime(2026, 3, 1, 12, 0, 0), step)


def test_filters_narrow_items_charts_and_counts(
    live_server: LiveServer, browser_page: Page
) -> None:
    two_models(live_server, 4, 3, timedelta(minutes=10))
    page = browser_page
    page.goto(live_server.url + "/applications/shop")
    assert page.locator("#items tr.item").count() == 7

    page.select_option('#filters select[name="model"]', "model-b")
    page.click("#filters button[type=submit]")
    assert "model=model-b" in page.url
    assert page.locator("#item-count").get_attribute("data-items") == "3"
    assert {
        page.locator("#items tr.item").nth(i).get_attribute("data-model") for i in range(3)
    } == {"model-b"}

    page.goto(live_server.url + "/applications/shop?detector=output_relevance&min_score=0.9")
    assert page.locator("#item-count").get_attribute("data-items") == "4"  # model-a's 1.0s
    assert page.locator(".card[data-detector]").count() == 1  # only the chosen detector's charts
    assert page.locator('#filters select[name="detector"]').input_value() == "output_relevance"

    page.goto(live_server.url + "/applications/shop?since=2026-03-01T12:35:00")
    assert page.locator("#item-count").get_attribute("data-items") == "4"  # items 4 to 7
    page.goto(
        live_server.url + "/applications/shop?since=2026-03-01T12:35:00&until=2026-03-01T12:55"
    )
    assert page.locator("#item-count").get_attribute("data-items") == "2"

    # The API's own time format is shown in the form, so the next Apply keeps it.
    page.goto(live_server.url + "/applications/shop?since=2026-03-01T12:35:00Z")
    assert page.locator('#filters input[name="since"]').input_value() == "2026-03-01T12:35"
    page.select_option('#filters select[name="model"]', "model-a")
    page.click("#filters button[type=submit]")
    assert "since=2026-03-01T12%3A35" in page.url
    assert page.locator("#item-count").get_attribute("data-items") == "1"  # model-a's item 4

    bad = httpx.get(live_server.url + "/applications/shop?max_score=high", auth=("assay", API_KEY))
    assert bad.status_code == 422 and bad.headers["content-type"].startswith("text/html")
    assert "max_score: &#39;high&#39; is not a number" in bad.text  # a page, not the API's JSON
    # A misspelt filter, or a time past year 9999 in UTC, is named (they showed every item, and
    # an internal error).
    for query, said in (
        ("detecter=completeness", "detecter: unknown filter; the page takes model"),
        ("since=9999-12-31T23:59:59-01:00", "since: 9999-12-31T23:59:59-01:00 is outside years"),
        # A repeated filter lost one value, and a backwards range showed nothing, without a word.
        ("model=model-a&model=model-b", "model: given more than once"),
        ("min_score=0.9&max_score=0.1", "min_score: 0.9 is above max_score (0.1)"),
        ("since=2026-03-02&until=2026-03-01", "since: &#39;2026-03-02&#39; is after until"),
        # Digits of other scripts were read as numbers the form's fields could not show.
        ("min_score=%D9%A1", "min_score: &#39;\u0661&#39; is not a number"),
        ("page=%EF%BC%92", "page: &#39;\uff12&#39; is not a whole number"),
    ):
        answer = httpx.get(f"{live_server.url}/applications/shop?{query}", auth=("assay", API_KEY))
        assert answer.status_code == 422 and said in answer.text, answer.text
    page.goto(live_server.url + "/applications/shop?page=0")
    assert page.locator("#page-error").inner_text().endswith("page: must be 1 or more")
    page.click("text=Show shop without filters")
    assert page.locator("#item-count").count() == 1


def test_the_form_keeps_any_score_fraction_of_a_second_and_unknown_model_it_is_given(
    live_server: LiveServer, browser_page: Page
) -> None:
    two_models(live_server, 30, 2, timedelta(seconds=30))
    page = browser_page
    # Completeness scores come in eighths: the boxes took only steps of 0.05.
    page.goto(live_server.url + "/applications/shop")
    page.fill('#filters input[name="min_score"]', "0.375")
    page.fill('#filters input[name="max_score"]', "0.875")
    page.click("#filters button[type=submit]")
    assert "min_score=0.375" in page.url and "max_score=0.875" in page.url
    # A fraction of a second was cut off in the box and in the page links: page 2 widened.
    page.goto(live_server.url + "/applications/shop?since=2026-03-01T12:00:00.250")
    # (the browser writes .250 as .25)
    assert page.locator('#filters input[name="since"]').input_value() == "2026-03-01T12:00:00.25"
    older = page.locator('#pages a[rel="next"]').get_attribute("href") or ""
    assert "since=2026-03-01T12%3A00%3A00.250" in older
    # A model with no items is shown as chosen, not as "all".
    page.goto(live_server.url + "/applications/shop?model=gpt-4o")
    assert page.locator('#filters select[name="model"]').input_value() == "gpt-4o"
    # A name no application can have, or a NUL in the URL: a page, not the API's JSON.
    for path, said in (
        ("/applications/caf%C3%A9", "application_name: may hold only"),
        ("/applications/shop?model=%00", "model: holds a NUL character"),
    ):
        answer = httpx.get(live_server.url + path, auth=("assay", API_KEY))
        assert answer.status_code == 422, answer.text
        assert answer.headers["content-type"].startswith("text/html") and said in answer.text


def test_items_are_paged_and_pages_keep_the_filters(
    live_server: LiveServer, browser_page: Page
) -> None:
    two_models(live_server, 30, 2, timedelta(seconds=30))
    page = browser_page
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )

    page.goto(live_server.url + "/applications/shop?model=model-a")
    assert page.locator("#items tr.item").count() == 25
    first_page = page.locator("#items tr.item td.when").all_inner_texts()
    assert first_page == sorted(first_page, reverse=True)  # newest first
    page.click('#pages a[rel="next"]')
    assert "model=model-a" in page.url and "page=2" in page.url
    rest = page.locator("#items tr.item")
    assert rest.count() == 5
    assert {rest.nth(i).get_attribute("data-model") for i in range(5)} == {"model-a"}
    assert page.locator('#pages a[rel="next"]').count() == 0
    page.click('#pages a[rel="prev"]')
    assert page.locator("#items tr.item td.when").all_inner_texts() == first_page
    # A page past the end (an old link) shows the last one.
    page.goto(live_server.url + "/applications/shop?model=model-a&page=99")
    assert page.locator("#items tr.item").count() == 5
    assert page.locator('#pages a[rel="next"]').count() == 0
    assert "page=1" in (page.locator('#pages a[rel="prev"]').get_attribute("href") or "")
    assert not errors  # not even a missing favicon


def test_models_are_compared_per_detector_and_instruction(
    live_server: LiveServer, browser_page: Page
) -> None:
    publish(live_server, "model-a", [item(1, 4, 8), item(2, 2, 4), item(3, 3, 6)])
    publish(live_server, "model-b", [item(4, 1, 8), item(5, 1, 0)])
    page = browser_page

    page.goto(live_server.url + "/applications/shop")

    table = page.locator("#models")
    means = {
        (detector, model): float(
            table.locator(
                f'tr.detector-mean[data-detector="{detector}"] td[data-model="{model}"]'
            ).get_attribute("data-value")
            or "nan"
        )
        for detector in RUBRICS
        for model in ("model-a", "model-b")
    }
    assert means[("output_relevance", "model-a")] == pytest.approx((1 + 0.5 + 0.75) / 3, abs=1e-4)
    assert means[("output_relevance", "model-b")] == pytest.approx(0.25, abs=1e-4)
    assert means[("completeness", "model-b")] == pytest.approx(0.5, abs=1e-4)
    # model-a's items follow their first 4, 2 and 3 instructions: the third is followed by 2.
    third = table.locator(
        f'tr.instruction-rate[data-instruction="{OUTPUT_RELEVANCE[2]}"] td[data-model="model-a"]'
    )
    assert float(third.get_attribute("data-value") or "nan") == pytest.approx(2 / 3, abs=1e-4)
    rows = table.locator('tr.instruction-rate[data-detector="output_relevance"]')
    assert [rows.nth(i).get_attribute("data-instruction") for i in range(4)] == OUTPUT_RELEVANCE


def test_the_page_uses_its_width(live_server: LiveServer, browser_page: Page) -> None:
    publish(live_server, "model-a", [item(n, 3, 5) for n in range(1, 4)])
    page = browser_page

    page.goto(live_server.url + "/applications/shop")

    width = page.viewport_size["width"]  # type: ignore[index]
    for selector in ("#items", ".grid.charts", "#filters"):
        box = page.locator(selector).bounding_box()
        assert box is not None and box["width"] > 0.9 * width, selector
    chart = page.locator('.card[data-detector="completeness"] svg.histogram').bounding_box()
    assert chart is not None and chart["width"] > 0.4 * width


def test_a_long_unbroken_token_wraps_inside_the_page(
    live_server: LiveServer, browser_page: Page
) -> None:
    # A 400-character URL in a response made the page three times as wide as the window.
    long = item(1, 3, 5)
    long["generated_text"] = "See https://example.com/" + "a" * 400 + " for details."
    publish(live_server, "model-a", [long])
    page = browser_page
    page.goto(live_server.url + "/applications/shop")
    page.locator("#items tr.item details > summary").first.click()
    assert page.locator("#items tr.item p.response").first.is_visible()
    width = page.viewport_size["width"]  # type: ignore[index]
    assert page.evaluate("document.documentElement.scrollWidth") <= width


def test_detect_requests_are_items_too(live_server: LiveServer) -> None:
    body = [
        published(
            "shop",
            "model-a",
            context=CONTEXT,
            config={"output_relevance": {"explain": True}, "completeness": {"explain": True}},
        )
        for _ in range(3)
    ]
    assert live_server.post(body).status_code == 200

    [app] = live_server.get("/v1/applications").json()
    assert app["items"] == 3 and app["detections"] == 6


def test_dashboard_asks_the_browser_for_credentials(live_server: LiveServer) -> None:
    response = httpx.get(live_server.url + "/")
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Basic")
    # What the browser shows when its prompt is cancelled: how to sign in, not the API's JSON
    # asking for a Bearer header no browser can send.
    assert response.headers["content-type"].startswith("text/html")
    assert "sign in with any user name and the key as the password" in response.text
    wrong = httpx.get(live_server.url + "/applications/shop", auth=("assay", "not-a-key"))
    assert wrong.status_code == 401 and "(invalid API key)" in wrong.text
    missing = httpx.get(live_server.url + "/applications/none", auth=("assay", API_KEY))
    # A page a browser can show (it was the API's JSON), linking back to the overview.
    assert missing.status_code == 404 and missing.headers["content-type"].startswith("text/html")
    assert "application &#39;none&#39; has no published detections" in missing.text
    assert 'href="/"' in missing.text
