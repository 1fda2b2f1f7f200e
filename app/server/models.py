"""The JSON answers of ``askalike serve`` as pydantic models, so that ``/openapi.json`` documents
them, and so docs/api.md, which ``app/server/reference.py`` generates from it: their fields'
descriptions are the reference's. A search answer and its hits are also what ``search --json``
prints ("search --json line" and "search hit" in docs/cli.md; a test compares the fields). The
endpoints build plain dicts (the library's ``as_json``); these models only check and describe them.

A search answer has ``query`` or ``like`` and ``why`` only where they apply: its endpoints answer
with ``response_model_exclude_unset``, so that a key the dict leaves out stays out (and a hit's
``duplicate_of`` stays ``null``)."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from askalike.retrieval.fusion import SearchMode


class Answer(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Named(Answer):
    """A stored question by its id and its source's name."""

    id: str = Field(description="the question's id in your collection")
    source: str = Field(description="its source, by its name")


class AlikeHit(Named):
    """A near-duplicate folded into a hit (``collapse``)."""

    match: float = Field(description="how likely it asks the same question as the hit it is folded into")


class SearchHit(Answer):
    """One hit of a search."""

    rank: int = Field(ge=1, description="its place in the results, from 1")
    id: str = Field(description="the question's id in your collection")
    source: str = Field(description="the source it was indexed from, by its name")
    subject: str = Field(description="the question's subject (its title)")
    excerpt: str = Field(description="the body, whitespace collapsed, at most 240 characters")
    match: float = Field(description="how likely the hit asks the same question as the query (0 to 1)")
    cosine: float = Field(description="the cosine of the query's and the hit's vectors")
    score: float = Field(description="what the results are ordered by: the cosine (dense), the BM25 "
                                     "score (lexical) or the fused score (hybrid)")
    duplicate_of: int | None = Field(description="rank of the better hit this one nearly duplicates")
    alike: list[AlikeHit] = Field(description="collapse: the near-duplicates folded into this hit")
    metadata: dict[str, Any] = Field(description="the source's other columns (category, date, ...); "
                                                 "comments left out")


class SearchAnswer(Answer):
    """One search, as `askalike search --json` prints it: ``query``, or ``like`` for a search
    that started from a stored question."""

    query: str | None = Field(None, description="the query (absent for a search from a question)")
    like: Named | None = Field(None, description="the question the search started from")
    mode: SearchMode = Field(description="the search mode that ran")
    count: int = Field(ge=0, description="how many results follow")
    results: list[SearchHit] = Field(description="the hits shown, best first")
    why: str | None = Field(None, description="only when filters let no hit through: what the index "
                                              "holds of what they ask for")


class SearchAnswers(Answer):
    """The answers of several searches at once."""

    searches: list[SearchAnswer] = Field(description="one search answer per query, in their order")


class Question(Answer):
    """A stored question."""

    id: str = Field(description="the question's id in your collection")
    source: str = Field(description="the source it was indexed from, by its name (api for questions "
                                    "written through the API)")
    subject: str = Field(description="its subject (its title)")
    body: str = Field(description="the whole body")
    metadata: dict[str, Any] = Field(description="its other keys (category, date, ...)")


class WriteReport(Answer):
    """What a write changed."""

    added: int = Field(description="new questions, embedded")
    reembedded: int = Field(description="stored questions whose text changed, embedded again")
    metadata_updated: int = Field(description="stored questions whose metadata alone changed")
    unchanged: int = Field(description="stored questions sent again as they are")
    total: int = Field(description="questions in the index afterwards")
    ids: list[str] = Field(description="the request's ids, in its order")
    warnings: list[str] = Field(description="dates that are not dates (`questions:N: date ...`): those "
                                            "questions are stored without a date, as `index` stores them")


class Deleted(Answer):
    """What a delete removed."""

    deleted: int = Field(description="how many questions were removed")


class StoredVerdict(Answer):
    """A verdict as stored."""

    first: Named = Field(description="one question of the pair, its source by its name")
    second: Named = Field(description="the other")
    same: bool = Field(description="true: the same question; false: different questions")
    recorded_at: str = Field(description="when, ISO 8601 in UTC")


class Health(Answer):
    """The process is alive."""

    status: str = Field(description="always `alive`")


class Ready(Answer):
    """Whether searches can be answered."""

    ready: bool = Field(description="true once the model and the index are loaded")
    questions: int | None = Field(None, description="how many questions the index holds (absent while "
                                                    "not ready, and where reads need a key)")
    error: str | None = Field(None, description="only while not ready: why (still loading, or what "
                                                "kept the index from loading)")


class Error(Answer):
    """Every error's answer."""

    error: str = Field(description="one line: what was wrong (`questions:2: missing or empty 'id'` "
                                   "names the request's second question); no traceback, file path "
                                   "or credential")


_ERRORS = {
    400: "bad input: a path or parameter that is not UTF-8 or holds a NUL, a body that is not JSON "
         "as a JSON Lines row is read (a key written twice included) or is sent with a Content-Type "
         "other than JSON (application/json, application/*+json), a question `index` would refuse",
    401: "no API key, or not one of the server's",
    403: "writes are disabled: the server has no API key",
    404: "no stored question has the id (in the source that `source` names, where it names one)",
    409: "several sources hold the id: `source` must name one (the message names them)",
    413: "the body, or its number of questions, is over the server's limits",
    422: "a parameter or key out of its range or of the wrong type, or one the endpoint does not take "
         "(named, never ignored)",
    503: "the index is still loading (or could not be loaded), or an index run holds the writer lock "
         "(with Retry-After)",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The error answers an endpoint may give (FastAPI's ``responses=``), each an ``Error``."""
    return {status: {"model": Error, "description": _ERRORS[status]} for status in statuses}
