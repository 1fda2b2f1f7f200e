"""`askalike serve` as a person uses it: started by its command (two worker processes), a
question added with the API key, then found from the search page in headless Chromium."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from helpers import ROOT, collection, index, write_jsonl
from serving import KEY, WRITE, eventually, free_port

from askalike.indexer.directory import recorded_verdicts

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), shutil.which("chromedriver")


@contextmanager
def served(index_dir: Path, tmp_path: Path, *options: str) -> Iterator[str]:
    """``askalike serve`` in a process of its own: its base URL, once it is ready."""
    keys = tmp_path / "keys.txt"
    keys.write_text(KEY + "\n")
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "askalike.app", "serve", "--index", str(index_dir),
                                "--port", str(port), "--api-keys", str(keys), *options],
                               cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                               env={**os.environ, "ASKALIKE_API_KEYS": ""})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"{url}/ready").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(20)
        log.close()


@pytest.mark.slow
def test_the_command_serves_two_workers_that_see_each_others_writes(built, tmp_path):
    with served(built[0], tmp_path, "--workers", "2") as url:
        added = httpx.post(f"{url}/questions", headers=WRITE,
                           json={"id": "n1", "subject": "penguin colonies", "body": "where do they nest?"})
        assert added.status_code == 200 and added.json()["total"] == 201
        for _ in range(20):  # new connections: each may reach either worker; a read of one
            # question opens the newest state first
            assert httpx.get(f"{url}/questions/n1").json()["subject"] == "penguin colonies"
        # /ready answers from the state open now: the other worker's follower opens it unasked
        assert eventually(lambda: all(httpx.get(f"{url}/ready").json()["questions"] == 201
                                      for _ in range(20)))


BROWSER_NEEDS = ("the page test drives the page in a real headless browser: install Chromium and its "
                 "driver (Debian: apt-get install chromium chromium-driver; pip cannot fetch a browser)")


def _browser():
    """Headless Chromium through Selenium, or a skip that says in one line what to install and why."""
    if not CHROMIUM.exists() or CHROMEDRIVER is None:
        pytest.skip(BROWSER_NEEDS)
    webdriver = pytest.importorskip("selenium.webdriver",
                                    reason="the page test needs selenium (the dev extra)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                 "--window-size=1280,800"):
        options.add_argument(flag)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))


HELPDESK = [{"id": "C1", "subject": "penguin colonies", "body": "where do penguins nest?", "team": "Zoo",
             "received": "2025-03-01"},
            {"id": "C2", "subject": "penguin colonies", "body": "where do penguins nest?", "team": "Zoo",
             "received": "2025-03-02"},
            {"id": "C3", "subject": "penguin colonies in winter", "body": "where do penguins nest?",
             "team": "Billing", "received": "2025-01-05"}]


@pytest.fixture
def page_index(tmp_path, steep_model) -> Path:
    """200 questions indexed with a model whose judge folds only copies: the untrained tiny
    model's cosines of unrelated questions reach the uncalibrated 50%."""
    index(write_jsonl(tmp_path / "questions.jsonl", collection(200)), tmp_path / "page-index", steep_model)
    return tmp_path / "page-index"


