"""``askalike tui``: browse a question collection by meaning, a thin Textual layer over ``Searcher``.

Searches run in a worker thread (the encoder is CPU-bound), debounced while the user types, so
the interface never stutters; a newer search cancels the older one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

from rich.markup import escape
from textual import on, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.timer import Timer
from textual.widgets import Button, DataTable, Footer, Header, Input, Label, Static

from app.common import similarity_bar
from retrieval.searcher import Searcher, SearchFilters, SearchResult
from train.errors import UserError

DEBOUNCE_S = 0.3
HELP = """\
[b]askalike[/b]: search your questions by meaning

  type            search as you type (Enter searches at once)
  ↑ ↓  j k        move through the results
  Enter           open the selected question in the detail pane
  m               more like the selected question
  b  Escape       back to the previous search
  f               filter by source, category or date
  /               back to the search box
  ?               this help        q  quit
"""


@dataclass(frozen=True)
class Search:
    """One entry of the history: a text query, or "more like" a stored question."""

    query: str = ""
    like: SearchResult | None = None
    filters: SearchFilters = field(default_factory=SearchFilters)

    def describe(self) -> str:
        text = f"more like “{self.like.subject or self.like.excerpt}”" if self.like else f"“{self.query}”"
        return text + (" (filtered)" if self.filters else "")


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


class FilterScreen(ModalScreen[SearchFilters | None]):
    BINDINGS: ClassVar = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, current: SearchFilters) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Filters (comma-separated; empty = any)")
            yield Input(", ".join(self.current.sources), placeholder="source file names", id="sources")
            yield Input(", ".join(self.current.categories), placeholder="categories", id="categories")
            yield Input(self.current.date_from or "", placeholder="from date (YYYY-MM-DD)", id="from")
            yield Input(self.current.date_to or "", placeholder="to date (YYYY-MM-DD)", id="to")
            with Horizontal(id="buttons"):
                yield Button("Apply", id="apply", variant="primary")
                yield Button("Clear", id="clear")

    def _value(self, widget_id: str) -> str:
        return self.query_one(f"#{widget_id}", Input).value.strip()

    def _items(self, widget_id: str) -> tuple[str, ...]:
        return tuple(item.strip() for item in self._value(widget_id).split(",") if item.strip())

    @on(Button.Pressed, "#apply")
    @on(Input.Submitted)
    def _apply(self) -> None:
        self.dismiss(SearchFilters(self._items("sources"), self._items("categories"),
                                   self._value("from") or None, self._value("to") or None))

    @on(Button.Pressed, "#clear")
    def _clear(self) -> None:
        self.dismiss(SearchFilters())


def detail_markup(result: SearchResult) -> str:
    """The detail pane: subject, metadata, body, and the comments when the source has them."""
    meta = result.metadata
    facts = [f"similarity {result.similarity:.2f} (cosine {result.cosine:.3f})",
             *(f"{name} {meta[name]}" for name in ("category", "date") if meta.get(name)),
             f"source {Path(result.source).name}", f"id {result.external_id}"]
    parts = [f"[b]{escape(result.subject)}[/b]", f"[dim]{escape(' · '.join(facts))}[/dim]", "",
             escape(result.body)]
    comments = meta.get("comments") or []
    if comments:
        parts += ["", f"[b]{len(comments)} comments[/b]"]
        for comment in comments:
            who = " · ".join(str(comment[k]) for k in ("username", "date") if comment.get(k))
            parts += [f"[dim]{escape(who)}[/dim]", escape(comment.get("text", "")), ""]
    return "\n".join(parts)


class SearchApp(App[None]):
    TITLE = "askalike"
    CSS = """
    #query { margin: 0 1; }
    #status { height: 1; padding: 0 2; color: $text-muted; }
    #body { height: 1fr; }
    #results { width: 3fr; min-width: 40; }
    #detail { width: 2fr; border-left: solid $primary; padding: 0 1; }
    MessageScreen, FilterScreen { align: center middle; }
    #dialog { width: 70; max-width: 95%; height: auto; padding: 1 2; border: round $primary;
              background: $panel; }
    #buttons { height: auto; margin-top: 1; }
    #dialog Button { margin-right: 2; }
    """
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("m", "more_like", "More like this"),
        Binding("b,escape", "back", "Back"),
        Binding("f", "filters", "Filters"),
        Binding("slash", "focus_search", "Search", key_display="/"),
        Binding("j", "cursor('down')", "Down", show=False),
        Binding("k", "cursor('up')", "Up", show=False),
    ]

    def __init__(self, open_searcher: Callable[[], Searcher], k: int = 20) -> None:
        super().__init__(ansi_color=True)  # the terminal's own colours, light or dark
        self.open_searcher = open_searcher
        self.k = k
        self.searcher: Searcher | None = None
        self.filters = SearchFilters()
        self.history: list[Search] = []
        self.results: list[SearchResult] = []
        self._debounce: Timer | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Input(placeholder="Search by meaning…", id="query")
        yield Static("", id="status")
        with Horizontal(id="body"):
            yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
            with VerticalScroll(id="detail"):
                yield Static("", id="detail-text")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("#", "sim", "", "subject", "source")
        try:
            self.searcher = self.open_searcher()
        except UserError as err:  # shown to the user, who can fix the cause
            self._fail(str(err))
            return
        index = self.searcher.index
        self.sub_title = (f"{index.directory.name} · {Path(index.manifest.encoder.model).name} · "
                          f"{self.searcher.count:,} questions")
        if self.searcher.count == 0:
            self._fail(f"The index {index.directory} is empty.\n\nAdd questions with:\n"
                       f"  askalike index SOURCE --index {index.directory}")
            return
        self._status("Type a question.")
        self.query_one("#query", Input).focus()

    def on_unmount(self) -> None:
        if self.searcher is not None:
            self.searcher.close()

    def _fail(self, message: str) -> None:
        self.query_one("#query", Input).disabled = True
        self._status("Nothing to search.")
        self.push_screen(MessageScreen(f"[b]Cannot search[/b]\n\n{escape(message)}"),
                         callback=lambda _: self.exit())

    def _status(self, text: str) -> None:
        self.query_one("#status", Static).update(text)

    # ------------------------------------------------------------------ searching

    @on(Input.Changed, "#query")
    def _typed(self, event: Input.Changed) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        if event.value.strip():
            self._debounce = self.set_timer(DEBOUNCE_S, lambda: self._submit(event.value))

    @on(Input.Submitted, "#query")
    def _entered(self, event: Input.Submitted) -> None:
        if self._debounce is not None:
            self._debounce.stop()
        if event.value.strip():
            self._submit(event.value, focus_results=True)

    def _submit(self, query: str, focus_results: bool = False) -> None:
        search = Search(query=query.strip(), filters=self.filters)
        if self.history and self.history[-1].like is None and self.history[-1].filters == search.filters:
            self.history[-1] = search  # refining the same query while typing: one history entry
        else:
            self.history.append(search)
        self._run(search, focus_results)

    @work(thread=True, exclusive=True, group="search")
    def _run(self, search: Search, focus_results: bool = False) -> None:
        assert self.searcher is not None
        try:
            if search.like is not None:
                results = self.searcher.more_like(search.like.id, self.k, search.filters)
            else:
                results = self.searcher.search(search.query, self.k, search.filters)
        except UserError as err:  # reported in the status line
            self.call_from_thread(self._status, f"Search failed: {err}")
            return
        self.call_from_thread(self._show, search, results, focus_results)

    def _show(self, search: Search, results: list[SearchResult], focus_results: bool) -> None:
        self.results = results
        table = self.query_one(DataTable)
        table.clear()
        for result in results:
            table.add_row(str(result.rank), f"{result.similarity:.2f}", similarity_bar(result.similarity, 6),
                          result.subject or result.excerpt, Path(result.source).name)
        found = f"{len(results)} results" if results else "no results"
        self._status(f"{search.describe()}: {found}")
        self._detail(results[0] if results else None)
        if focus_results and results:
            table.focus()

    def _detail(self, result: SearchResult | None) -> None:
        self.query_one("#detail-text", Static).update(detail_markup(result) if result else "")

    @on(DataTable.RowHighlighted)
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if 0 <= event.cursor_row < len(self.results):
            self._detail(self.results[event.cursor_row])

    @on(DataTable.RowSelected)
    def _selected(self) -> None:
        self.query_one("#detail", VerticalScroll).focus()

    # ------------------------------------------------------------------ actions

    def _selected_result(self) -> SearchResult | None:
        row = self.query_one(DataTable).cursor_row
        return self.results[row] if 0 <= row < len(self.results) else None

    def action_more_like(self) -> None:
        selected = self._selected_result()
        if selected is not None:
            search = Search(like=selected, filters=self.filters)
            self.history.append(search)
            self._run(search, focus_results=True)

    def action_back(self) -> None:
        if len(self.history) < 2:
            self.query_one("#query", Input).focus()
            return
        self.history.pop()
        previous = self.history[-1]
        self.filters = previous.filters
        if previous.like is None:
            query = self.query_one("#query", Input)
            with query.prevent(Input.Changed):
                query.value = previous.query
        self._run(previous, focus_results=True)

    def action_filters(self) -> None:
        def apply(filters: SearchFilters | None) -> None:
            if filters is None or self.searcher is None or not self.history:
                if filters is not None:
                    self.filters = filters
                return
            self.filters = filters
            search = replace(self.history[-1], filters=filters)
            self.history.append(search)
            self._run(search, focus_results=True)

        self.push_screen(FilterScreen(self.filters), callback=apply)

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
