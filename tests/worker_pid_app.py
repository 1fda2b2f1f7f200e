"""An ASGI application that answers every request with the id of the process serving it, and
(run as a script) serve's balanced workers serving it: ``python worker_pid_app.py APP PORT``."""

from __future__ import annotations

import os
import sys


async def app(scope, receive, send) -> None:
    body = str(os.getpid()).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


if __name__ == "__main__":
    import uvicorn

    from askalike.app.commands.serve import UVICORN_OPTIONS
    from askalike.app.server.balancer import BalancedWorkers

    BalancedWorkers(uvicorn.Config(sys.argv[1], host="127.0.0.1", port=int(sys.argv[2]), workers=2,
                                   lifespan="off", **UVICORN_OPTIONS)).run()
