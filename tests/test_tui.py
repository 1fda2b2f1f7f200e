"""The terminal UI, driven by Textual's pilot: typing, navigation, more-like-this, back, filters,
the friendly screens, and snapshots of the main screen and the detail pane."""

from __future__ import annotations

import asyncio
import functools
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import QUIET, ROOT, TOPICS, assert_one_line_error, collection, invoke, write_jsonl
from textual.geometry import Region
from textual.widgets import DataTable, Input, SelectionList

from askalike.app.tui import (
    DEBOUNCE_S,
    HELP,
    DetailScreen,
    FilterScreen,
    MessageScreen,
    ResultsTable,
    SearchApp,
    describe_filters,
    fitted_rows,
)
from askalike.indexer.build import index_sources
from askalike.retrieval.judgement import SEARCH_MIN_MATCH
from askalike.retrieval.results import Shown
from askalike.retrieval.searcher import Searcher, SearchFilters

SIZE = (100, 30)
THREAD = b"""<root><Thread THREAD_SEQUENCE="Q9_R1">
<RelQuestion RELQ_ID="Q9_R1" RELQ_CATEGORY="Visas and Permits" RELQ_DATE="2012-03-04 10:00:00">
<RelQSubject>Family visa for my parents</RelQSubject>
<RelQBody>Can I sponsor my parents on a family visit visa with a salary of 10000?</RelQBody></RelQuestion>
<RelComment RELC_ID="Q9_R1_C1" RELC_USERNAME="amir" RELC_DATE="2012-03-04 11:00:00">
<RelCText>Yes, the minimum salary is lower than that.</RelCText></RelComment>
<RelComment RELC_ID="Q9_R1_C2" RELC_USERNAME="lena"><RelCText>Ask at the immigration office.</RelCText>
</RelComment></Thread></root>"""


# the thread's question asked again in the forum: a near-duplicate of it
ASKED_AGAIN = {"id": "again", "subject": "Family visa for my parents",
               "body": "Can I sponsor my parents on a family visit visa with a salary of 10000?"}


@pytest.fixture(scope="module")
def index_dir(tmp_path_factory, steep_model) -> Path:
    directory = tmp_path_factory.mktemp("tui")
    write_jsonl(directory / "forum.jsonl", [*collection(40), ASKED_AGAIN])
    (directory / "threads.xml").write_bytes(THREAD)
    index_sources(directory / "index", [directory / "forum.jsonl", directory / "threads.xml"],
                  str(steep_model), options=QUIET)
    return directory / "index"


def test_the_tui_refuses_to_start_without_an_index_or_a_terminal(index_dir, tmp_path):
    """Started from a script or a pipe it would wait for keys forever (and spin a core)."""
    assert_one_line_error(invoke("tui", "--index", tmp_path / "nothere"), "no index here")
    assert_one_line_error(invoke("tui", "--index", index_dir), "needs a terminal")


def synchronously(test):
    """Run an async pilot test with asyncio (no pytest plugin needed)."""

    @functools.wraps(test)
    def run(*args, **kwargs):
        asyncio.run(test(*args, **kwargs))

    return run


def make_app(index_dir: Path, min_match: float = 0.0, collapse: bool = False) -> SearchApp:
    """The app over ``index_dir``; every hit listed unless told otherwise (the tiny model's
    cosines are low, and most tests are about something else)."""
    return SearchApp(lambda: Searcher(index_dir), k=10, min_match=min_match, collapse=collapse)


async def settle(pilot) -> None:
    """Let the debounce fire and every worker (the loading one, searches) finish."""
    await pilot.pause(DEBOUNCE_S + 0.1)
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def status(app: SearchApp) -> str:
    return str(app.query_one("#status").render())


def filters_shown(app: SearchApp) -> str:
    return str(app.query_one("#filters").render())


