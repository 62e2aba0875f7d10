"""HTTP helpers shared by the thin clients that speak HTTP through ``requests``.

``CutAdapter`` is the adapter every such client mounts: its connections come from pool managers
passed through ``core.deadlines.guard_pool_manager``, so ``cut_at(deadline)`` can end a whole
exchange however the server behaves. It makes no retries unless given ``max_retries``: retries
belong to the caller (Celery backoff, a collection cursor, a delivery's next attempt).
"""

from __future__ import annotations

from typing import Any

from requests.adapters import HTTPAdapter
from urllib3 import PoolManager
from urllib3.util.retry import Retry

from core.deadlines import guard_pool_manager


def no_retries() -> Retry:
    """urllib3 retries switched off, answers of any status returned as they are."""
    return Retry(total=0, raise_on_status=False)


class CutAdapter(HTTPAdapter):
    """An adapter whose connections can be cut at a call's deadline (``core.deadlines``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("max_retries", no_retries())
        super().__init__(*args, **kwargs)

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        guard_pool_manager(self.poolmanager)

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: Any) -> PoolManager:
        return guard_pool_manager(super().proxy_manager_for(proxy, **proxy_kwargs))
