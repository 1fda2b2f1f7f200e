"""The terminal UI, driven by Textual's pilot: typing, navigation, more-like-this, back, filters,
the friendly screens, and snapshots of the main screen and the detail pane."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest
from helpers import QUIET, collection, write_jsonl

from app.tui import DEBOUNCE_S, MessageScreen, SearchApp
from indexer.build import index_sources
from retrieval.searcher import Searcher

SIZE = (100, 30)
THREAD = b"""<root><Thread THREAD_SEQUENCE="Q9_R1">
<RelQuestion RELQ_ID="Q9_R1" RELQ_CATEGORY="Visas and Permits" RELQ_DATE="2012-03-04 10:00:00">
<RelQSubject>Family visa for my parents</RelQSubject>
<RelQBody>Can I sponsor my parents on a family visit visa with a salary of 10000?</RelQBody></RelQuestion>
<RelComment RELC_ID="Q9_R1_C1" RELC_USERNAME="amir" RELC_DATE="2012-03-04 11:00:00">
<RelCText>Yes, the minimum salary is lower than that.</RelCText></RelComment>
<RelComment RELC_ID="Q9_R1_C2" RELC_USERNAME="lena"><RelCText>Ask at the immigration office.</RelCText>
</RelComment></Thread></root>"""


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, tiny_model) -> Path:
    directory = tmp_path_factory.mktemp("tui")
    write_jsonl(directory / "forum.jsonl", collection(40))
    (directory / "threads.xml").write_bytes(THREAD)
    index_sources(directory / "index", [directory / "forum.jsonl", directory / "threads.xml"],
                  str(tiny_model), options=QUIET)
    return directory / "index"


def synchronously(test):
    """Run an async pilot test with asyncio (no pytest plugin needed)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def make_app(index_dir: Path) -> SearchApp:
    return SearchApp(lambda: Searcher(index_dir), k=10)


async def settle(pilot) -> None:
    await pilot.pause(DEBOUNCE_S + 0.1)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def status(app: SearchApp) -> str:
    return str(app.query_one("#status").render())


@pytest.mark.slow
@synchronously
async def test_typing_shows_the_expected_first_result(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        record = collection(40)[13]
        await pilot.press(*f"{record['subject']} {record['body']}")
        await settle(pilot)
        assert app.results[0].external_id == "q13"
        assert status(app).endswith("10 results")
        assert "q13" in str(app.query_one("#detail-text").render())


@pytest.mark.slow
@synchronously
async def test_navigation_more_like_this_and_back(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        table = app.query_one("DataTable")
        assert app.focused is table
        await pilot.press("j", "j", "down", "k")
        assert table.cursor_row == 2
        selected = app.results[2]
        assert selected.external_id in str(app.query_one("#detail-text").render())
        await pilot.press("m")
        await settle(pilot)
        assert status(app).startswith("more like")
        assert selected.id not in {r.id for r in app.results} and len(app.results) == 10
        await pilot.press("b")
        await settle(pilot)
        assert status(app).startswith("“cheap car”") and len(app.history) == 1
        await pilot.press("enter")
        assert app.focused is app.query_one("#detail")


@pytest.mark.slow
@synchronously
async def test_filters_restrict_results(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"visa", "enter")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        await pilot.click("#categories")
        await pilot.press(*"Visas and Permits", "enter")
        await settle(pilot)
        assert [r.external_id for r in app.results] == ["Q9_R1"]
        assert "(filtered)" in status(app)


@synchronously
async def test_empty_index_screen(tmp_path, tiny_model):
    (tmp_path / "none.txt").write_text("")
    index_sources(tmp_path / "index", [tmp_path / "none.txt"], str(tiny_model), options=QUIET)
    app = make_app(tmp_path / "index")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, MessageScreen)
        assert "is empty" in app.screen.message and "askalike index" in app.screen.message


@synchronously
async def test_missing_index_screen(tmp_path):
    app = make_app(tmp_path / "nowhere")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, MessageScreen) and "no index here" in app.screen.message
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_code == 0


def test_main_screen_snapshot(snap_compare, index_dir):
    async def search(pilot) -> None:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)

    assert snap_compare(make_app(index_dir), terminal_size=SIZE, run_before=search)


@pytest.mark.slow
def test_detail_pane_snapshot(snap_compare, index_dir):
    async def open_thread(pilot) -> None:
        await pilot.press(*"Family visa for my parents", "enter")
        await settle(pilot)
        await pilot.press("enter")

    assert snap_compare(make_app(index_dir), terminal_size=SIZE, run_before=open_thread)


def test_small_terminal_snapshot(snap_compare, index_dir):
    async def search(pilot) -> None:
        await pilot.press(*"visa", "enter")
        await settle(pilot)

    assert snap_compare(make_app(index_dir), terminal_size=(80, 24), run_before=search)
