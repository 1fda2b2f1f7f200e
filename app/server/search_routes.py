"""``/search`` and ``/duplicates``: the questions alike a query or a stored question, as the
object ``search --json`` prints (``retrieval.results``), each hit's source by its name.
The searches are async and answer in the event loop's own thread when the search can start at
once (``_answered``): handing a search to a thread cost more than the search itself.

No ``from __future__ import annotations``: FastAPI reads the annotations of the endpoints, whose
limits are types made in ``router``."""

from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import APIRouter, Query
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from askalike.app.server.api import StrictJsonRoute
from askalike.app.server.models import SearchAnswer, SearchAnswers, errors
from askalike.app.server.parameters import (
    CATEGORY_HELP,
    COLLAPSE_HELP,
    DATE_FORMAT,
    K_HELP,
    MIN_MATCH_HELP,
    MODE_HELP,
    SEARCH_DATE_FORMAT_HELP,
    SINCE_HELP,
    SOURCE_HELP,
    UNTIL_HELP,
    WHERE_HELP,
    Category,
    Collapse,
    DateFormat,
    MinMatch,
    Mode,
    Since,
    Source,
    Until,
    Where,
    minimum_match,
    stored_question,
    whole_number,
)
from askalike.app.server.security import unknown_parameters
from askalike.app.server.settings import Limits
from askalike.core.dates import DateOrder
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.judgement import SAME_QUESTION

if TYPE_CHECKING:
    from askalike.app.server.api import ServedIndex
    from askalike.retrieval.live import LiveSearcher
    from askalike.retrieval.searcher import Searcher, SearchFilters

_Answer = TypeVar("_Answer")


def _filters(searcher: "Searcher", source: list[str] | None, category: list[str] | None,
             since: str | None, until: str | None, date_format: DateOrder | None,
             where: list[str] | None) -> "SearchFilters":
    """The search's filters as the CLI's (``Searcher.filters``: dates read as the index's are)."""
    texts = [*(source or ()), *(category or ()), *(where or ()), since or "", until or ""]
    if any("\x00" in text for text in texts):
        raise HTTPException(400, "a filter holds a NUL character: send text")
    return searcher.filters(source or (), category or (), since, until, date_format, where or (),
                            DATE_FORMAT, "where")


def _searched(searcher: "Searcher", queries: list[str], k: int, filters: "SearchFilters",
              mode: SearchMode | None, lowest: float, collapse: bool) -> list[dict[str, Any]]:
    """Each query's ``search --json`` object, its sources named as a client sees them."""
    from askalike.retrieval.results import Shown
    from askalike.retrieval.searcher import SearchError

    try:
        answers = Shown(k, lowest, collapse).search(searcher, queries, filters, mode)
    except SearchError as err:
        raise HTTPException(400, str(err)) from None
    payloads = [answer.payload(searcher.source_label) for answer in answers]
    if filters and any(not payload["results"] for payload in payloads):
        why = searcher.why_nothing(filters)
        for payload in payloads:
            if not payload["results"]:
                payload["why"] = why
    return payloads


async def _answered(live: "LiveSearcher", search: Callable[["Searcher"], _Answer]) -> _Answer:
    """``search`` on the current state: at once in the event loop's thread when it can start at
    once (a search of 100,000 questions takes about 2 ms of CPU; the requests of one process take
    turns at the interpreter either way), else in the thread pool (while a write that changes
    stored text pauses the searches), so that waiting for it never holds up the process's other
    requests."""
    def run() -> _Answer:
        with live.searching() as searcher:
            return search(searcher)
    return run() if live.ready_now() else await run_in_threadpool(run)


