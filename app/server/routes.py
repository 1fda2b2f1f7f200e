"""The endpoints of ``askalike serve``, thin over the library: searches (``retrieval.results``
builds the same JSON as ``search --json``), the questions and the verdicts on pairs of them
(``indexer.upsert``), the state.
Sync endpoints: FastAPI runs each in its thread pool, so they run side by side. The two search
endpoints are async and answer in the event loop's own thread when the search can start at once
(``_answered``): handing a search to a thread cost more than the search itself.

No ``from __future__ import annotations`` here: FastAPI reads the annotations of endpoints
defined in ``install``, whose limits are its own local types."""

import json
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Body, FastAPI, Query
from fastapi import Path as PathParam
from fastapi.responses import JSONResponse
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

from app.server.security import SafeJSONResponse, public_message, unknown_parameters
from app.server.settings import Limits
from core.dates import DateOrder
from core.numbers import ShareError, integer, share
from indexer.sources import normalize_id
from indexer.upsert import API_SOURCE
from retrieval.fusion import SearchMode
from retrieval.judgement import SAME_QUESTION, SEARCH_MIN_MATCH

if TYPE_CHECKING:
    from app.server.api import ServedIndex
    from indexer.store import StoredQuestion
    from retrieval.live import LiveSearcher
    from retrieval.searcher import Searcher, SearchFilters

_Answer = TypeVar("_Answer")

Source = Annotated[list[str] | None, Query(description="only this source (its name as hits show it, "
                                                       "or its file name); repeatable")]
Category = Annotated[list[str] | None, Query(description="only this category (any case); repeatable")]
Where = Annotated[list[str] | None, Query(description="only questions whose metadata column KEY is "
                                                      "VALUE (KEY=VALUE, any case), as --where; "
                                                      "repeatable")]
Since = Annotated[str | None, Query(description="only questions dated on or after this date")]
Until = Annotated[str | None, Query(description="only questions dated on or before this date")]
MIN_MATCH_HELP = ("leave out hits whose match is below this: 50% or 0.5 (a number without % is a "
                  "fraction: 1 is 100%)")
MinMatch = Annotated[str | None, Query(alias="min-match", description=MIN_MATCH_HELP)]
Collapse = Annotated[bool, Query(description="fold near-duplicates into the better hit they duplicate")]
QUESTIONS_BODY = "a question object (id, subject or title, body, other keys kept as metadata) or an array"
WriteSource = Annotated[str, Query(description="the source the questions belong to")]
DATE_FORMAT = "date-format"  # the parameter that says how to read 10/01/2024 (spelt as the CLI's)
DATE_FORMAT_HELP = "how to read a date written in numbers only, such as 10/01/2024"
DateFormat = Annotated[DateOrder | None, Query(alias=DATE_FORMAT, description=DATE_FORMAT_HELP
                                               + " (default: as the index was built)")]
WriteDateFormat = Annotated[DateOrder | None, Query(alias=DATE_FORMAT, description=DATE_FORMAT_HELP)]
# a question's id in the path: it may hold a "/" (`/questions/a%2Fb`), as an id in a file may
QuestionId = Annotated[str, PathParam(description="the question's id in your collection")]


def _whole_number(value: Any) -> Any:
    """A count given as a parameter, read as ``core.numbers.integer`` reads it (``k=1_0``,
    ``k=true`` and ``k=5.0`` are refused, not read as 10, 1 and 5)."""
    if isinstance(value, str):
        number = integer(value)
        if number is None:
            raise ValueError(f"{value!r} is not a whole number written in decimal digits")
        return number
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{json.dumps(value)} is not a whole number")
    return value


def _min_match(value: str | float | None, default: float = SEARCH_MIN_MATCH) -> float:
    """``min-match`` as ``--min-match`` reads it (``core.numbers.share``); a JSON number as the
    same number written out. 422 when it is not a share."""
    if value is None:
        return default
    text = value if isinstance(value, str) else f"{value:f}".rstrip("0").rstrip(".")
    try:
        return share(text, "min-match")
    except ShareError as err:
        raise HTTPException(422, str(err)) from None


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
              mode: SearchMode | None, min_match: float, collapse: bool) -> list[dict[str, Any]]:
    """Each query's ``search --json`` object, its sources named as a client sees them."""
    from retrieval.results import Shown
    from retrieval.searcher import SearchError

    try:
        answers = Shown(k, min_match, collapse).search(searcher, queries, filters, mode)
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
    turns at the interpreter either way), else in the thread pool, so that opening a new commit's
    files or waiting for a write never holds up the process's other requests."""
    def run() -> _Answer:
        with live.searching() as searcher:
            return search(searcher)
    return run() if live.ready_now() else await run_in_threadpool(run)


def _question(searcher: "Searcher", external_id: str, source: str | None) -> "StoredQuestion":
    """The stored question a request names by its id (and ``source``, where several have it);
    404 when there is none or the id is in several sources."""
    from retrieval.searcher import SearchError

    try:
        return searcher.question(normalize_id(external_id), () if source is None else (source,),
                                 "?source=")
    except SearchError as err:
        raise HTTPException(404, str(err)) from None


