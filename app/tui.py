"""``askalike tui``: browse a question collection by meaning, a thin Textual layer over ``Searcher``.

The index and the model load in a worker thread, so that the first frame appears at once (a
query typed meanwhile runs when they are ready). Searches run in a worker thread too (the
encoder is CPU-bound), debounced while the user types, so the interface never stutters; a newer
search cancels the older one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, SelectionList, Static

from askalike.app.hits import question_markup, result_row
from askalike.app.output import markup_safe
from askalike.app.safe_text import printable
from askalike.core.credentials import masked_text
from askalike.core.dates import date_hint
from askalike.core.errors import UserError
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.judgement import SEARCH_MIN_MATCH
from askalike.retrieval.results import Shown
from askalike.retrieval.searcher import Searcher, SearchFilters, SearchResult, where_filters

DEBOUNCE_S = 0.3
HELP = """\
[b]askalike[/b]: search your questions by meaning
  type        search as you type (Enter: at once)
  Tab  /      move between the search box and the results
  ↑ ↓   j k   move through the results (j k: when not typing)
  Enter       the selected question in full (↓ selects)
  m           more like it        b  Escape   back
  f           filters             c           clear them
  a           fold the same question ("+3 alike"), or list it
  + -         raise or lower the minimum match (by 10%)
  Ctrl+T      mode: dense (meaning), lexical (words), hybrid
  ?  F1       this help           q  Ctrl+C   quit