@pytest.mark.slow
def test_the_page_shows_results_and_the_opened_question_side_by_side(page_index, tmp_path):
    """The page as a colleague keeps it open: results, metadata, filters, keys, duplicates, adding."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.expected_conditions import staleness_of
    from selenium.webdriver.support.ui import WebDriverWait

    browser = _browser()
    try:
        with served(page_index, tmp_path) as url:
            added = httpx.post(f"{url}/questions", headers=WRITE, json=HELPDESK, timeout=60)
            assert added.status_code == 200, added.text
            browser.get(url + "/")
            wait = WebDriverWait(browser, 30)

            def hits():
                return browser.find_elements(By.CSS_SELECTOR, "li.hit")

            browser.find_element(By.ID, "q").send_keys("penguin colonies where do penguins nest")
            wait.until(lambda _: len(hits()) >= 2)
            first = hits()[0]
            match, subject = (first.find_element(By.CLASS_NAME, name) for name in ("match", "subject"))
            assert match.text.endswith("%") and subject.text.startswith("penguin colonies")
            assert match.location["x"] + match.size["width"] <= subject.location["x"]  # "100%" apart
            assert "team Zoo" in first.find_element(By.CLASS_NAME, "meta").text
            assert "+1 alike: C" in first.find_element(By.CLASS_NAME, "meta").text  # its copy, folded
            # Enter opens the selected question beside the results, with its metadata and duplicates
            browser.find_element(By.ID, "q").send_keys(Keys.ENTER)
            wait.until(lambda _: browser.find_element(By.ID, "question").is_displayed())
            question = browser.find_element(By.ID, "question")
            results = browser.find_element(By.ID, "results")
            assert question.location["x"] >= results.location["x"] + results.size["width"] - 1
            assert abs(question.location["y"] - results.location["y"]) < 5  # side by side, not below
            wait.until(lambda _: "team" in browser.find_element(By.ID, "question-meta").text)
            opened = browser.find_element(By.ID, "question-meta").text
            wait.until(lambda _: "id C" in browser.find_element(By.ID, "duplicates").text)
            duplicate = browser.find_element(By.ID, "duplicates").text
            assert {"C1", "C2"} & set(opened.split()) and ("id C1" in duplicate or "id C2" in duplicate)
            # "same question" on a duplicate: without the key it says so and asks for it; with it,
            # the verdict is stored
            browser.find_element(By.CSS_SELECTOR, "#duplicates .verdict button").click()
            wait.until(lambda _: "API key" in browser.find_element(By.ID, "status").text)
            stale = browser.find_element(By.CSS_SELECTOR, "#duplicates li")
            browser.find_element(By.ID, "key").send_keys(KEY, Keys.TAB)  # a new key searches again
            wait.until(staleness_of(stale))
            judged = wait.until(lambda _: browser.find_element(By.CSS_SELECTOR, "#duplicates li[data-id]"))
            opened_id = browser.find_element(By.CSS_SELECTOR, "#question-meta dd").text  # its id
            pair = (opened_id, judged.get_attribute("data-id"))
            judged.find_element(By.CSS_SELECTOR, ".verdict button").click()
            wait.until(lambda _: "recorded: the same" in browser.find_element(By.ID, "duplicates").text)
            (verdict,) = recorded_verdicts(page_index)
            assert (verdict.first.external_id, verdict.second.external_id, verdict.same) == (*pair, True)
            # ArrowDown moves the selection and shows that question
            selected_before = browser.find_element(By.CSS_SELECTOR, "li.hit.selected").get_attribute(
                "data-id")
            browser.find_element(By.TAG_NAME, "body").send_keys(Keys.ARROW_DOWN)
            wait.until(lambda _: browser.find_element(By.CSS_SELECTOR, "li.hit.selected")
                       .get_attribute("data-id") != selected_before)
            # a metadata filter: only team Billing
            browser.find_element(By.ID, "where").send_keys("team=Billing")
            wait.until(lambda _: [hit.get_attribute("data-id") for hit in hits()] == ["C3"])
            browser.find_element(By.ID, "where").clear()
            browser.find_element(By.ID, "category").send_keys("nothing")
            wait.until(lambda _: "no questions match" in browser.find_element(By.ID, "status").text)
            browser.find_element(By.ID, "category").send_keys(Keys.BACKSPACE * 7)
            wait.until(lambda _: len(hits()) >= 2 and not browser.find_element(By.ID, "status").text)
            browser.find_element(By.ID, "q").send_keys(Keys.ENTER)  # the best hit opened
            wait.until(lambda _: "id C" in browser.find_element(By.ID, "duplicates").text)
            browser.save_screenshot(str(tmp_path / "page.png"))
            # adding a question with the key
            browser.find_element(By.ID, "show-add").click()  # the key is already given
            for field, text in (("add-id", "C9"), ("add-subject", "penguin chicks"),
                                ("add-body", "when do penguin chicks hatch?"), ("add-metadata", "team=Zoo")):
                browser.find_element(By.ID, field).send_keys(text)
            browser.find_element(By.CSS_SELECTOR, "#add button[type=submit]").click()
            wait.until(lambda _: "added" in browser.find_element(By.ID, "add-status").text)
            assert httpx.get(f"{url}/questions/C9").json()["metadata"] == {"team": "Zoo"}
    finally:
        browser.quit()
    screenshots = os.environ.get("ASKALIKE_SCREENSHOTS")  # docs/page.png is made this way
    if screenshots:
        shutil.copy(tmp_path / "page.png", Path(screenshots) / "page.png")