def router(loaded: "ServedIndex", limits: Limits, reader: Any) -> APIRouter:
    """The search endpoints; ``reader`` is the key check of reads (a FastAPI dependency)."""
    Text = Annotated[str, Query(min_length=1, max_length=limits.query_chars, description="the query")]
    # BeforeValidator after Query: the other way round, /openapi.json spells the limits ge, le
    K = Annotated[int, Query(ge=1, le=limits.k, description=K_HELP), BeforeValidator(whole_number)]
    routes = APIRouter(route_class=StrictJsonRoute, tags=["search"], dependencies=[reader],
                       responses=errors(400, 401, 422, 503))

    class BatchSearch(BaseModel):
        """Several searches: the keys are GET /search's parameters, ``queries`` in place of ``q``."""

        # spelt as the CLI's options (min-match); a misspelt key is refused, never ignored
        model_config = ConfigDict(extra="forbid")

        queries: list[Annotated[str, Field(min_length=1, max_length=limits.query_chars)]] = Field(
            min_length=1, max_length=limits.batch, description="the queries, each read as `q` is")
        k: Annotated[int, BeforeValidator(whole_number)] = Field(10, ge=1, le=limits.k, description=K_HELP)
        mode: SearchMode | None = Field(None, description=MODE_HELP)
        source: list[str] = Field([], description=SOURCE_HELP)
        category: list[str] = Field([], description=CATEGORY_HELP)
        where: list[str] = Field([], description=WHERE_HELP)
        since: str | None = Field(None, description=SINCE_HELP)
        until: str | None = Field(None, description=UNTIL_HELP)
        date_format: DateOrder | None = Field(None, alias=DATE_FORMAT, description=SEARCH_DATE_FORMAT_HELP)
        min_match: StrictStr | StrictFloat | StrictInt | None = Field(None, alias="min-match",
                                                                     description=MIN_MATCH_HELP)
        collapse: StrictBool = Field(False, description=COLLAPSE_HELP)

        @model_validator(mode="before")
        @classmethod
        def _one_spelling(cls, data: Any) -> Any:
            """The keys are spelt as the query parameters (and the CLI's options): ``min-match``;
            ``min_match`` or any other key is refused naming the keys there are, as GET does,
            not read nor ignored."""
            if isinstance(data, dict):
                known = [field.alias or name for name, field in cls.model_fields.items()]
                if unknown := [key for key in data if key not in known]:
                    raise ValueError(unknown_parameters(unknown, known))
            return data

    @routes.get("/search", response_model=SearchAnswer, response_model_exclude_unset=True,
                 summary="Search")
    async def search(q: Text, k: K = 10, mode: Mode = None, source: Source = None,
                     category: Category = None, where: Where = None, since: Since = None,
                     until: Until = None, date_format: DateFormat = None,
                     min_match: MinMatch = None, collapse: Collapse = False) -> dict[str, Any]:
        """The questions most alike ``q``: the object `askalike search --json` prints (each
        hit's source by its name, not its path on the server); ``why`` says why a filtered search
        found nothing."""
        lowest = minimum_match(min_match)
        return await _answered(loaded.require(), lambda searcher: _searched(
            searcher, [q], k, _filters(searcher, source, category, since, until, date_format, where),
            mode, lowest, collapse)[0])

    @routes.post("/search", response_model=SearchAnswers, response_model_exclude_unset=True,
                  summary="Search with several queries", responses=errors(413))
    async def search_many(request: BatchSearch) -> dict[str, Any]:
        """Several queries at once: ``{"searches": [...]}``, one `search --json` object each."""
        lowest = minimum_match(request.min_match)
        return await _answered(loaded.require(), lambda searcher: {"searches": _searched(
            searcher, request.queries, request.k,
            _filters(searcher, request.source, request.category, request.since, request.until,
                     request.date_format, request.where),
            request.mode, lowest, request.collapse)})

    @routes.get("/duplicates", response_model=SearchAnswer, response_model_exclude_unset=True,
                 summary="Near-duplicates", responses=errors(404, 409))
    def duplicates(id: Annotated[str | None, Query(description="a stored question's id (or text)")] = None,
                   text: Annotated[str | None, Query(max_length=limits.query_chars,
                                                     description="a text (or id)")] = None,
                   source: Annotated[str | None, Query(description="the source of `id`")] = None,
                   k: K = 10, min_match: MinMatch = None) -> dict[str, Any]:
        """The near-duplicates of one stored question (``id``) or of a text: the questions whose
        match to it (how likely they ask the same question) reaches ``min-match`` (default: 50%,
        what ``duplicates`` and ``--collapse`` call the same question)."""
        from askalike.retrieval.results import Shown

        if (id is None) == (text is None):
            raise HTTPException(422, "give either id or text")
        shown = Shown(k, minimum_match(min_match, SAME_QUESTION))
        with loaded.require().searching(latest=id is not None) as searcher:
            answer = (shown.search(searcher, [text], mode=SearchMode.dense)[0] if text is not None
                      else shown.like(searcher, stored_question(searcher, id, source)))
            return answer.payload(searcher.source_label)

    return routes