Letters act when the results have the focus (Tab).
Match: how likely a hit asks the same question: of the hits
at 80%, about 80% do (every mode). "≈ #2": judged the same
question as hit 2 (50% or more).
"""
MIN_MATCH_STEP = 0.1
SOURCE_CHARS = 18  # the source column's widest (file names cut with "…")
DETAIL_MIN_WIDTH = 100  # a terminal narrower shows no detail pane beside the results
TUI_FIELDS = ("match", "subject", "source")


@dataclass(frozen=True)
class Search:
    """One entry of the history: a text query, or "more like" a stored question."""

    query: str = ""
    like: SearchResult | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)

    def describe(self) -> str:
        return f"more like “{self.like.subject or self.like.excerpt}”" if self.like else f"“{self.query}”"


def describe_filters(filters: SearchFilters, source_labels: Mapping[str, str]) -> str:
    """The filters in one line for the status bar (the key that clears them first: many filters
    are cut at the end); empty when there are none. A source is named once, as the results name
    it (``filters.sources`` also holds each one's absolute path, the other name it may be stored
    under)."""
    stored = [source_labels[name] for name in filters.sources if name in source_labels]
    sources = dict.fromkeys(stored or filters.sources[:1])
    parts = [*(f"source {name}" for name in sources),
             *(f"category {name}" for name in filters.categories),
             *(f"{key}={value}" for key, value in filters.where)]
    if filters.date_from:
        parts.append(f"from {filters.date_from}")
    if filters.date_to:
        parts.append(f"to {filters.date_to}")
    return f"filters (c clears): {', '.join(parts)}" if parts else ""


class MessageScreen(ModalScreen[None]):
    """A modal with a message and a close button (help, errors)."""

    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "dismiss", "Close")]

    def __init__(self, message: str) -> None:
        super().__init__()
        self.message = message

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static(self.message, id="message")
            yield Button("Close", id="close", variant="primary")

    @on(Button.Pressed, "#close")
    def _close(self) -> None:
        self.dismiss()


@dataclass(frozen=True)
class Choices:
    """What the filter dialog offers: the index's sources (by name, ``Searcher.source_labels``)
    and categories, each with its count of questions."""

    sources: dict[str, int] = field(default_factory=dict)
    categories: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, searcher: Searcher) -> Choices:
        store = searcher.index.store
        try:
            categories = store.category_counts()
        except UserError:  # an index of an older askalike, not upgraded yet: sources only
            categories = {}
        sources = {searcher.source_label(name): count for name, count in store.counts_by_source().items()}
        return cls(sources, categories)


class FilterScreen(ModalScreen[SearchFilters | None]):
    """The filters: sources and categories picked from the index's own (space or a click
    ticks one), dates typed."""

    BINDINGS: ClassVar = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, current: SearchFilters, choices: Choices, searcher: Searcher | None = None) -> None:
        super().__init__()
        self.current = current
        self.choices = choices
        self.searcher = searcher  # reads the dates by the index's date format

    def compose(self) -> ComposeResult:
        # the dialog itself never takes the focus (a scrollable one would, before the first
        # list, when it overflows a small terminal): Tab scrolls to the widget it focuses
        with VerticalScroll(id="dialog", can_focus=False):
            yield Label("Filters (none ticked: any; Tab moves, space ticks)")
            for widget_id, title, offered, picked in (
                    ("sources", "Sources", self.choices.sources, self.current.sources),
                    ("categories", "Categories", self.choices.categories, self.current.categories)):
                if offered:
                    keys = {name.casefold() for name in picked}
                    yield Label(title)
                    yield SelectionList[str](*((Text(f"{printable(name, keep='')} ({count:,})"), name,
                                                name.casefold() in keys) for name, count in offered.items()),
                                             id=widget_id)
            hint = date_hint(self.searcher.reading.date_order if self.searcher else None)
            yield Input(self.current.date_from or "", placeholder=f"from date ({hint})", id="from")
            yield Input(self.current.date_to or "", placeholder=f"to date ({hint})", id="to")
            yield Input(", ".join(f"{key}={value}" for key, value in self.current.where),
                        placeholder="metadata: KEY=VALUE, comma-separated (team=Billing)", id="where")
            with Horizontal(id="buttons"):
                yield Button("Apply", id="apply", variant="primary")
                yield Button("Clear", id="clear")
        yield Footer()  # its own keys, not those of the screen beneath

    def _value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def _picked(self, widget_id: str) -> tuple[str, ...]:
        lists = self.query(f"#{widget_id}").results(SelectionList)
        return tuple(name for selection in lists for name in selection.selected)

    @on(Button.Pressed, "#apply")
    @on(Input.Submitted)
    def _apply(self) -> None:
        where = [part for part in self._value("where").split(",") if part.strip()]
        try:
            if self.searcher is not None:
                filters = self.searcher.filters(self._picked("sources"), self._picked("categories"),
                                                self._value("from") or None, self._value("to") or None,
                                                where=where, where_option="metadata")
            else:
                filters = SearchFilters(self._picked("sources"), self._picked("categories"),
                                        self._value("from") or None, self._value("to") or None,
                                        where=where_filters(where, "metadata"))
        except UserError as err:  # an invalid date: said here, and the dialog stays open
            self.notify(printable(str(err), keep=""), severity="error", markup=False)
            return
        self.dismiss(filters)

    @on(Button.Pressed, "#clear")
    def _clear(self) -> None:
        self.dismiss(SearchFilters())


def detail_markup(result: SearchResult, source_label: str) -> str:
    """The full question: subject, metadata, body, and the comments when the source has them."""
    facts = [f"match {result.match:.0%} (cosine {result.cosine:.3f})",
             *([f"near-duplicate of #{result.duplicate_of}"] if result.duplicate_of is not None else []),
             *([f"{len(result.alike)} alike: {', '.join(a.external_id for a in result.alike)}"]
               if result.alike else []),
             f"source {source_label}", f"id {result.external_id}"]
    return question_markup(result.subject, result.body, result.metadata, facts)


def clipped_text(text: str, width: int) -> str:
    """``text`` in at most ``width`` cells, cut with "…" (a cell per character)."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


