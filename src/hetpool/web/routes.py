"""The home page: capacity per pool and task counts, rendered on the server."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from sqlalchemy import func, select

from hetpool.server.db.models import NodeStatusRow, TaskRow
from hetpool.server.services.inventory import load_inventory
from hetpool.server.services.tasks import current_snapshot
from hetpool.web.i18n import MESSAGES, pick_language, translator

router = APIRouter(include_in_schema=False)
_templates = Environment(loader=FileSystemLoader(Path(__file__).parent / "templates"), autoescape=select_autoescape())


@router.get("/", response_class=HTMLResponse)
def home(request: Request, lang: str | None = None) -> HTMLResponse:
    language = pick_language(lang, request.cookies.get("hetpool_lang"), request.headers.get("accept-language"))
    ctx = request.app.state.ctx
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        snap = current_snapshot(ctx, session, inv)
        states = dict(session.execute(select(TaskRow.state, func.count()).group_by(TaskRow.state)).all())
        statuses = session.execute(select(NodeStatusRow).order_by(NodeStatusRow.node)).scalars().all()
        # Only what needs attention: nodes not ready, or with abnormal devices.
        attention = [
            {
                "node": r.node,
                "cluster": inv.nodes[r.node].cluster if r.node in inv.nodes else "-",
                "state": r.state,
                "reason": r.reason,
                "source": r.source,
                "abnormal": [d["index"] for d in r.devices if d.get("health") == "abnormal"],
            }
            for r in statuses
            if r.state != "ready" or any(d.get("health") == "abnormal" for d in r.devices)
        ]
    free = snap.whole_free()
    totals = snap.device_totals()
    pools = []
    for view in snap.pools:
        total = int(sum(totals[r] for r in view.rows))
        idle = int(sum(free[r] for r in view.rows))
        pools.append(
            {"name": view.name, "model": view.model.display_name, "class": view.model.device_class.value, "total": total, "busy": total - idle}
        )
    device_count = Counter()
    for p in pools:
        device_count[p["class"]] += p["total"]
    html = _templates.get_template("home.html").render(
        t=translator(language),
        lang=language,
        other_lang="zh-CN" if language == "en" else "en",
        counts={"clusters": len(inv.clusters), "nodes": len(inv.nodes), "pools": len(inv.pools), "devices": sum(device_count.values())},
        pools=pools,
        states=states,
        attention=attention,
        known_states={k for k in MESSAGES if k.startswith("state.")},
    )
    response = HTMLResponse(html)
    if lang in ("en", "zh-CN"):
        response.set_cookie("hetpool_lang", lang, max_age=365 * 86400, samesite="lax")
    return response
