"""The endpoints of ``askalike serve``, thin over the library: searches (``retrieval.results``
builds the same JSON as ``search --json``), the questions (``indexer.upsert``), the state.
Sync endpoints: FastAPI runs each in its thread pool, so they run side by side. The two search
endpoints are async and answer in the event loop's own thread when the search can start at once
(``_answered``): handing a search to a thread cost more than the search itself.

No ``from __future__ import annotations`` here: FastAPI reads the annotations of endpoints
defined in ``install``, whose limits are its own local types."""

from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Body, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from app.server.security import public_message
from app.server.settings import Limits
from core.dates import DateOrder
from indexer.upsert import API_SOURCE
from retrieval.duplicates import NEAR_DUPLICATE_COSINE
from retrieval.fusion import SearchMode

if TYPE_CHECKING:
    from app.server.api import ServedIndex
    from indexer.store import StoredQuestion
    from retrieval.live import LiveSearcher
    from retrieval.searcher import Searcher, SearchFilters

_Answer = TypeVar("_Answer")

Source = Annotated[list[str] | None, Query(description="only this source (file name or path); repeatable")]
Category = Annotated[list[str] | None, Query(description="only this category (any case); repeatable")]
Since = Annotated[str | None, Query(description="only questions dated on or after this date")]
Until = Annotated[str | None, Query(description="only questions dated on or before this date")]
MinMatch = Annotated[float, Query(ge=0, le=1, alias="min-match",
                                  description="leave out hits whose match is below this fraction")]
Collapse = Annotated[bool, Query(description="fold near-duplicates into the better hit they duplicate")]
QUESTIONS_BODY = "a question object (id, subject or title, body, other keys kept as metadata) or an array"
WriteSource = Annotated[str, Query(description="the source the questions belong to")]


def _filters(source: list[str] | None, category: list[str] | None, since: str | None, until: str | None,
             date_format: DateOrder | None) -> "SearchFilters":
    from retrieval.searcher import SearchFilters

    return SearchFilters(tuple(source or ()), tuple(category or ()), since, until, date_format)


def _searched(searcher: "Searcher", queries: list[str], k: int, filters: "SearchFilters",
              mode: SearchMode | None, min_match: float, collapse: bool) -> list[dict[str, Any]]:
    """Each query's ``search --json`` object."""
    from retrieval.results import Shown, search_payload

    shown = Shown(k, min_match, collapse)
    mode_run = mode or searcher.default_mode
    return [search_payload(shown.of(searcher, results), mode_run, query=query)
            for query, results in zip(queries, searcher.search_many(queries, shown.depth, filters, mode),
                                      strict=True)]


async def _answered(live: "LiveSearcher", search: Callable[["Searcher"], _Answer]) -> _Answer:
    """``search`` on the current state: at once in the event loop's thread when it can start at
    once (a search of 100,000 questions takes about 2 ms of CPU; the requests of one process take
    turns at the interpreter either way), else in the thread pool, so that opening a new commit's
    files or waiting for a write never holds up the process's other requests."""
    def run() -> _Answer:
        with live.searching() as searcher:
            return search(searcher)
    return run() if live.ready_now() else await run_in_threadpool(run)


def _named(source: str | None) -> tuple[str, ...]:
    """A request's ``source`` as the sources ``Searcher.question`` looks in (none: all)."""
    return () if source is None else (source,)


def _question_json(question: "StoredQuestion") -> dict[str, Any]:
    return {"id": question.external_id, "source": question.source, "subject": question.subject,
            "body": question.body, "metadata": question.metadata}


