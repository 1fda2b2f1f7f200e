"""What the endpoints of ``askalike serve`` share: their query parameters (spelt as the CLI's
options: ``min-match``, ``date-format``) and the readers of what those parameters and paths name
(a whole number, a share, a stored question).

No ``from __future__ import annotations``: FastAPI reads these annotations."""

import json
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import Path as PathParam
from fastapi import Query
from starlette.exceptions import HTTPException

from askalike.core.dates import DateOrder
from askalike.core.numbers import ShareError, integer, share
from askalike.indexer.sources import normalize_id
from askalike.retrieval.fusion import SearchMode
from askalike.retrieval.judgement import SEARCH_MIN_MATCH

if TYPE_CHECKING:
    from askalike.indexer.store import StoredQuestion
    from askalike.retrieval.searcher import Searcher

SOURCE_HELP = "only this source (its name as hits show it, or its file name); repeatable"
CATEGORY_HELP = "only this category (any case); repeatable"
WHERE_HELP = ("only questions whose metadata column KEY is VALUE (KEY=VALUE, any case), as --where; "
              "repeatable")
SINCE_HELP = "only questions dated on or after this date"
UNTIL_HELP = "only questions dated on or before this date"
MODE_HELP = ("dense: by meaning (cosine); lexical: by words (BM25); hybrid: both fused (default: "
             "hybrid when the model's tuned hybrid weight says words help, else dense)")
K_HELP = "how many results, at most"
MIN_MATCH_HELP = ("leave out hits whose match is below this: 50% or 0.5 (a number without % is a "
                  "fraction: 1 is 100%)")
COLLAPSE_HELP = "fold near-duplicates into the better hit they duplicate"
DATE_FORMAT = "date-format"  # the parameter that says how to read 10/01/2024 (spelt as the CLI's)
DATE_FORMAT_HELP = "how to read a date written in numbers only, such as 10/01/2024"
SEARCH_DATE_FORMAT_HELP = DATE_FORMAT_HELP + " (default: as the index was built)"

Source = Annotated[list[str] | None, Query(description=SOURCE_HELP)]
Category = Annotated[list[str] | None, Query(description=CATEGORY_HELP)]
Where = Annotated[list[str] | None, Query(description=WHERE_HELP)]
Since = Annotated[str | None, Query(description=SINCE_HELP)]
Until = Annotated[str | None, Query(description=UNTIL_HELP)]
Mode = Annotated[SearchMode | None, Query(description=MODE_HELP)]
MinMatch = Annotated[str | None, Query(alias="min-match", description=MIN_MATCH_HELP)]
Collapse = Annotated[bool, Query(description=COLLAPSE_HELP)]
DateFormat = Annotated[DateOrder | None, Query(alias=DATE_FORMAT, description=SEARCH_DATE_FORMAT_HELP)]
WriteDateFormat = Annotated[DateOrder | None, Query(alias=DATE_FORMAT, description=DATE_FORMAT_HELP)]
# a question's id in the path: it may hold a "/" (`/questions/a%2Fb`), as an id in a file may
QuestionId = Annotated[str, PathParam(description="the question's id in your collection")]
IdSource = Annotated[str | None, Query(description="its source, by its name, where several sources "
                                                   "have the id")]


def whole_number(value: Any) -> Any:
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


def minimum_match(value: str | float | None, default: float = SEARCH_MIN_MATCH) -> float:
    """``min-match`` as ``--min-match`` reads it (``core.numbers.share``); a JSON number as the
    same number written out. 422 when it is not a share."""
    if value is None:
        return default
    text = value if isinstance(value, str) else f"{value:f}".rstrip("0").rstrip(".")
    try:
        return share(text, "min-match")
    except ShareError as err:
        raise HTTPException(422, str(err)) from None


def stored_question(searcher: "Searcher", external_id: str, source: str | None) -> "StoredQuestion":
    """The stored question a request names by its id (and ``source``, where several have it);
    404 when there is none, 409 when several sources hold the id (the message names them)."""
    from askalike.retrieval.searcher import AmbiguousIdError, SearchError

    try:
        return searcher.question(normalize_id(external_id), () if source is None else (source,),
                                 "?source=")
    except AmbiguousIdError as err:
        raise HTTPException(409, str(err)) from None
    except SearchError as err:
        raise HTTPException(404, str(err)) from None

