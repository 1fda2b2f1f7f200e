"""The HTTP application of ``askalike serve`` (FastAPI; OpenAPI docs at ``/docs``): searches
answered from one committed state of the index (``retrieval.live``), questions written through
the index run's path and lock (``indexer.upsert``), the search page at ``/``.

Every error is JSON, ``{"error": "one line"}``, with a 4xx status (503 while the index is not
loaded or an index run holds the writer lock); never a traceback, a file path or a credential.
(No ``from __future__ import annotations``: FastAPI reads the key check's annotations, which
name a local dependency.)
"""

import gc
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.routing import APIRoute
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from askalike.app.server.security import (
    BodyLimit,
    KeyChecker,
    SafeJSONResponse,
    TextGuard,
    public_message,
    unknown_parameters,
)
from askalike.app.server.settings import ServerSettings, api_keys
from askalike.core.datasets import JsonError, json_value
from askalike.core.errors import UserError
from askalike.core.priority import background_executor
from askalike.indexer.layout import IndexBusyError

if TYPE_CHECKING:
    from askalike.retrieval.live import LiveSearcher

log = logging.getLogger("askalike.serve")
PAGE = "page.html"
# the encoder's threads in one search: requests run side by side, and threads that each search
# spread over the cores would only compete with the others (``askalike serve`` sets OpenMP's and
# BLAS's to one as well)
SEARCH_THREADS = 1
T = TypeVar("T")


class ServedIndex:
    """The index as this process serves it: loaded in the background at start-up, so that
    ``/health`` answers at once and ``/ready`` says when searches can be answered."""

    def __init__(self, settings: ServerSettings) -> None:
        self.settings = settings
        self.live: LiveSearcher | None = None  # once loaded
        self.failure: str | None = None
        self.write_lock = threading.Lock()  # this process's writes, one at a time
        self._closing = threading.Lock()  # between a load that ends and close()
        self._closed = False
        # its thread starts on the first write
        self._below_searches: ThreadPoolExecutor = background_executor("askalike-writes")

    def below_searches(self, work: Callable[[], T]) -> T:
        """``work`` (a write's part that no search waits for) on this process's thread below the
        searches' priority (``core.priority``), its result or error returned here."""
        return self._below_searches.submit(work).result()

    def close(self) -> None:
        """The writes under way end first (each opens its state), then the index is closed; one
        still loading is closed as soon as it has loaded."""
        try:
            self._below_searches.shutdown()
        finally:
            with self._closing:
                self._closed = True
                if self.live is not None:
                    self.live.close()

    def load(self) -> None:
        try:
            from askalike.retrieval.live import LiveSearcher
            from askalike.retrieval.searcher import Searcher

            index_dir, settings = Path(self.settings.index_dir), self.settings

            def open_searcher(encoder: Any) -> Searcher:
                return Searcher(index_dir, settings.database, settings.model, encoder=encoder,
                                threads=SEARCH_THREADS, remember_stored=True, prepared=True)

            live = LiveSearcher(index_dir, open_searcher)
            with self._closing:
                if self._closed:  # the server stopped while it loaded
                    live.close()
                else:
                    self.live = live
        except UserError as err:
            self.failure = public_message(str(err))
            log.error("askalike serve: %s", err)
        except Exception:
            self.failure = "internal error (the server's log has the details)"
            log.exception("askalike serve: the index could not be loaded")

    def require(self) -> "LiveSearcher":
        if self.live is None:
            raise HTTPException(503, f"the index could not be loaded: {self.failure}" if self.failure
                                else "the index is still loading")
        return self.live


class StrictJsonRequest(Request):
    """A request whose JSON body is read as a JSON Lines row is (``core.datasets.json_value``):
    a key written twice, half a UTF-16 pair or bytes that are not UTF-8 are refused (400) with
    what is wrong and where, instead of the last key kept or a server error."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            try:
                self._json = json_value(await self.body())
            except JsonError as err:
                raise HTTPException(400, f"the request body: {err}") from None
        return self._json


class StrictJsonRoute(APIRoute):
    """The routes' class: their handlers read the body through ``StrictJsonRequest``, a body of
    another type than JSON is refused, and so is a query parameter the route does not take."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **options: Any) -> None:
        if BODY_METHODS & set(options.get("methods") or ()):
            # last of the route's dependencies: a missing key answers 401/403 before a wrong type
            options["dependencies"] = [*(options.get("dependencies") or ()), Depends(_require_json_body)]
        super().__init__(path, endpoint, **options)

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        known = sorted(_query_names(self.dependant))

        async def strict(request: Request) -> Response:
            unknown = [name for name in dict.fromkeys(request.query_params) if name not in known]
            if unknown:  # a misspelt parameter is refused, never ignored
                return _error(422, unknown_parameters(unknown, known))
            return await handler(StrictJsonRequest(request.scope, request.receive))

        return strict


BODY_METHODS = {"POST", "PUT", "PATCH"}


