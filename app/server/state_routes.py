"""``/health``, ``/ready`` and ``/info``: the state of the process and of the index it serves.

No ``from __future__ import annotations``: FastAPI reads the annotations of the endpoints."""

from pathlib import Path
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from askalike.app.server.api import StrictJsonRoute
from askalike.app.server.models import Health, Ready, errors
from askalike.app.server.security import SafeJSONResponse, public_message

if TYPE_CHECKING:
    from askalike.app.server.api import ServedIndex


def _public(value: Any) -> Any:
    """``value`` with every string (and key) as a client may see it (``public_message``)."""
    if isinstance(value, dict):
        return {public_message(str(key)): _public(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_public(item) for item in value]
    return public_message(value) if isinstance(value, str | Path) else value


def router(loaded: "ServedIndex", reader: Any) -> APIRouter:
    """The state endpoints; ``reader`` is the key check of reads (a FastAPI dependency)."""
    routes = APIRouter(route_class=StrictJsonRoute, tags=["state"], responses=errors(400, 422))

    @routes.get("/health", response_model=Health, summary="Alive")
    def health() -> dict[str, str]:
        """The process is alive (it may still be loading the index)."""
        return {"status": "alive"}

    @routes.get("/ready", summary="Ready", responses={
        200: {"model": Ready}, 503: {"model": Ready, "description": "not ready yet"}})
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

    @routes.get("/info", dependencies=[reader], summary="The index", responses=errors(401, 503))
    def info() -> dict[str, Any]:
        """What `askalike index-info --json` says (paths cut to their last part, sources named as
        hits name them)."""
        from askalike.indexer.directory import index_info
        from askalike.indexer.source_identity import source_labels

        live = loaded.require()
        info = index_info(live.index_dir, loaded.settings.database)
        labels = source_labels(info["sources"])
        return _public({**info, "sources": {labels[name]: count for name, count in info["sources"].items()}})

    return routes
