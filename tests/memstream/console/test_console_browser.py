"""The memory console in a real headless Chromium (Debian's `chromium` and `chromium-driver`, driven
by Selenium) against a real node process: connect with an API key, browse agents, threads, a
thread's context and messages, search transcripts, edit, forget and export memory entries, and the
operators' view with the admin token; another account's key sees none of it, and message text is
shown as text, never run as markup."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement

from core.config import Settings
from memstream.embedded.bootstrap import create_key
from tests.memstream.node_process import RunningNode, running_node

CHROMIUM, CHROMEDRIVER = "chromium", "chromedriver"
HOSTILE = "<img src=x onerror=\"document.title='pwned'\">"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    binary, driver = shutil.which(CHROMIUM), shutil.which(CHROMEDRIVER)
    if binary is None or driver is None:
        pytest.fail(
            "the console's browser tests need Chromium and its driver: `apt-get install chromium "
            "chromium-driver` (Debian; scripts/test installs them when it runs as root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
    ):
        options.add_argument(flag)
    options.add_experimental_option("prefs", {"download.default_directory": str(tmp_path / "downloads")})
    chrome = webdriver.Chrome(service=Service(executable_path=driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture
def node(settings: Settings, tmp_path: Path) -> Iterator[RunningNode]:
    with running_node(settings, tmp_path) as running:
        yield running


def wait_for(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
        except Exception:  # the element is not there yet, or went stale while the page changed
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def seed(node: RunningNode) -> None:
    api = node.api
    assert api.put("/v1/agents/bot", json={"capabilities": ["memory"]}).status_code == 200
    chats = {
        "t-1": ["I moved to Lisbon last spring.", "Noted, Lisbon it is.", HOSTILE],
        "t-2": ["Book a table for two on Friday.", "Done."],
    }
    for thread, texts in chats.items():
        messages = [
            {"message_id": f"{thread}-{i}", "role": "user" if i % 2 == 0 else "assistant", "content": text}
            for i, text in enumerate(texts)
        ]
        body = {"agent_id": "bot", "user_id": "u1", "messages": messages}
        assert api.post(f"/v1/threads/{thread}/messages", json=body).status_code == 201
    for arguments in (
        {
            "key": "user.city",
            "content": "The user lives in Lisbon.",
            "category": "user_profile",
            "importance": 0.9,
        },
        {
            "key": "project.deadline",
            "content": "The launch is on May 4.",
            "category": "project_fact",
            "scope": "shared",
        },
    ):
        stored = api.post("/v1/agents/bot/tools/memory_store", json={"user_id": "u1", "arguments": arguments})
        assert stored.status_code == 200, stored.text

    def found() -> bool:  # the transcript projection caught up
        body = {"user_id": "u1", "arguments": {"query": "Lisbon", "summarize": False}}
        return bool(
            api.post("/v1/agents/bot/tools/journal_message_search", json=body).json()["result"]["count"]
        )

    wait_for(found, "the transcript projection")


def connect(browser: WebDriver, url: str, key: str) -> None:
    browser.get(f"{url}/console/")
    field = browser.find_element(By.ID, "api-key")
    field.clear()
    field.send_keys(key)
    browser.find_element(By.ID, "connect-button").click()


def by_css(browser: WebDriver, selector: str) -> WebElement:
    return browser.find_element(By.CSS_SELECTOR, selector)


def text_of(browser: WebDriver, element_id: str) -> str:
    return str(browser.find_element(By.ID, element_id).text)


def test_the_console_browses_searches_and_edits_within_one_account(
    node: RunningNode, settings: Settings, browser: WebDriver, tmp_path: Path
) -> None:
    seed(node)
    key = node.api.headers["Authorization"].removeprefix("Bearer ")

    # a wrong key is refused with the API's message
    connect(browser, node.url, "msk_wrong")
    assert "unauthorized" in wait_for(lambda: text_of(browser, "error"), "the error")

    # agents -> threads -> a thread's context and messages
    connect(browser, node.url, key)
    wait_for(lambda: by_css(browser, '[data-agent="bot"]'), "the agent").click()
    wait_for(lambda: by_css(browser, '[data-thread="t-2"]'), "thread t-2")
    by_css(browser, '[data-thread="t-1"]').click()
    wait_for(lambda: "1 pinned fact(s)" in text_of(browser, "context-info"), "the context")
    assert "The user lives in Lisbon." in text_of(browser, "context")  # the pinned facts come first
    wait_for(lambda: "I moved to Lisbon last spring." in text_of(browser, "messages"), "the messages")
    assert HOSTILE in text_of(browser, "messages")  # shown as text ...
    assert not browser.find_elements(By.CSS_SELECTOR, "#messages img")  # ... not run as markup
    assert browser.title != "pwned"
    browser.save_screenshot(str(tmp_path / "thread.png"))  # (README's docs/console.png is one of these)

    # search
    by_css(browser, '#tabs [data-tab="search"]').click()
    browser.find_element(By.ID, "search-query").send_keys("Lisbon")
    by_css(browser, "#search-form button").click()
    results = wait_for(lambda: text_of(browser, "search-results") or None, "search results")
    assert "I moved to Lisbon last spring." in results and "t-1" in results

    # memory: list, edit, forget, export
    by_css(browser, '#tabs [data-tab="memory"]').click()
    assert browser.find_element(By.ID, "memory-user").get_attribute("value") == "u1"  # the thread's user
    by_css(browser, "#memory-form button[type=submit]").click()
    wait_for(lambda: by_css(browser, '#memory tr[data-key="project.deadline"]'), "the entries")
    assert by_css(browser, '#memory tr[data-key="user.city"]')
    by_css(browser, '#memory tr[data-key="project.deadline"] button.edit').click()
    prompt = wait_for(lambda: browser.switch_to.alert, "the edit prompt")
    prompt.send_keys("The launch moved to June 1.")
    prompt.accept()
    wait_for(lambda: "June 1" in by_css(browser, '#memory tr[data-key="project.deadline"]').text, "the edit")
    entries = node.api.get("/v1/agents/bot/memory", params={"user_id": "u1"}).json()["entries"]
    assert {e["key"]: e["content"] for e in entries}["project.deadline"] == "The launch moved to June 1."

    by_css(browser, "#memory-export").click()
    exported = wait_for(lambda: list((tmp_path / "downloads").glob("memory-bot*.jsonl")), "the export")
    lines = [json.loads(line) for line in exported[0].read_text().splitlines() if line.strip()]
    assert {line.get("key") for line in lines} >= {"user.city", "project.deadline"}

    by_css(browser, '#memory tr[data-key="project.deadline"] button.forget').click()
    wait_for(lambda: browser.switch_to.alert, "the confirmation").accept()
    wait_for(
        lambda: not browser.find_elements(By.CSS_SELECTOR, '#memory tr[data-key="project.deadline"]'),
        "the forget",
    )
    entries = node.api.get("/v1/agents/bot/memory", params={"user_id": "u1"}).json()["entries"]
    assert [e["key"] for e in entries] == ["user.city"]

    # operators: every processor, with lag and dead letters, with the admin token only
    by_css(browser, '#tabs [data-tab="operators"]').click()
    token = (settings.data_path / "admin.token").read_text().strip()
    browser.find_element(By.ID, "admin-token").send_keys(token)
    by_css(browser, "#admin-form button").click()
    row = wait_for(
        lambda: by_css(browser, '#processors tr[data-processor="clickhouse-projection"]'), "processors"
    )
    assert "node" in row.text
    wait_for(
        lambda: by_css(
            browser, '#processors tr[data-processor="clickhouse-projection"] td.lag'
        ).text.isdigit(),
        "lag",
    )
    browser.save_screenshot(str(tmp_path / "console.png"))

    # another account's key sees nothing of this one
    other = asyncio.run(create_key(settings, "globex"))
    connect(browser, node.url, other)
    wait_for(lambda: "no agents yet" in text_of(browser, "agents"), "the other account's (empty) agents")
    assert not browser.find_elements(By.CSS_SELECTOR, '[data-agent="bot"]')


def test_the_console_is_served_with_a_strict_content_security_policy(node: RunningNode) -> None:
    page = httpx.get(f"{node.url}/console/")
    assert page.status_code == 200 and "memstream console" in page.text
    policy = page.headers["content-security-policy"]
    assert (
        "default-src 'self'" in policy
        and "script-src 'self'" in policy
        and "frame-ancestors 'none'" in policy
    )
    assert (
        httpx.get(f"{node.url}/console/console.js")
        .headers["content-type"]
        .startswith(("text/javascript", "application/javascript"))
    )
    assert httpx.get(f"{node.url}/console/missing.js").status_code == 404
    # the operators' view reads /admin/v1/overview: the admin token only, never an API key
    assert httpx.get(f"{node.url}/admin/v1/overview").status_code == 401
    assert node.api.get("/admin/v1/overview").status_code == 401