class ResultsTable(DataTable):
    """The results, their subjects and sources cut with "…" to the table's width, and cut again
    when that changes.

    The columns' widths are set here, not left to the table: it measures new rows only when
    idle, and a frame drawn before that is cached at the headers' widths (ranks "1", subjects of
    7 characters) until the next search."""

    LABELS = ("#", *TUI_FIELDS)
    BINDINGS: ClassVar = [
        Binding("q", "app.quit", "Quit"),
        Binding("question_mark", "app.help", "Help", key_display="?"),
        Binding("m", "app.more_like", "More like this"),
        Binding("b", "app.back", "Back"),
        Binding("f", "app.filters", "Filters"),
        Binding("c", "app.clear_filters", "Clear filters"),
        Binding("a", "app.toggle_collapse", "Alike"),
        Binding("plus", "app.min_match(1)", "Min match +", show=False),
        Binding("minus", "app.min_match(-1)", "Min match -", show=False),
        Binding("slash", "app.focus_search", "Search", key_display="/"),
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]

    def __init__(self, id: str) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.uncut: list[tuple[str, ...]] = []  # the cells of each row as result_row gives them
        self.fitted_width = 0  # the width the shown rows were cut for

    def show(self, rows: list[tuple[str, ...]]) -> None:
        """Show ``rows`` (``result_row``'s cells of each hit), the cursor on the first."""
        self.uncut = rows
        self._fill()

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self.fitted_width:
            row = self.cursor_row
            self._fill()
            if self.uncut:
                self.move_cursor(row=min(row, len(self.uncut) - 1))

    def _fill(self) -> None:
        self.fitted_width = self.size.width
        rows = fitted_rows(self.uncut, self.fitted_width)
        # the columns too: an earlier search's long subjects would keep pushing the source
        # column out of view
        self.clear(columns=True)
        for label, *cells in zip(self.LABELS, *rows, strict=True):
            self.add_column(label, width=max(map(cell_len, (label, *cells))))
        for row in rows:
            self.add_row(*map(Text, row))


def fitted_rows(rows: list[tuple[str, ...]], width: int) -> list[tuple[str, ...]]:
    """``rows`` (rank, match, subject, source) with the subjects and sources cut to fit a table
    ``width`` cells wide."""
    if not rows:
        return []
    rank, match, source = (max(len(row[i]) for row in rows) for i in (0, 1, 3))
    # each column has a cell of padding either side; 2 for the scrollbar
    left = max(width - rank - match - 2 * 4 - 2, 20)
    source = min(source, SOURCE_CHARS, left // 3)
    subject = left - source
    return [(row[0], row[1], clipped_text(row[2], subject), clipped_text(row[3], source)) for row in rows]


class DetailScreen(ModalScreen[str | None]):
    """One question in full, scrollable; dismissed with "more" when the user asks for more like it."""

    BINDINGS: ClassVar = [Binding("escape,q,enter,b", "dismiss", "Close"),
                          Binding("m", "dismiss('more')", "More like this"),
                          Binding("j", "scroll('down')", show=False),
                          Binding("k", "scroll('up')", show=False)]

    def __init__(self, result: SearchResult, source_label: str) -> None:
        super().__init__()
        self.result, self.source_label = result, source_label

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="full"):
            yield Static(detail_markup(self.result, self.source_label), id="full-text")
        yield Footer()

    def action_scroll(self, direction: str) -> None:
        scroll = self.query_one("#full", VerticalScroll)
        if direction == "down":
            scroll.scroll_down()
        else:
            scroll.scroll_up()