def _judged(searcher: "Searcher", which: str, id: str, source: str | None) -> "StoredQuestion":
    """The stored question a verdict names as ``which`` (first, second); 422 when there is none."""
    try:
        return _question(searcher, id, source)
    except HTTPException as err:
        raise HTTPException(422, f"{which}: {err.detail}") from None


def _question_json(question: "StoredQuestion", searcher: "Searcher") -> dict[str, Any]:
    return {"id": question.external_id, "source": searcher.source_label(question.source),
            "subject": question.subject, "body": question.body, "metadata": question.metadata}


def install(api: FastAPI, loaded: "ServedIndex", limits: Limits, reader: Any, writer: Any) -> None:
    """Add the endpoints to ``api``; ``reader`` and ``writer`` are the key checks of reads and
    writes (FastAPI dependencies)."""
    Text = Annotated[str, Query(min_length=1, max_length=limits.query_chars)]
    K = Annotated[int, BeforeValidator(_whole_number), Query(ge=1, le=limits.k, description="results")]

    class BatchSearch(BaseModel):
        # spelt as the CLI's options (min-match); a misspelt key is refused, never ignored
        model_config = ConfigDict(extra="forbid")

        queries: list[Annotated[str, Field(min_length=1, max_length=limits.query_chars)]] = Field(
            min_length=1, max_length=limits.batch)
        k: Annotated[int, BeforeValidator(_whole_number)] = Field(10, ge=1, le=limits.k)
        mode: SearchMode | None = None
        source: list[str] = []
        category: list[str] = []
        where: list[str] = []
        since: str | None = None
        until: str | None = None
        date_format: DateOrder | None = Field(None, alias=DATE_FORMAT)
        min_match: StrictStr | StrictFloat | StrictInt | None = Field(None, alias="min-match",
                                                                     description=MIN_MATCH_HELP)
        collapse: StrictBool = False

        @model_validator(mode="before")
        @classmethod
        def _one_spelling(cls, data: Any) -> Any:
            """The keys are spelt as the query parameters (and the CLI's options): ``min-match``;
            ``min_match`` is refused with that spelling, not read nor ignored."""
            if isinstance(data, dict):
                for key in data:
                    if key in ("min_match", "date_format"):
                        raise ValueError(unknown_parameters([key], ["min-match", DATE_FORMAT]))
            return data

    class VerdictQuestion(BaseModel):
        model_config = ConfigDict(extra="forbid")

        id: StrictStr = Field(min_length=1, description="the question's id in your collection")
        source: StrictStr | None = Field(None, description="its source, where several have the id")

    class VerdictBody(BaseModel):
        model_config = ConfigDict(extra="forbid")

        first: VerdictQuestion
        second: VerdictQuestion
        same: StrictBool = Field(description="true: the same question; false: different questions")

    @api.get("/health", tags=["state"])
    def health() -> dict[str, str]:
        """The process is alive (it may still be loading the index)."""
        return {"status": "alive"}

    @api.get("/ready", tags=["state"])
    def ready() -> JSONResponse:
        """200 once the model and the index are loaded (searches can be answered), else 503; the
        count of questions too, unless reads need a key (this answers without one)."""
        if loaded.live is None:
            return SafeJSONResponse({"ready": False, "error": loaded.failure or "the index is still loading"},
                                    status_code=503)
        if loaded.settings.read_needs_key:
            return SafeJSONResponse({"ready": True})
        with loaded.live.searching() as searcher:
            return SafeJSONResponse({"ready": True, "questions": searcher.count})

    @api.get("/info", tags=["state"], dependencies=[reader])
    def info() -> dict[str, Any]:
        """What `askalike index-info --json` says (paths cut to their last part, sources named as
        hits name them)."""
        from indexer.directory import index_info
        from indexer.source_identity import source_labels

        live = loaded.require()
        info = index_info(live.index_dir, loaded.settings.database)
        labels = source_labels(info["sources"])
        return _public({**info, "sources": {labels[name]: count for name, count in info["sources"].items()}})

    @api.get("/search", tags=["search"], dependencies=[reader])
    async def search(q: Text, k: K = 10, mode: SearchMode | None = None, source: Source = None,
               category: Category = None, where: Where = None, since: Since = None, until: Until = None,
               date_format: DateFormat = None, min_match: MinMatch = None,
               collapse: Collapse = False) -> dict[str, Any]:
        """The questions most alike ``q``: the object `askalike search --json` prints (each
        hit's source by its name, not its path on the server); ``why`` says why a filtered search
        found nothing."""
        lowest = _min_match(min_match)
        return await _answered(loaded.require(), lambda searcher: _searched(
            searcher, [q], k, _filters(searcher, source, category, since, until, date_format, where),
            mode, lowest, collapse)[0])

    @api.post("/search", tags=["search"], dependencies=[reader])
    async def search_many(request: BatchSearch) -> dict[str, Any]:
        """Several queries at once: ``{"searches": [...]}``, one `search --json` object each."""
        lowest = _min_match(request.min_match)
        return await _answered(loaded.require(), lambda searcher: {"searches": _searched(
            searcher, request.queries, request.k,
            _filters(searcher, request.source, request.category, request.since, request.until,
                     request.date_format, request.where),
            request.mode, lowest, request.collapse)})

    @api.get("/duplicates", tags=["search"], dependencies=[reader])
    def duplicates(id: Annotated[str | None, Query(description="a stored question's id")] = None,
                   text: Annotated[str | None, Query(max_length=limits.query_chars)] = None,
                   source: Annotated[str | None, Query(description="the source of `id`")] = None,
                   k: K = 10, min_match: MinMatch = None) -> dict[str, Any]:
        """The near-duplicates of one stored question (``id``) or of a text: the questions whose
        match to it (how likely they ask the same question) reaches ``min-match`` (default: 50%,
        what ``duplicates`` and ``--collapse`` call the same question)."""
        from retrieval.results import Shown

        if (id is None) == (text is None):
            raise HTTPException(422, "give either id or text")
        shown = Shown(k, _min_match(min_match, SAME_QUESTION))
        with loaded.require().searching() as searcher:
            answer = (shown.search(searcher, [text], mode=SearchMode.dense)[0] if text is not None
                      else shown.like(searcher, _question(searcher, id, source)))
            return answer.payload(searcher.source_label)

    @api.get("/questions/{id:path}", tags=["questions"], dependencies=[reader])
    def get_question(id: QuestionId, source: Annotated[str | None, Query()] = None) -> dict[str, Any]:
        """One stored question by its id in your collection."""

        with loaded.require().searching() as searcher:
            return _question_json(_question(searcher, id, source), searcher)

    @api.post("/questions", tags=["questions"], dependencies=[writer])
    def post_questions(questions: Annotated[Any, Body(description="a question object (id, subject "
                                                                   "or title, body, metadata) or an "
                                                                   "array of them")],
                       source: WriteSource = API_SOURCE,
                       date_format: WriteDateFormat = None) -> dict[str, Any]:
        """Add questions, or replace those with the same id in ``source``: all or none of them,
        each validated as `askalike index` validates a row of a JSON Lines file."""
        records = questions if isinstance(questions, list) else [questions]
        return _write(loaded, limits, records, source, date_format)

    @api.put("/questions/{id:path}", tags=["questions"], dependencies=[writer])
    def put_question(id: QuestionId, question: Annotated[dict[str, Any], Body()],
                     source: WriteSource = API_SOURCE, date_format: WriteDateFormat = None
                     ) -> dict[str, Any]:
        """Add or replace the question ``id`` of ``source``."""
        if "id" in question and normalize_id(question["id"]) != normalize_id(id):
            raise HTTPException(422, f"the body's id {question['id']!r} is not the path's {id!r}")
        return _write(loaded, limits, [{**question, "id": id}], source, date_format)

    @api.post("/verdicts", tags=["questions"], dependencies=[writer])
    def post_verdict(verdict: VerdictBody) -> dict[str, Any]:
        """Record whether two stored questions are the same question (a person's verdict, as
        the search page's "same question" and "different" give it); the latest verdict on a pair
        counts. `askalike verdicts --out FILE` writes them as labelled pairs for `askalike tune`."""
        return _record(loaded, limits, verdict)

    @api.delete("/questions/{id:path}", tags=["questions"], dependencies=[writer])
    def delete_question(id: QuestionId, source: Annotated[str | None, Query()] = None) -> dict[str, int]:
        """Remove one question (from ``source`` only, when several sources use the id)."""
        from indexer.upsert import delete_question

        live = loaded.require()
        with live.searching() as searcher:
            external_id = _question(searcher, id, source).external_id
        with loaded.write_lock:
            deleted = delete_question(live.index_dir, external_id, source, loaded.settings.database,
                                      limits.lock_wait_s)
            live.refresh(wait=True)
        return {"deleted": deleted}


