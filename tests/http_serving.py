"""The thread that serves a test's loopback HTTP server (the Kubernetes API server, the Prometheus
and webhook stand-ins) until the test stops it, its answers sent without Nagle's algorithm."""

from __future__ import annotations

import socketserver
import threading

# ``serve_forever`` looks for a ``shutdown()`` once per poll interval, 0.5 s by default: each
# test that stopped a server of its own waited up to that long in its teardown (more than 260
# tests start the Kubernetes API server). Waking 50 times a second costs next to no CPU.
SHUTDOWN_POLL_SECONDS = 0.02


def serving_thread(server: socketserver.BaseServer) -> threading.Thread:
    """A daemon thread, not yet started, that serves ``server`` until its ``shutdown()``.

    The server's handlers send without Nagle's algorithm: an HTTP handler writes the headers and
    the body of an answer apart on a kept-alive connection, and with Nagle the body waited for
    the client's delayed ACK of the headers (up to 40 ms on Linux), answer after answer."""
    handler = server.RequestHandlerClass
    if isinstance(handler, type) and issubclass(handler, socketserver.StreamRequestHandler):
        handler.disable_nagle_algorithm = True
    return threading.Thread(
        target=server.serve_forever,
        kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        daemon=True,
    )
