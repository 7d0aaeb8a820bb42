"""Overview page (placeholder until the overview helper lands)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from hetpool.web.render import render
from hetpool.web.session import viewer

router = APIRouter()


@router.get("/", response_class=HTMLResponse)
async def overview(request: Request) -> HTMLResponse:
    user = await viewer(request)
    pools = await user.api.get("/api/v1/objects/pools")
    return render(request, "overview.html", user, pools=pools)