def _record(loaded: "ServedIndex", limits: Limits, verdict: Any) -> dict[str, Any]:
    """Store ``verdict`` (a ``VerdictBody``) on the two stored questions it names."""
    from indexer.upsert import record_verdict

    live = loaded.require()
    with live.searching() as searcher:
        first, second = (_judged(searcher, which, judged.id, judged.source)
                         for which, judged in (("first", verdict.first), ("second", verdict.second)))
        labels = searcher.source_labels
    if first.id == second.id:
        raise HTTPException(422, "first and second are the same stored question: a verdict compares two")
    recorded = record_verdict(live.index_dir, first, second, verdict.same, loaded.settings.database,
                              limits.lock_wait_s)
    return recorded.as_json(lambda source: labels.get(source, source))


def _write(loaded: "ServedIndex", limits: Limits, records: list[Any], source: str,
           date_format: DateOrder | None) -> dict[str, Any]:
    """Validate, embed and commit ``records`` (all or none), then serve the new state."""
    from indexer.upsert import upsert_questions, validated_questions

    if not records:
        raise HTTPException(422, "no questions given")
    if len(records) > limits.batch:
        raise HTTPException(413, f"{len(records)} questions: at most {limits.batch} a request")
    questions, warnings = validated_questions(records, date_format, DATE_FORMAT)
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
