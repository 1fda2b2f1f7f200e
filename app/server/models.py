"""The JSON answers of ``askalike serve`` as pydantic models, so that ``/openapi.json`` documents
them: the shapes docs/cli.md gives as JSON Schemas ("search --json line", "search hit", "serve
question", "serve write report", "serve verdict"). The endpoints build plain dicts (the library's
``as_json``); these models only check and describe them.

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
    match: float = Field(description="how likely it asks the same question as the hit it is folded into")


class SearchHit(Answer):
    """One hit of a search ("search hit" in docs/cli.md)."""

    rank: int = Field(ge=1)
    id: str = Field(description="the question's id in your collection")
    source: str = Field(description="the source it was indexed from, by its name")
    subject: str
    excerpt: str = Field(description="the body, whitespace collapsed, at most 240 characters")
    match: float = Field(description="how likely the hit asks the same question as the query")
    cosine: float
    score: float = Field(description="what the results are ordered by: the cosine, the BM25 score "
                                     "or the fused score")
    duplicate_of: int | None = Field(description="rank of the better hit this one nearly duplicates")
    alike: list[AlikeHit] = Field(description="collapse: the near-duplicates folded into this hit")
    metadata: dict[str, Any] = Field(description="the source's other columns; comments left out")


class SearchAnswer(Answer):
    """One search ("search --json line" in docs/cli.md): ``query``, or ``like`` for a search
    that started from a stored question."""

    query: str | None = Field(None, description="the query (absent for a search from a question)")
    like: Named | None = Field(None, description="the question the search started from")
    mode: SearchMode = Field(description="the search mode that ran")
    count: int = Field(ge=0, description="how many results follow")
    results: list[SearchHit] = Field(description="the hits shown, best first")
    why: str | None = Field(None, description="only when filters let no hit through: what the index "
                                              "holds of what they ask for")


class SearchAnswers(Answer):
    searches: list[SearchAnswer] = Field(description="one search answer per query, in their order")


class Question(Answer):
    """A stored question ("serve question" in docs/cli.md)."""

    id: str = Field(description="the question's id in your collection")
    source: str = Field(description="its source, by its name (api for questions written through the API)")
    subject: str
    body: str
    metadata: dict[str, Any] = Field(description="its other keys (category, date, ...)")


class WriteReport(Answer):
    """What a write changed ("serve write report" in docs/cli.md)."""

    added: int = Field(description="new questions, embedded")
    reembedded: int = Field(description="stored questions whose text changed, embedded again")
    metadata_updated: int = Field(description="stored questions whose metadata alone changed")
    unchanged: int
    total: int = Field(description="questions in the index afterwards")
    ids: list[str] = Field(description="the request's ids, in its order")
    warnings: list[str] = Field(description="dates that are not dates: those questions are stored undated")


class Deleted(Answer):
    deleted: int = Field(description="how many questions were removed")


class StoredVerdict(Answer):
    """A verdict as stored ("serve verdict" in docs/cli.md)."""

    first: Named
    second: Named
    same: bool = Field(description="true: the same question; false: different questions")
    recorded_at: str = Field(description="ISO 8601 in UTC")


class Health(Answer):
    status: str = Field(description="alive")