@pytest.mark.slow
@synchronously
async def test_typing_shows_the_expected_first_result(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        record = collection(40)[13]
        await pilot.press(*f"{record['subject']} {record['body']}")
        await settle(pilot)
        assert app.results[0].external_id == "q13"
        assert status(app).startswith("10 results · “")
        assert "q13" in str(app.query_one("#detail-text").render())
        assert str(app.query_one("#mode").render()) == "mode: dense (^t)"


@pytest.mark.slow
@synchronously
async def test_ctrl_t_switches_the_mode_and_searches_again(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car")
        await settle(pilot)
        seen = []
        for expected in ("lexical", "hybrid", "dense"):
            await pilot.press("ctrl+t")
            await settle(pilot)
            assert str(app.query_one("#mode").render()) == f"mode: {expected} (^t)"
            assert app.query_one("#query").value == "cheap car"  # ctrl+t types nothing
            seen.append([r.row_id for r in app.results])
        lexical, _, dense = seen
        assert all({"cheap", "car"} & set(f"{r.subject} {r.body}".lower().split())
                   for r in app.results if r.row_id in lexical) and lexical
        assert dense and app.mode == "dense"


@pytest.mark.slow
@synchronously
async def test_columns_fit_the_shown_results_not_an_earlier_searchs(index_dir):
    # wide enough that no subject is cut to fit
    async def widths(*queries: str) -> list[int]:
        app = make_app(index_dir)
        async with app.run_test(size=(160, 30)) as pilot:
            for query in queries:
                box = app.query_one("#query", Input)
                box.value = ""
                box.focus()
                await pilot.press(*query, "enter")
                await settle(pilot)
            assert app.query_one("#query", Input).value == queries[-1]
            return [column.content_width for column in app.query_one(DataTable).columns.values()]

    alone = await widths("visa")  # narrower than "pizza"'s results
    assert await widths("pizza", "visa") == alone != await widths("pizza")


class DrawnBeforeMeasured(SearchApp):
    """Draws the results right after each refill, before the table's idle measures the new rows:
    a frame the screen's refresh timer may draw first. When the table kept its focus (m, then b),
    that frame's cells stayed at the headers' widths until the next search (issue 54)."""

    def _show(self, *args) -> None:
        super()._show(*args)
        table_lines(self)


def table_lines(app: SearchApp) -> list[str]:
    """The results table as drawn: the header, then a line a row."""
    table = app.query_one(DataTable)
    return [strip.text for strip in table.render_lines(Region(0, 0, *table.size))]


@pytest.mark.slow
@synchronously
async def test_after_more_like_this_and_back_ranks_and_subjects_are_drawn_whole(index_dir):
    app = DrawnBeforeMeasured(lambda: Searcher(index_dir), k=20, min_match=0.0, collapse=False)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        before = table_lines(app)
        await pilot.press("m")
        await settle(pilot)
        await pilot.press("b")
        await settle(pilot)
        table = app.query_one(DataTable)
        lines = table_lines(app)
        assert table.row_count == 20 and lines == before
        assert [line.split()[0] for line in lines[1:21]] == [str(rank) for rank in range(1, 21)]
        assert all(f" {table.get_cell_at((row, 2))} " in lines[row + 1] for row in range(20))


@pytest.mark.slow
@synchronously
async def test_a_resized_terminal_hides_the_detail_pane_and_cuts_the_subjects_to_the_new_width(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press(*"how do i find a good apartment for expats", "enter")
        await settle(pilot)
        table = app.query_one(ResultsTable)
        shown, widths = {}, {}
        for width, detail in ((60, False), (160, True), (99, False)):
            await pilot.resize_terminal(width, 30)
            await settle(pilot)
            shown[width] = [tuple(map(str, table.get_row_at(row))) for row in range(table.row_count)]
            widths[width] = [column.width for column in table.columns.values()]
            assert app.query_one("#detail").display is detail
            assert shown[width] == fitted_rows(table.uncut, table.size.width) and table.size.width > 40
        assert widths[60] != widths[160]  # the subjects cut at 60 columns, whole at 160


@pytest.mark.slow
@synchronously
async def test_loading_shows_at_once_and_a_query_typed_meanwhile_runs_when_ready(index_dir):
    may_open = threading.Event()

    def open_slowly() -> Searcher:
        may_open.wait()
        return Searcher(index_dir)

    app = SearchApp(open_slowly, k=10, min_match=0.0)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.query_one("DataTable").loading and status(app).startswith("Loading")
        await pilot.press(*"cheap car", "enter")
        assert app.results == [] and app.query_one("#query").value == "cheap car"
        may_open.set()
        await settle(pilot)
        assert not app.query_one("DataTable").loading
        assert status(app) == "10 results · “cheap car”" and app.focused is app.query_one("DataTable")


@pytest.mark.slow
@synchronously
async def test_navigation_more_like_this_back_and_the_full_question(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car")
        await settle(pilot)
        table = app.query_one("DataTable")
        assert app.focused is app.query_one("#query")
        await pilot.press("down", "down")  # from the search box
        assert table.cursor_row == 2 and app.focused is app.query_one("#query")
        await pilot.press("up", "enter")  # Enter opens the row picked from the box
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen) and app.screen.result == app.results[1]
        await pilot.press("escape", "tab")
        assert app.focused is table
        await pilot.press("j", "j", "down", "k")
        assert table.cursor_row == 3
        selected = app.results[3]
        assert selected.external_id in str(app.query_one("#detail-text").render())
        await pilot.press("m")
        await settle(pilot)
        assert status(app).startswith("10 results · more like")
        assert selected.row_id not in {r.row_id for r in app.results} and len(app.results) == 10
        await pilot.press("b")
        await settle(pilot)
        assert status(app).endswith("“cheap car”") and len(app.history) == 1
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen) and app.screen.result == app.results[0]
        await pilot.press("escape")
        assert not isinstance(app.screen, DetailScreen)


@pytest.mark.slow
@synchronously
async def test_q_and_question_mark_type_in_the_search_box_and_act_elsewhere(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"quick kq?", "enter")
        await settle(pilot)
        assert app.query_one("#query").value == "quick kq?" and app.is_running
        await pilot.press("question_mark")  # the results have the focus now
        assert isinstance(app.screen, MessageScreen) and "Ctrl+C" in app.screen.message
        await pilot.press("escape", "q")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


@pytest.mark.slow
@synchronously
async def test_ctrl_c_quits_while_typing(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"visa", "ctrl+c")
        await pilot.pause()
    assert app.return_code == 0 and not app.is_running


@pytest.mark.slow
@synchronously
async def test_filters_are_shown_and_cleared(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"visa", "enter")
        await settle(pilot)
        assert filters_shown(app) == "" and not app.check_action("clear_filters", ())
        await pilot.press("f")
        await pilot.pause()
        categories = app.screen.query_one("#categories", SelectionList)
        offered = [categories.get_option_at_index(i).value for i in range(categories.option_count)]
        assert offered == ["Visas and Permits", *sorted(TOPICS)]  # the index's own, with their counts
        assert str(categories.get_option_at_index(0).prompt) == "Visas and Permits (1)"
        categories.focus()
        await pilot.press("space", "tab", "tab", "enter")  # tick the first; Enter in the date box applies
        await settle(pilot)
        assert [r.external_id for r in app.results] == ["Q9_R1"]
        assert filters_shown(app) == "filters (c clears): category Visas and Permits"
        await pilot.press("c")
        await settle(pilot)
        assert filters_shown(app) == "" and len(app.results) == 10


@pytest.mark.slow
@synchronously
async def test_an_invalid_filter_date_is_said_and_the_dialog_stays(index_dir):
    app = make_app(index_dir)
    notices: list[str] = []
    app.notify = lambda message, **_: notices.append(str(message))  # what the user is told
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"visa", "enter")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        # the index has no date format of its own
        assert app.screen.query_one("#from", Input).placeholder == "from date (YYYY-MM-DD)"
        await pilot.click("#from")
        await pilot.press(*"March", "enter")
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen) and app.filters == SearchFilters()
        assert notices == ["since 'March' is not a date (expected YYYY-MM-DD (or an ISO 8601 date "
                           "and time), DD/MM/YYYY or MM/DD/YYYY, 5 Jan 2024, Jan 5, 2024 or 20240105)"]


