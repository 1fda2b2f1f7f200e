"""``/questions``: one stored question read, and questions added, replaced or removed through the
index run's path and lock (``indexer.upsert``); writes need a key.

No ``from __future__ import annotations``: FastAPI reads the annotations of the endpoints."""

from dataclasses import replace
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Body, Query
from starlette.exceptions import HTTPException

from askalike.app.server.api import StrictJsonRoute
from askalike.app.server.models import Deleted, Question, WriteReport, errors
from askalike.app.server.parameters import DATE_FORMAT, IdSource, QuestionId, WriteDateFormat, stored_question
from askalike.app.server.settings import Limits
from askalike.core.dates import DateOrder
from askalike.indexer.sources import normalize_id
from askalike.indexer.upsert import API_SOURCE

if TYPE_CHECKING:
    from askalike.app.server.api import ServedIndex

WriteSource = Annotated[str, Query(description="the source the questions belong to")]


def _write(loaded: "ServedIndex", limits: Limits, records: list[Any], source: str,
           date_format: DateOrder | None) -> dict[str, Any]:
    """Validate, embed and commit ``records`` (all or none), then serve the new state."""
    from askalike.indexer.store import IndexReading
    from askalike.indexer.upsert import upsert_questions, validated_questions

    if not records:
        raise HTTPException(422, "no questions given")
    if len(records) > limits.batch:
        raise HTTPException(413, f"{len(records)} questions: at most {limits.batch} a request")
    live = loaded.require()
    with live.searching(latest=True) as searcher:
        encoder, identity = searcher.encoder, searcher.index.manifest.encoder
        reading = IndexReading.of(searcher.index.store)
    if date_format is not None:
        reading = replace(reading, date_order=date_format)
    questions, warnings = validated_questions(records, reading, DATE_FORMAT)
    with loaded.write_lock:
        report = upsert_questions(live.index_dir, questions, encoder, identity, source,
                                  loaded.settings.database, limits.lock_wait_s,
                                  commit_guard=lambda changes_text: live.committing(exclusive=changes_text),
                                  unwaited=loaded.below_searches)
    report.warnings = warnings + report.warnings
    return report.as_json()


def router(loaded: "ServedIndex", limits: Limits, reader: Any, writer: Any) -> APIRouter:
    """The question endpoints; ``reader`` and ``writer`` are the key checks of reads and writes
    (FastAPI dependencies)."""
    routes = APIRouter(route_class=StrictJsonRoute, tags=["questions"],
                       responses=errors(400, 401, 422, 503))
    written = errors(403, 413)  # what a write may be answered besides

    @routes.get("/questions/{id:path}", dependencies=[reader], response_model=Question,
                summary="A question", responses=errors(404, 409))
    def get_question(id: QuestionId, source: IdSource = None) -> dict[str, Any]:
        """One stored question by its id in your collection."""
        with loaded.require().searching(latest=True) as searcher:
            question = stored_question(searcher, id, source)
            return {"id": question.external_id, "source": searcher.source_label(question.source),
                    "subject": question.subject, "body": question.body, "metadata": question.metadata}

    @routes.post("/questions", dependencies=[writer], response_model=WriteReport,
                 summary="Add or replace questions", responses=written)
    def post_questions(questions: Annotated[Any, Body(description="a question object (id, subject "
                                                                   "or title, body, metadata) or an "
                                                                   "array of them")],
                       source: WriteSource = API_SOURCE,
                       date_format: WriteDateFormat = None) -> dict[str, Any]:
        """Add questions, or replace those with the same id in ``source``: all or none of them,
        each validated as `askalike index` validates a row of a JSON Lines file."""
        records = questions if isinstance(questions, list) else [questions]
        return _write(loaded, limits, records, source, date_format)

    @routes.put("/questions/{id:path}", dependencies=[writer], response_model=WriteReport,
                summary="Add or replace a question", responses=written)
    def put_question(id: QuestionId,
                     question: Annotated[dict[str, Any], Body(description="a question object (subject "
                                                                          "or title, body, metadata); an "
                                                                          "id in it must be the path's")],
                     source: WriteSource = API_SOURCE, date_format: WriteDateFormat = None
                     ) -> dict[str, Any]:
        """Add or replace the question ``id`` of ``source``."""
        if "id" in question and normalize_id(question["id"]) != normalize_id(id):
            raise HTTPException(422, f"the body's id {question['id']!r} is not the path's {id!r}")
        return _write(loaded, limits, [{**question, "id": id}], source, date_format)

    @routes.delete("/questions/{id:path}", dependencies=[writer], response_model=Deleted,
                   summary="Remove a question", responses=errors(403, 404, 409))
    def delete_question(id: QuestionId, source: IdSource = None) -> dict[str, int]:
        """Remove one question (from ``source`` only, when several sources use the id)."""
        from askalike.indexer.upsert import delete_question

        live = loaded.require()
        with live.searching(latest=True) as searcher:
            external_id = stored_question(searcher, id, source).external_id

        def delete() -> int:  # all commit, once it holds the index lock
            return delete_question(live.index_dir, external_id, source, loaded.settings.database,
                                   limits.lock_wait_s, commit_guard=live.committing)

        with loaded.write_lock:
            return {"deleted": loaded.below_searches(delete)}

    return routes
