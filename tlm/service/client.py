"""The HTTP client of the schedule service: ``tlm compile --endpoint URL`` asks a running
``tlm serve`` for each task's schedule with it. A server's 4xx/5xx answer, or no answer, is an
:class:`tlm.service.api.ApiError` carrying the server's own message.
"""
from __future__ import annotations

import json

from tlm.service.api import ApiError, ScheduleResponse


class ScheduleClient:
    """Asks a running ``tlm serve`` for schedules (``tlm compile --endpoint``)."""

    def __init__(self, url: str, *, token: str | None = None, timeout_s: float = 600.0) -> None:
        import httpx

        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.url = url.rstrip("/")
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout_s)

    def schedules(self, tvmscript: str, hardware: str, *, k: int = 1, measure: bool = False,
                  rank: bool = True, pool: int | None = None, use_default: bool = True) -> ScheduleResponse:
        """The server's answer for one PrimFunc; raises ApiError with the server's message on a 4xx/5xx."""
        import httpx

        body = {"tvmscript": tvmscript, "hardware": hardware, "k": k, "measure": measure, "rank": rank,
                "use_default": use_default}
        if pool is not None:
            body["pool"] = pool
        try:
            r = self._http.post("/v1/schedules", json=body)
        except httpx.HTTPError as exc:
            raise ApiError(503, f"{self.url}: {type(exc).__name__}: {exc}") from None
        if r.status_code != 200:
            try:
                detail = r.json().get("detail", r.text)
            except json.JSONDecodeError:
                detail = r.text
            raise ApiError(r.status_code, f"{self.url}: {detail}")
        return ScheduleResponse.model_validate(r.json())

    def close(self) -> None:
        self._http.close()
