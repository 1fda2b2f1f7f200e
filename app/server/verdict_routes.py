"""``/verdicts``: a person's verdict on whether two stored questions are the same question, kept
in the index's database (``indexer.upsert.record_verdict``); a write, so it needs a key.

No ``from __future__ import annotations``: FastAPI reads the annotations of the endpoints."""

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr
from starlette.exceptions import HTTPException

from askalike.app.server.api import StrictJsonRoute
from askalike.app.server.models import StoredVerdict, errors
from askalike.app.server.parameters import stored_question
from askalike.app.server.settings import Limits

if TYPE_CHECKING:
    from askalike.app.server.api import ServedIndex
    from askalike.indexer.store import StoredQuestion
    from askalike.retrieval.searcher import Searcher


class VerdictQuestion(BaseModel):
    """A stored question of a verdict."""

    model_config = ConfigDict(extra="forbid")

    id: StrictStr = Field(min_length=1, description="the question's id in your collection")
    source: StrictStr | None = Field(None, description="its source, where several have the id")


class VerdictBody(BaseModel):
    """A person's verdict on two stored questions."""

    model_config = ConfigDict(extra="forbid")

    first: VerdictQuestion = Field(description="one stored question of the pair")
    second: VerdictQuestion = Field(description="the other")
    same: StrictBool = Field(description="true: the same question; false: different questions")


def _judged(searcher: "Searcher", which: str, judged: VerdictQuestion) -> "StoredQuestion":
    """The stored question a verdict names as ``which`` (first, second); 422 when there is none."""
    try:
        return stored_question(searcher, judged.id, judged.source)
    except HTTPException as err:
        raise HTTPException(422, f"{which}: {err.detail}") from None


def _record(loaded: "ServedIndex", limits: Limits, verdict: VerdictBody) -> dict[str, Any]:
    """Store ``verdict`` on the two stored questions it names."""
    from askalike.indexer.upsert import record_verdict

    live = loaded.require()
    with live.searching(latest=True) as searcher:
        first, second = (_judged(searcher, which, judged)
                         for which, judged in (("first", verdict.first), ("second", verdict.second)))
        labels = searcher.source_labels
    if first.id == second.id:
        raise HTTPException(422, "first and second are the same stored question: a verdict compares two")
    recorded = record_verdict(live.index_dir, first, second, verdict.same, loaded.settings.database,
                              limits.lock_wait_s)
    return recorded.as_json(lambda source: labels.get(source, source))


def router(loaded: "ServedIndex", limits: Limits, writer: Any) -> APIRouter:
    """The verdict endpoint; ``writer`` is the key check of writes (a FastAPI dependency)."""
    routes = APIRouter(route_class=StrictJsonRoute, tags=["questions"])

    @routes.post("/verdicts", dependencies=[writer], response_model=StoredVerdict,
                 summary="Record a verdict", responses=errors(400, 401, 403, 413, 422, 503))
    def post_verdict(verdict: VerdictBody) -> dict[str, Any]:
        """Record whether two stored questions are the same question (a person's verdict, as
        the search page's "same question" and "different" give it); the latest verdict on a pair
        counts. `askalike verdicts --out FILE` writes them as labelled pairs for `askalike tune`."""
        return _record(loaded, limits, verdict)

    return routes