class SearchApp(App[None]):
    TITLE = "askalike"
    CSS = """
    #query { margin: 0 1; }
    #statusbar { height: 1; padding: 0 2; color: $text-muted; }
    #status { width: 1fr; text-wrap: nowrap; text-overflow: ellipsis; padding-right: 2; }
    #filters { width: auto; max-width: 40%; text-wrap: nowrap; text-overflow: ellipsis;
               color: $warning; padding-right: 2; }  /* many filters: cut, never the status */
    #shown { width: auto; padding-right: 2; }
    #mode { width: auto; }
    #body { height: 1fr; }
    #results { width: 3fr; min-width: 40; }
    #detail { width: 2fr; border-left: solid $primary; padding: 0 1; }
    MessageScreen, FilterScreen, DetailScreen { align: center middle; }
    #dialog { width: 70; max-width: 95%; height: auto; max-height: 95%; padding: 1 2;
              border: round $primary; background: $panel; }
    #dialog SelectionList { height: auto; max-height: 6; }
    #full { width: 90%; height: 90%; padding: 1 2; border: round $primary; background: $panel; }
    #buttons { height: auto; margin-top: 1; }
    #dialog Button { margin-right: 2; }
    """
    # the keys that act wherever the focus is; the letters are the results table's (a letter
    # typed in the search box is text). The footer shows the keys that act now, one per action:
    # the table's letter first where it has the focus (both spell the action "app....").
    BINDINGS: ClassVar = [
        Binding("ctrl+c", "app.quit", "Quit", priority=True),
        Binding("f1", "app.help", "Help", key_display="F1"),
        Binding("escape", "app.back", "Back", key_display="Esc"),
        Binding("ctrl+t", "next_mode", "Mode", priority=True),
        Binding("down", "cursor('down')", "Down", show=False),
        Binding("up", "cursor('up')", "Up", show=False),
    ]

    def __init__(self, open_searcher: Callable[[], Searcher], k: int = 20,
                 mode: SearchMode | None = None, min_match: float | None = None,
                 collapse: bool = True) -> None:
        """``min_match``: None for search's default (every hit)."""
        super().__init__(ansi_color=True)  # the terminal's own colours, light or dark
        self.open_searcher = open_searcher
        self.k = k
        self.mode = mode  # None until the searcher is open: then the index model's default
        self.shown = Shown(k, SEARCH_MIN_MATCH if min_match is None else min_match, collapse)
        self.searcher: Searcher | None = None
        self.choices = Choices()
        self.found = 0  # hits of the last search before min-match and collapse
        self.answered: Search | None = None  # the search whose results are shown
        self.filters = SearchFilters()
        self.history: list[Search] = []
        self.results: list[SearchResult] = []
        self._debounce: Timer | None = None
        self._waiting: tuple[Search, bool] | None = None  # a search asked for while loading

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="Search by meaning…", id="query")
        with Horizontal(id="statusbar"):
            yield Static("", id="status")
            yield Static("", id="filters")
            yield Static("", id="shown")
            yield Static("", id="mode")  # the search mode, once the searcher is open
        with Horizontal(id="body"):
            yield ResultsTable(id="results")
            with VerticalScroll(id="detail", can_focus=False):
                yield Static("", id="detail-text")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(ResultsTable)
        table.show([])
        table.loading = True
        self._show_shown()
        self.sub_title = "loading…"
        self._status("Loading the model and the index…")
        self.query_one("#query", Input).focus()
        self._open_searcher()

    @work(thread=True, group="open")
    def _open_searcher(self) -> None:
        try:
            searcher = self.open_searcher()
            choices = Choices.of(searcher)
        except UserError as err:  # shown to the user, who can fix the cause
            self.call_from_thread(self._fail, str(err))
            return
        self.call_from_thread(self._opened, searcher, choices)

    def _opened(self, searcher: Searcher, choices: Choices) -> None:
        self.searcher = searcher
        self.choices = choices
        self.query_one(DataTable).loading = False
        self._show_mode(self.mode or searcher.default_mode)
        index = searcher.index
        # the count first: a narrow terminal cuts the end of the header
        self.sub_title = printable(f"{searcher.count:,} questions · {index.directory.name} · "
                                   f"{Path(index.manifest.encoder.model).name}")
        if searcher.count == 0:
            self._fail(f"The index {index.directory} is empty.\n\nAdd questions with:\n"
                       f"  askalike index SOURCE --index {index.directory}")
            return
        self._status("Type a question.")
        if self._waiting is not None:
            self._run(*self._waiting)
            self._waiting = None

    def on_unmount(self) -> None:
        if self.searcher is not None:
            self.searcher.close()

    def _fail(self, message: str) -> None:
        self.query_one(DataTable).loading = False
        self.query_one("#query", Input).disabled = True
        self._status("Nothing to search.")
        self.push_screen(MessageScreen(f"[b]Cannot search[/b]\n\n{markup_safe(masked_text(message))}"),
                         callback=lambda _: self.exit())

    def _status(self, text: str) -> None:
        self.query_one("#status", Static).update(Text(printable(text, keep="")))

    # ------------------------------------------------------------------ searching

    @on(Input.Changed, "#query")
    def _typed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        if event.value.strip():
            self._debounce = self.set_timer(DEBOUNCE_S, lambda: self._submit(event.value))

    @on(Input.Submitted, "#query")
    def _entered(self, event: Input.Submitted) -> None:
        """Enter searches; where the results shown are already this query's (typing searched
        it, Down picked a row), it opens the highlighted question instead."""
        if self._debounce is not None:
            self._debounce.stop()
        if self.results and self.answered == Search(query=event.value.strip(), filters=self.filters):
            self._selected()
        elif event.value.strip():
            self._submit(event.value, focus_results=True)

    def _submit(self, query: str, focus_results: bool = False) -> None:
        search = Search(query=query.strip(), filters=self.filters)
        if self.history and self.history[-1].like is None and self.history[-1].filters == search.filters:
            self.history[-1] = search  # refining the same query while typing: one history entry
        else:
            self.history.append(search)
        self._run(search, focus_results)

    def _run(self, search: Search, focus_results: bool = False) -> None:
        if self.searcher is None:  # still loading: runs once ready
            self._waiting = (search, focus_results)
            return
        self._status(f"Searching {search.describe()}…")
        self._search(self.searcher, search, focus_results)

    @work(thread=True, exclusive=True, group="search")
    def _search(self, searcher: Searcher, search: Search, focus_results: bool) -> None:
        shown = self.shown
        try:
            answer = (shown.like(searcher, search.like, search.filters) if search.like is not None
                      else shown.search(searcher, [search.query], search.filters, self.mode)[0])
        except UserError as err:  # reported in the status line
            self.call_from_thread(self._status, f"Search failed: {masked_text(str(err))}")
            return
        self.call_from_thread(self._show, search, answer.found, answer.hits, focus_results)

    def _show(self, search: Search, found: int, results: list[SearchResult], focus_results: bool) -> None:
        self.results, self.found, self.answered = results, found, search
        self.query_one(ResultsTable).show([result_row(result, self._source_labels(), TUI_FIELDS, bar_width=6)
                                           for result in results])
        if results:
            outcome = f"{len(results)} results"
        elif found:
            outcome = f"none reaches {self.shown.min_match:.0%} (- lowers it)"
        else:
            outcome = "no results"
        self._status(f"{outcome} · {search.describe()}")  # the outcome first: a narrow terminal cuts the end
        self._detail(results[0] if results else None)
        if focus_results and results:
            self.query_one(DataTable).focus()

    def on_resize(self, event: events.Resize) -> None:
        # below DETAIL_MIN_WIDTH columns the results take the whole width (Enter opens a question);
        # the event's size: the app's own is still the old one here
        self.query_one("#detail").display = event.size.width >= DETAIL_MIN_WIDTH

    def _source_labels(self) -> dict[str, str]:
        """The sources as the results name them (none before the index is loaded)."""
        return self.searcher.source_labels if self.searcher is not None else {}

    def _detail(self, result: SearchResult | None) -> None:
        self.query_one("#detail-text", Static).update(
            detail_markup(result, self._source_labels().get(result.source, result.source)) if result else "")

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.results):
            self._detail(self.results[event.cursor_row])

    @on(DataTable.RowSelected)
    def _selected(self) -> None:
        selected = self._selected_result()
        if selected is not None:
            def then(choice: str | None) -> None:
                if choice == "more":
                    self._more_like(selected)

            label = self._source_labels().get(selected.source, selected.source)
            self.push_screen(DetailScreen(selected, label), callback=then)

    # ------------------------------------------------------------------ actions

    def _selected_result(self) -> SearchResult | None:
        row = self.query_one(DataTable).cursor_row
        return self.results[row] if 0 <= row < len(self.results) else None

    def action_more_like(self) -> None:
        selected = self._selected_result()
        if selected is not None:
            self._more_like(selected)

    def _more_like(self, selected: SearchResult) -> None:
        """Search for more like ``selected``; the search box empties (b brings the query back)."""
        search = Search(like=selected, filters=self.filters)
        self.history.append(search)
        if self._debounce is not None:
            self._debounce.stop()
        query = self.query_one("#query", Input)
        with query.prevent(Input.Changed):
            query.value = ""
        self._run(search, focus_results=True)

    def action_back(self) -> None:
        if len(self.history) < 2:
            self.query_one("#query", Input).focus()
            return
        self.history.pop()
        previous = self.history[-1]
        self._show_filters(previous.filters)
        query = self.query_one("#query", Input)
        with query.prevent(Input.Changed):
            query.value = previous.query
        self._run(previous, focus_results=True)

    def action_filters(self) -> None:
        def apply(filters: SearchFilters | None) -> None:
            if filters is not None:
                self._apply_filters(filters)

        self.push_screen(FilterScreen(self.filters, self.choices, self.searcher), callback=apply)

    def action_clear_filters(self) -> None:
        self._apply_filters(SearchFilters())

    def _apply_filters(self, filters: SearchFilters) -> None:
        """Filter from now on, and run the current search again under the new filters."""
        self._show_filters(filters)
        if self.history:
            search = replace(self.history[-1], filters=filters)
            self.history.append(search)
            self._run(search, focus_results=True)

    def _show_filters(self, filters: SearchFilters) -> None:
        self.filters = filters
        self.query_one("#filters", Static).update(
            Text(printable(describe_filters(filters, self._source_labels()), keep="")))
        self.refresh_bindings()  # "Clear filters" shows only while there are filters

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return bool(self.filters) if action == "clear_filters" else True

    def action_toggle_collapse(self) -> None:
        """Fold near-duplicates into their better hit, or list them again; the search runs again."""
        self.shown = replace(self.shown, collapse=not self.shown.collapse)
        self._show_shown()
        self._again()

    def action_min_match(self, steps: int) -> None:
        """Raise (or lower) the minimum match by ``steps`` tenths, from 0 up to 90% (or the
        higher one --min-match gave: + never lowers it); the search runs again."""
        highest = max(0.9, self.shown.min_match)
        low = round(min(max(self.shown.min_match + steps * MIN_MATCH_STEP, 0.0), highest), 2)
        if low != self.shown.min_match:
            self.shown = replace(self.shown, min_match=low)
            self._show_shown()
            self._again()

    def _again(self) -> None:
        if self.history:
            self._run(self.history[-1])

    def _show_shown(self) -> None:
        shown = self.shown
        self.query_one("#shown", Static).update(
            f"≥{shown.min_match:.0%} · {'alike folded' if shown.collapse else 'all listed'}")

    def action_next_mode(self) -> None:
        """Dense -> lexical -> hybrid -> dense, and the current text search again in the new mode."""
        if self.searcher is None:
            return
        modes = list(SearchMode)
        self._show_mode(modes[(modes.index(self.mode or self.searcher.default_mode) + 1) % len(modes)])
        if self.history and self.history[-1].like is None:
            self._run(self.history[-1])

    def _show_mode(self, mode: SearchMode) -> None:
        self.mode = mode
        self.query_one("#mode", Static).update(f"mode: {mode.value} (^t)")

    def action_help(self) -> None:
        self.push_screen(MessageScreen(HELP))

    def action_focus_search(self) -> None:
        self.query_one("#query", Input).focus()

    def action_cursor(self, direction: str) -> None:
        table = self.query_one(DataTable)
        if direction == "down":
            table.action_cursor_down()
        else:
            table.action_cursor_up()