def install(api: FastAPI, loaded: "ServedIndex", limits: Limits, reader: Any, writer: Any) -> None:
    """Add the endpoints to ``api``; ``reader`` and ``writer`` are the key checks of reads and
    writes (FastAPI dependencies)."""
    Text = Annotated[str, Query(min_length=1, max_length=limits.query_chars)]
    K = Annotated[int, Query(ge=1, le=limits.k, description="results")]

    class BatchSearch(BaseModel):
        # min_match or min-match; a misspelt key is refused, never ignored
        model_config = ConfigDict(populate_by_name=True, extra="forbid")

        queries: list[Annotated[str, Field(min_length=1, max_length=limits.query_chars)]] = Field(
            min_length=1, max_length=limits.batch)
        k: int = Field(10, ge=1, le=limits.k)
        mode: SearchMode | None = None
        source: list[str] = []
        category: list[str] = []
        since: str | None = None
        until: str | None = None
        date_format: DateOrder | None = None
        min_match: float = Field(0.0, ge=0, le=1, alias="min-match")
        collapse: bool = False

    @api.get("/health", tags=["state"])
    def health() -> dict[str, str]:
        """The process is alive (it may still be loading the index)."""
        return {"status": "alive"}

    @api.get("/ready", tags=["state"])
    def ready() -> JSONResponse:
        """200 once the model and the index are loaded (searches can be answered), else 503."""
        if loaded.live is None:
            return JSONResponse({"ready": False, "error": loaded.failure or "the index is still loading"},
                                status_code=503)
        with loaded.live.searching() as searcher:
            return JSONResponse({"ready": True, "questions": searcher.count})

    @api.get("/info", tags=["state"], dependencies=[reader])
    def info() -> dict[str, Any]:
        """What `askalike index-info --json` says (paths cut to their last part)."""
        from indexer.directory import index_info

        live = loaded.require()
        return _public(index_info(live.index_dir, loaded.settings.database))

    @api.get("/search", tags=["search"], dependencies=[reader])
    async def search(q: Text, k: K = 10, mode: SearchMode | None = None, source: Source = None,
               category: Category = None, since: Since = None, until: Until = None,
               date_format: DateOrder | None = None, min_match: MinMatch = 0.0,
               collapse: Collapse = False) -> dict[str, Any]:
        """The questions most alike ``q``: the object `askalike search --json` prints."""
        filters = _filters(source, category, since, until, date_format)
        return await _answered(loaded.require(), lambda searcher: _searched(
            searcher, [q], k, filters, mode, min_match, collapse)[0])

    @api.post("/search", tags=["search"], dependencies=[reader])
    async def search_many(request: BatchSearch) -> dict[str, Any]:
        """Several queries at once: ``{"searches": [...]}``, one `search --json` object each."""
        filters = _filters(request.source, request.category, request.since, request.until,
                           request.date_format)
        return await _answered(loaded.require(), lambda searcher: {"searches": _searched(
            searcher, request.queries, request.k, filters, request.mode, request.min_match,
            request.collapse)})

    @api.get("/duplicates", tags=["search"], dependencies=[reader])
    def duplicates(id: Annotated[str | None, Query(description="a stored question's id")] = None,
                   text: Annotated[str | None, Query(max_length=limits.query_chars)] = None,
                   source: Annotated[str | None, Query(description="the source of `id`")] = None,
                   k: K = 10, min_match: Annotated[float, Query(ge=0, le=1, alias="min-match")]
                   = NEAR_DUPLICATE_COSINE) -> dict[str, Any]:
        """The near-duplicates of one stored question (``id``) or of a text: the questions whose
        cosine to it reaches ``min-match`` (default: what `search` marks as a near-duplicate)."""
        from retrieval.results import Shown, search_payload
        from retrieval.searcher import SearchError

        if (id is None) == (text is None):
            raise HTTPException(422, "give either id or text")
        shown = Shown(k, min_match)
        with loaded.require().searching() as searcher:
            if text is not None:
                hits = searcher.search_many([text], k, None, SearchMode.dense)[0]
                return search_payload(shown.of(searcher, hits), SearchMode.dense, query=text)
            try:
                question = searcher.question(id, _named(source))
            except SearchError as err:
                raise HTTPException(404, str(err)) from None
            hits = searcher.more_like(question.id, k)
            return search_payload(shown.of(searcher, hits), SearchMode.dense, like=question)

    @api.get("/questions/{id}", tags=["questions"], dependencies=[reader])
    def get_question(id: Annotated[str, PathParam()],
                     source: Annotated[str | None, Query()] = None) -> dict[str, Any]:
        """One stored question by its id in your collection."""
        from retrieval.searcher import SearchError

        with loaded.require().searching() as searcher:
            try:
                return _question_json(searcher.question(id, _named(source)))
            except SearchError as err:
                raise HTTPException(404, str(err)) from None

    @api.post("/questions", tags=["questions"], dependencies=[writer])
    def post_questions(questions: Annotated[Any, Body(description="a question object (id, subject "
                                                                   "or title, body, metadata) or an "
                                                                   "array of them")],
                       source: WriteSource = API_SOURCE) -> dict[str, Any]:
        """Add questions, or replace those with the same id in ``source``: all or none of them."""
        records = questions if isinstance(questions, list) else [questions]
        return _write(loaded, limits, records, source)

    @api.put("/questions/{id}", tags=["questions"], dependencies=[writer])
    def put_question(id: Annotated[str, PathParam()],
                     question: Annotated[dict[str, Any], Body()], source: WriteSource = API_SOURCE
                     ) -> dict[str, Any]:
        """Add or replace the question ``id`` of ``source``."""
        if "id" in question and str(question["id"]).strip() != id.strip():
            raise HTTPException(422, f"the body's id {question['id']!r} is not the path's {id!r}")
        return _write(loaded, limits, [{**question, "id": id}], source)

    @api.delete("/questions/{id}", tags=["questions"], dependencies=[writer])
    def delete_question(id: Annotated[str, PathParam()],
                        source: Annotated[str | None, Query()] = None) -> dict[str, int]:
        """Remove one question (from ``source`` only, when several sources use the id)."""
        from indexer.upsert import delete_question
        from retrieval.searcher import SearchError

        live = loaded.require()
        with live.searching() as searcher:
            try:
                searcher.question(id, _named(source))
            except SearchError as err:
                raise HTTPException(404, str(err)) from None
        with loaded.write_lock:
            deleted = delete_question(live.index_dir, id, source, loaded.settings.database,
                                      limits.lock_wait_s)
            live.refresh(wait=True)
        return {"deleted": deleted}


def _write(loaded: "ServedIndex", limits: Limits, records: list[Any], source: str) -> dict[str, Any]:
    """Validate, embed and commit ``records`` (all or none), then serve the new state."""
    from indexer.upsert import upsert_questions, validated_questions

    if not records:
        raise HTTPException(422, "no questions given")
    if len(records) > limits.batch:
        raise HTTPException(413, f"{len(records)} questions: at most {limits.batch} a request")
    questions, warnings = validated_questions(records)
    live = loaded.require()
    with live.searching() as searcher:
        encoder, identity = searcher.encoder, searcher.index.manifest.encoder
    with loaded.write_lock:
        report = upsert_questions(live.index_dir, questions, encoder, identity, source,
                                  loaded.settings.database, limits.lock_wait_s,
                                  commit_guard=lambda changes_text: live.exclusive() if changes_text
                                  else nullcontext())
        live.refresh(wait=True)
    report.warnings = warnings
    return report.as_json()


def _public(value: Any) -> Any:
    """``value`` with every string (and key) as a client may see it (``public_message``)."""
    if isinstance(value, dict):
        return {public_message(str(key)): _public(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_public(item) for item in value]
    return public_message(value) if isinstance(value, str | Path) else value