async def _require_json_body(request: Request) -> None:
    """A body sent as another type than JSON is refused, naming the type (FastAPI would hand it
    to the endpoint as bytes: 'expected a JSON object, got bytes', or a 422 for a dict)."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        media = content_type.split(";", 1)[0].strip()[:100]
        raise HTTPException(400, f"the body is not JSON (Content-Type: {media}): send it with "
                                 "Content-Type: application/json")


def _is_json(content_type: str) -> bool:
    """Does FastAPI read a body of this type as JSON? (application/json, application/*+json)"""
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


def _query_names(dependant: Any) -> set[str]:
    """The query parameters an endpoint takes, its dependencies' included."""
    return {param.alias for param in dependant.query_params}.union(
        *(_query_names(inner) for inner in dependant.dependencies))


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return SafeJSONResponse({"error": public_message(message)}, status_code=status, headers=headers)


def _validation_message(err: RequestValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part not in ("query", "body", "path"))
    error = first.get("ctx", {}).get("error")
    message = str(error) if first.get("type") == "value_error" and error else first.get("msg", "invalid")
    return f"{where}: {message}" if where else str(message)


def _install_error_handlers(api: FastAPI) -> None:
    @api.exception_handler(HTTPException)
    async def http_error(_: Request, err: HTTPException) -> JSONResponse:
        return _error(err.status_code, str(err.detail), getattr(err, "headers", None))

    @api.exception_handler(RequestValidationError)
    async def invalid(_: Request, err: RequestValidationError) -> JSONResponse:
        return _error(422, _validation_message(err))

    @api.exception_handler(IndexBusyError)
    async def busy(_: Request, err: IndexBusyError) -> JSONResponse:
        return _error(503, f"{err}", {"Retry-After": "5"})

    @api.exception_handler(UserError)
    async def user_error(_: Request, err: UserError) -> JSONResponse:
        return _error(400, str(err))

    @api.exception_handler(Exception)
    async def internal(_: Request, err: Exception) -> JSONResponse:
        log.exception("askalike serve: unexpected error", exc_info=err)
        return _error(500, "internal error (the server's log has the details)")


def create_app(settings: ServerSettings, served: bool = False) -> FastAPI:
    """The application for ``settings``; the index loads in the background once it starts.
    ``served``: this process is a server's (``app_from_environment``), not a test's or a tool's."""
    from askalike.app.server import question_routes, search_routes, state_routes, verdict_routes

    loaded = ServedIndex(settings)
    keys = KeyChecker(api_keys(settings))

    def load() -> None:
        loaded.load()
        if served:
            # what is loaded by now (the web framework, the database layer, the model, the
            # index) lives as long as the process: the garbage collector's full passes then
            # leave it out (they took 25-80 ms at a time, for which every request waited)
            gc.collect()
            gc.freeze()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if settings.load_before_accepting:  # uvicorn accepts once the lifespan's startup is done
            await run_in_threadpool(load)
        else:
            threading.Thread(target=load, name="askalike-load", daemon=True).start()
        yield
        loaded.close()

    api = FastAPI(title="askalike", summary="Questions alike in meaning, over HTTP",
                  description="Search an askalike index while people type, and add, edit or "
                              "delete its questions. Writes need `Authorization: Bearer KEY`.",
                  lifespan=lifespan, default_response_class=SafeJSONResponse)
    api.router.route_class = StrictJsonRoute
    api.state.loaded = loaded
    _install_error_handlers(api)
    bearer = HTTPBearer(auto_error=False, description="an API key of the server (writes always "
                                                        "need one; reads with --read-needs-key)")

    def key_checked(required: bool) -> Any:  # async: a sync check would cost a thread hand-off
        async def check(credentials: Annotated[HTTPAuthorizationCredentials | None,
                                               Depends(bearer)]) -> None:
            if not required:
                return
            if not keys:
                raise HTTPException(403, "writes are disabled: the server has no API key "
                                         "(--api-keys FILE or $ASKALIKE_API_KEYS)")
            if credentials is None:
                raise HTTPException(401, "this needs an API key: Authorization: Bearer KEY",
                                    headers={"WWW-Authenticate": "Bearer"})
            if not keys.accepts(credentials.credentials):
                raise HTTPException(401, "the API key is not one of this server's",
                                    headers={"WWW-Authenticate": "Bearer"})
        return Depends(check)

    reader, writer, limits = key_checked(settings.read_needs_key), key_checked(True), settings.limits
    for router in (state_routes.router(loaded, reader), search_routes.router(loaded, limits, reader),
                   question_routes.router(loaded, limits, reader, writer),
                   verdict_routes.router(loaded, limits, writer)):
        api.include_router(router)

    @api.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(files("askalike.app.server").joinpath(PAGE).read_text(encoding="utf-8"))

    if settings.cors_origins:
        api.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins),
                           allow_methods=["GET", "POST", "PUT", "DELETE"],
                           allow_headers=["Authorization", "Content-Type"])
    api.add_middleware(BodyLimit, limit=settings.limits.body_bytes)
    api.add_middleware(TextGuard)
    return api


def app_from_environment() -> FastAPI:
    """The application of each worker process (``uvicorn --factory``), from the settings that
    ``askalike serve`` put in the environment."""
    return create_app(ServerSettings.from_environment(), served=True)

