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
from helpers import ROOT
from serving import KEY, WRITE, free_port

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), shutil.which("chromedriver")


@contextmanager
def served(index_dir: Path, tmp_path: Path, *options: str) -> Iterator[str]:
    """``askalike serve`` in a process of its own: its base URL, once it is ready."""
    keys = tmp_path / "keys.txt"
    keys.write_text(KEY + "\n")
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "app", "serve", "--index", str(index_dir),
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
        for _ in range(20):  # new connections: each may reach either worker
            assert httpx.get(f"{url}/questions/n1").json()["subject"] == "penguin colonies"
            assert httpx.get(f"{url}/ready").json()["questions"] == 201


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists() or CHROMEDRIVER is None,
                    reason="the page test needs /usr/bin/chromium and chromedriver "
                           "(apt-get install chromium chromium-driver)")
def test_the_page_shows_similar_questions_as_you_type(built, tmp_path):
    webdriver = pytest.importorskip("selenium.webdriver", reason="the page test needs selenium")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(flag)
    with served(built[0], tmp_path) as url:
        penguins = {"id": "p1", "subject": "penguin colonies", "body": "where do penguins nest?"}
        added = httpx.post(f"{url}/questions", headers=WRITE, json=penguins, timeout=30)
        assert added.status_code == 200
        browser = webdriver.Chrome(options=options, service=webdriver.ChromeService(CHROMEDRIVER))
        try:
            browser.get(url + "/")
            browser.find_element(By.ID, "q").send_keys("penguin colonies where do penguins nest")
            wait = WebDriverWait(browser, 20)
            first = wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "li.hit")))
            assert first.find_element(By.CLASS_NAME, "subject").text == "penguin colonies"
            assert first.find_element(By.CLASS_NAME, "match").text.endswith("%")
            first.click()
            wait.until(expected_conditions.visibility_of_element_located((By.ID, "question")))
            assert browser.find_element(By.ID, "question-body").text == "where do penguins nest?"
        finally:
            browser.quit()
