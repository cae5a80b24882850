"""Page test fixtures: the HTTP tests' (a client on the real app over a private copy of the demo library)."""

from __future__ import annotations

from tests.http.conftest import MakeClient, client, make_client

__all__ = ["MakeClient", "client", "make_client"]
