"""``askalike serve``: the index over HTTP (``app/server``), on uvicorn."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Annotated

import typer

from askalike.app.errors import user_errors
from askalike.app.model_specs import shipped_models, with_onnx_export
from askalike.app.options import DatabaseOption, IndexOption, app
from askalike.app.output import plain, stderr
from askalike.app.server.settings import Limits
from askalike.indexer.choices import DEFAULT_INDEX_DIR

APPLICATION = "askalike.app.server.api:app_from_environment"  # each worker's (uvicorn's --factory)
# how uvicorn serves, whatever the address and workers (the protocol: TCP_NODELAY on every
# connection, which uvicorn's socket for several workers lacked; no WebSocket upgrades: the API
# has none, and a connection upgraded would leave the HTTP protocol that tells the balanced
# workers' parent when it closes)
DEFAULT_LIMITS = Limits()  # what docs/api.md shows
UVICORN_OPTIONS = {"log_level": "warning", "server_header": False,
                   "http": "askalike.app.server.protocol:NoDelayHTTP", "ws": "none"}


@app.command("serve")
def serve(
    index_dir: IndexOption = DEFAULT_INDEX_DIR,
    database: DatabaseOption = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="A model directory, fast or accurate, or pretrained:NAME with the index's "
                        "weights.", callback=shipped_models, show_default="the index's own model")] = None,
    host: Annotated[str, typer.Option(help="Address to listen on; 0.0.0.0 listens on every "
                                           "network (put it behind TLS).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Worker processes; each loads the index and "
                                                     "follows its commits. One a core answers the "
                                                     "most searches.")] = 1,
    api_keys: Annotated[Path | None, typer.Option(
        "--api-keys", help="File of API keys, one a line; $ASKALIKE_API_KEYS adds more. Writes "
                           "need one (Authorization: Bearer KEY); without any, writes are off.")] = None,
    read_needs_key: Annotated[bool, typer.Option(
        "--read-needs-key", help="Searches and reads need an API key too.")] = False,
    cors_origin: Annotated[list[str] | None, typer.Option(
        "--cors-origin", help="An origin (https://forum.example) whose pages may call the API; "
                              "repeatable.", show_default="none: same origin only")] = None,
    max_body_bytes: Annotated[int, typer.Option(
        min=1024, help="Largest request body.")] = DEFAULT_LIMITS.body_bytes,
    max_query_chars: Annotated[int, typer.Option(
        min=1, help="Longest query or text.")] = DEFAULT_LIMITS.query_chars,
    max_k: Annotated[int, typer.Option(min=1, help="Most results a search may ask for.")] = DEFAULT_LIMITS.k,
    max_batch: Annotated[int, typer.Option(
        min=1, help="Most queries or questions a request.")] = DEFAULT_LIMITS.batch,
) -> None:
    """Serve searches and writes over HTTP: the search page at /, the API's docs at /docs."""
    # each search on one thread (the requests run side by side): OpenMP (FAISS) and BLAS read
    # these when they load, here or in a worker process, and a thread's own setting would not
    # reach the threads that answer requests
    for variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(variable, "1")
    import uvicorn

    from askalike.app.server import balancer
    from askalike.app.server.settings import SETTINGS_ENV_VAR, ServerSettings
    from askalike.app.server.settings import api_keys as read_keys
    from askalike.indexer.directory import open_index

    with user_errors():
        spec = with_onnx_export(model) if model else None
        settings = ServerSettings(str(index_dir.resolve()), database, spec,
                                  str(api_keys.resolve()) if api_keys else None, read_needs_key,
                                  tuple(cors_origin or ()),
                                  Limits(max_body_bytes, max_query_chars, max_k, max_batch),
                                  load_before_accepting=workers > 1)
        open_index(index_dir, database).close()  # a missing or damaged index: one line, before binding
        keys = read_keys(settings)
        _require_free(host, port)
    stderr.print(plain(f"serving {index_dir} on http://{host}:{port}/ (API docs at /docs); writes "
                       + ("need an API key" if keys else "are off: no API key given")))
    os.environ[SETTINGS_ENV_VAR] = settings.to_environment()
    options = {"factory": True, "host": host, "port": port, "workers": workers, **UVICORN_OPTIONS}
    if workers > 1 and balancer.SUPPORTED:  # each connection to the worker holding the fewest
        balancer.BalancedWorkers(uvicorn.Config(APPLICATION, **options)).run()
    else:
        uvicorn.run(APPLICATION, **options)


def _require_free(host: str, port: int) -> None:
    """Refuse, in one line, an address this process cannot listen on (a port another server
    holds, a host that is no address of this machine), before saying it serves there: uvicorn
    would log the error only after that. Bound as uvicorn binds (``SO_REUSEADDR``)."""
    from askalike.app.server.settings import ServerConfigError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as err:
            raise ServerConfigError(f"cannot listen on {host}:{port} ({err.strerror or err}): another "
                                    "server may hold the port; choose another --port") from None