@pytest.mark.slow
@synchronously
async def test_at_80x24_down_moves_the_selection_and_subjects_end_with_an_ellipsis(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(*"how do i find a good apartment for expats", "enter")
        await settle(pilot)
        await pilot.press("/", "down")  # back in the search box, then the first Down
        table = app.query_one(DataTable)
        assert table.cursor_row == 1 and app.focused is app.query_one("#query")
        assert not app.query_one("#detail").display  # the results take the whole width
        assert app.sub_title.startswith("42 questions · ")  # the count first: never cut
    app = make_app(index_dir)
    async with app.run_test(size=(60, 24)) as pilot:  # too narrow for whole subjects
        await pilot.press(*"how do i find a good apartment for expats", "enter")
        await settle(pilot)
        table = app.query_one(DataTable)
        subjects = [str(table.get_cell_at((row, 2))) for row in range(table.row_count)]
        cut = [text for text in subjects if text.endswith("…")]
        assert cut and {len(text) for text in cut} == {max(map(len, subjects))}


@synchronously
async def test_enter_in_the_box_opens_the_row_down_picked_once_typing_has_searched(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car")
        await settle(pilot)  # searched as typed
        await pilot.press("down", "enter")
        await settle(pilot)
        assert isinstance(app.screen, DetailScreen) and app.screen.result == app.results[1]
        await pilot.press("escape", *" prices", "enter")  # a changed query: Enter searches it
        await settle(pilot)
        assert not isinstance(app.screen, DetailScreen) and app.answered.query == "cheap car prices"


@pytest.mark.slow
@synchronously
async def test_m_and_b_act_in_the_opened_question_and_m_empties_the_search_box(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        first = app.results[0]
        await pilot.press("enter")
        assert isinstance(app.screen, DetailScreen)
        await pilot.press("b")
        await pilot.pause()
        assert not isinstance(app.screen, DetailScreen) and status(app).endswith("“cheap car”")
        await pilot.press("enter", "m")
        await settle(pilot)
        assert not isinstance(app.screen, DetailScreen)
        assert app.history[-1].like == first and first.row_id not in {r.row_id for r in app.results}
        assert app.query_one("#query", Input).value == ""
        await pilot.press("b")
        await settle(pilot)
        assert app.query_one("#query", Input).value == "cheap car"


@pytest.mark.slow
@synchronously
async def test_a_folds_and_lists_near_duplicates(index_dir):
    app = make_app(index_dir, collapse=True)
    async with app.run_test(size=(160, 30)) as pilot:
        await pilot.press(*"Family visa for my parents", "enter")
        await settle(pilot)
        first = app.results[0]
        assert {first.external_id, *(a.external_id for a in first.alike)} == {"Q9_R1", "again"}
        assert all(r.duplicate_of is None for r in app.results)
        assert str(app.query_one(DataTable).get_cell_at((0, 2))).endswith("(+1 alike)")
        await pilot.press("a")
        await settle(pilot)
        assert not app.shown.collapse and not any(r.alike for r in app.results)
        assert any(r.duplicate_of is not None for r in app.results)
        assert str(app.query_one("#shown").render()) == "≥0% · all listed"


@pytest.mark.slow
@synchronously
async def test_plus_and_minus_change_the_minimum_match(index_dir):
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        everything = len(app.results)
        await pilot.press(*["plus"] * 5)
        await settle(pilot)
        assert app.shown.min_match == 0.5 and str(app.query_one("#shown").render()).startswith("≥50%")
        assert all(r.match >= 0.5 for r in app.results) and len(app.results) < everything
        await pilot.press(*["plus"] * 9)  # at most 90%
        await settle(pilot)
        assert app.shown.min_match == 0.9
        assert all(r.match >= 0.9 for r in app.results)
        if not app.results:
            assert status(app) == "none reaches 90% (- lowers it) · “cheap car”"
        await pilot.press(*["minus"] * 12)
        await settle(pilot)
        assert app.shown.min_match == 0.0 and len(app.results) == everything
    app = make_app(index_dir, min_match=0.95)  # above the 90% that + stops at
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        await pilot.press("tab", "plus")  # the results have the focus: + acts
        assert app.shown.min_match == 0.95  # + never lowers it
        await pilot.press("minus")
        assert app.shown.min_match == 0.85


def test_the_default_shows_every_hit_as_search_does_and_folds_near_duplicates(index_dir):
    app = SearchApp(lambda: Searcher(index_dir))
    assert app.shown == Shown(20, SEARCH_MIN_MATCH, collapse=True) == Shown(20, collapse=True)


def test_the_help_names_tab_and_fits_the_dialog_at_80x24():
    lines = HELP.splitlines()
    assert any(line.split()[:1] == ["Tab"] for line in lines)
    # the dialog: 70 columns less border and padding; 24 rows less header, footer and button
    assert max(map(len, lines)) <= 70 - 2 - 4 and len(lines) <= 24 - 2 - 2 - 2 - 3


@synchronously
async def test_empty_index_screen(tmp_path, tiny_model):
    (tmp_path / "none.txt").write_text("")
    index_sources(tmp_path / "index", [tmp_path / "none.txt"], str(tiny_model), options=QUIET)
    app = make_app(tmp_path / "index")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, MessageScreen)
        assert "is empty" in app.screen.message and "askalike index" in app.screen.message


@synchronously
async def test_missing_index_screen(tmp_path):
    app = make_app(tmp_path / "nowhere")
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, MessageScreen) and "no index here" in app.screen.message
        await pilot.press("escape")
        await pilot.pause()
    assert app.return_code == 0


def _wait_for(condition, what: str, screen, timeout_s: float = 120) -> None:
    """Poll ``condition`` until it holds; the generous timeout only bounds a hung session."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}; the screen:\n{screen()}"
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (apt-get install tmux): "
                                                          "the real-terminal session needs it")
def test_real_terminal_session(index_dir, tmp_path):
    """`askalike tui` in a real terminal (tmux), with its defaults: the first frame, a typed
    query, Down from the search box, the opened question, m there, b, the help, Ctrl+C."""
    tmux = ["tmux", "-L", f"askalike-test-{os.getpid()}"]  # a private server: no other session sees it
    exit_status = tmp_path / "exit-status"
    command = (f"{shlex.quote(sys.executable)} -m askalike.app tui "
               f"--index {shlex.quote(str(index_dir))} -k 10; "
               f"echo $? > {shlex.quote(str(exit_status))}")

    def screen() -> str:
        return subprocess.run([*tmux, "capture-pane", "-p", "-t", "tui"], capture_output=True,
                              text=True).stdout

    def keys(*names: str) -> None:
        subprocess.run([*tmux, "send-keys", "-t", "tui", *names], check=True)

    # the size said in the environment too: a COLUMNS inherited from the test run would win
    subprocess.run([*tmux, "new-session", "-d", "-x", "120", "-y", "30", "-s", "tui", "-c", str(ROOT),
                    "-e", "COLUMNS=120", "-e", "LINES=30", command], check=True)
    try:
        _wait_for(lambda: "Type a question." in screen(), "the index to load", screen)
        keys("Family visa for my parents")
        # the defaults: hits under 30% left out, near-duplicates folded
        _wait_for(lambda: "· “Family visa for my parents”" in screen() and "≥0% · alike folded" in screen(),
                  "the results", screen)
        first_row = next(line for line in screen().splitlines() if line.lstrip().startswith("1 "))
        assert "Family visa for my parents" in first_row
        keys("Down")  # from the search box: the second hit is selected, the box keeps the focus
        _wait_for(lambda: "│ where can i" in screen() or "│ how do i" in screen() or "│ is it" in screen()
                  or "│ who knows" in screen(), "the second hit in the detail pane", screen)
        keys("Up", "Tab", "Enter")  # the results, then the whole first question
        _wait_for(lambda: "2 comments" in screen(), "the opened question", screen)
        keys("m")  # more like it, from the opened question
        _wait_for(lambda: "· more like “Family visa for my parents”" in screen(), "more like this", screen)
        keys("b")
        _wait_for(lambda: "· “Family visa for my parents”" in screen(), "back to the query", screen)
        keys("?")
        _wait_for(lambda: "move between the search box and the results" in screen(), "the help", screen)
        keys("Escape", "C-c")
        _wait_for(exit_status.exists, "the app to quit", screen)
        assert exit_status.read_text().strip() == "0"
        _wait_for(lambda: subprocess.run([*tmux, "has-session", "-t", "tui"],
                                         capture_output=True).returncode != 0, "the session to end", screen)
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)


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
        await pilot.pause()

    assert snap_compare(make_app(index_dir), terminal_size=SIZE, run_before=open_thread)


def test_small_terminal_snapshot(snap_compare, index_dir):
    async def search(pilot) -> None:
        await pilot.press(*"visa", "enter")
        await settle(pilot)

    assert snap_compare(make_app(index_dir), terminal_size=(80, 24), run_before=search)


@pytest.mark.slow
@synchronously
async def test_a_metadata_filter_is_typed_as_key_value(index_dir):
    app = make_app(index_dir)
    notices: list[str] = []
    app.notify = lambda message, **_: notices.append(str(message))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press(*"cheap", "enter")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        await pilot.click("#where")
        await pilot.press(*"category", "enter")  # not KEY=VALUE: said, and the dialog stays
        await pilot.pause()
        assert isinstance(app.screen, FilterScreen) and "expected KEY=VALUE" in notices[-1]
        app.screen.query_one("#where", Input).value = "category=CAR"
        await pilot.click("#where")
        await pilot.press("enter")
        await settle(pilot)
        assert app.results and all(r.metadata["category"] == "car" for r in app.results)
        assert filters_shown(app) == "filters (c clears): category=CAR"
        screenshots = os.environ.get("ASKALIKE_SCREENSHOTS")  # docs/tui.svg is made this way
        if screenshots:
            app.save_screenshot(filename="tui.svg", path=screenshots)


@pytest.mark.slow
@synchronously
async def test_many_filters_are_cut_and_leave_the_status_its_room(index_dir):
    """Filters take at most 40% of the status bar, cut with an ellipsis; the outcome of the
    search keeps the rest (it was pushed out at 120 columns by six filters)."""
    app = make_app(index_dir)
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.press(*"cheap", "enter")
        await settle(pilot)
        many = SearchFilters(categories=("car", "visa", "housing", "health insurance"),
                             where=(("team", "Billing"), ("queue", "Email")), date_from="2024-01-01")
        app._show_filters(many)
        await pilot.pause()
        filters, status = app.query_one("#filters"), app.query_one("#status")
        assert filters.region.width <= 0.4 * 120 and status.region.width >= 30
        assert str(status.render()).startswith(tuple(f"{n} result" for n in range(1, 11)))


def test_the_status_line_names_a_ticked_source_once_as_the_results_do(tmp_path, monkeypatch):
    # a source filter also holds the absolute path of a file of that name here: one name is shown
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tickets.csv").write_text("id,question\n")
    filters = SearchFilters(sources=("tickets.csv",), where=(("queue", "Email"),))
    assert filters.sources == ("tickets.csv", str(tmp_path / "tickets.csv"))
    labels = {str(tmp_path / "tickets.csv"): "tickets.csv"}  # the index stored it by its path
    assert describe_filters(filters, labels) == "filters (c clears): source tickets.csv, queue=Email"
    assert describe_filters(filters, {}) == "filters (c clears): source tickets.csv, queue=Email"


def _footer(app: SearchApp) -> list[str]:
    """The keys that the shown screen's footer shows ("q Quit")."""
    from textual.widgets._footer import FooterKey

    return [f"{key.key_display} {key.description}" for key in app.screen.query(FooterKey)
            if key.key != app.COMMAND_PALETTE_BINDING]


@synchronously
async def test_the_footer_shows_the_keys_that_act_where_the_focus_is(index_dir):
    """A letter typed in the search box is text: the footer shows no letter key there; the
    results table's letters once it has the focus."""
    app = make_app(index_dir)
    async with app.run_test(size=SIZE) as pilot:
        await settle(pilot)
        typing = _footer(app)
        await pilot.press(*"cheap car", "enter")
        await settle(pilot)
        browsing = _footer(app)
    assert typing == ["^c Quit", "F1 Help", "Esc Back", "^t Mode"]
    assert browsing == ["q Quit", "? Help", "m More like this", "b Back", "f Filters", "a Alike",
                        "/ Search", "^t Mode"]  # "c Clear filters" once there are filters


@synchronously
async def test_the_filters_dialog_starts_on_its_first_list_in_a_small_terminal(index_dir):
    """Where the dialog overflows the terminal, the focus still starts on its first list (not on
    the dialog, which took a Tab to leave), and Tab goes on through its widgets; its footer is
    its own."""
    app = make_app(index_dir)
    async with app.run_test(size=(80, 16)) as pilot:
        await pilot.press(*"visa", "enter")
        await settle(pilot)
        await pilot.press("f")
        await pilot.pause()
        assert app.screen.query_one("#dialog").max_scroll_y > 0  # it overflows
        assert _footer(app) == ["esc Cancel"]  # its own keys, not those of the screen beneath
        focused = [app.focused.id]
        for _ in range(3):
            await pilot.press("tab")
            focused.append(app.focused.id)
    assert focused == ["sources", "categories", "from", "to"]
