"""Page test fixtures: the same as the HTTP tests' (a private copy of the demo library, a client on the real app)."""

from __future__ import annotations

from tests.http.conftest import MakeClient, client, data_dir, make_client

__all__ = ["MakeClient", "client", "data_dir", "make_client"]
