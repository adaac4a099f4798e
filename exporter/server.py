"""The exporter's HTTP server (aiohttp app factory). Handlers only copy pre-rendered bytes."""

from __future__ import annotations

from functools import lru_cache
from pathlib import PurePath
from typing import Any

from aiohttp import web

from . import __version__
from .api import gpus_json, pods_from_labels
from .render import OPENMETRICS_CONTENT_TYPE
from .sampler import Sampler
from .status import CONTENT_SECURITY_POLICY, StatusPage

SAMPLER = web.AppKey("sampler", Sampler)
STATUS_PAGE = web.AppKey("status_page", StatusPage)

_LANDING = """<!doctype html><html><head><title>Rightsizer exporter</title></head><body>
<h1>Rightsizer exporter {version}</h1>
<p>No sample taken yet: the status page appears here after the first sampling cycle.</p>
<ul><li><a href="/metrics">/metrics</a></li><li><a href="/api/v1/gpus">/api/v1/gpus</a></li>
<li><a href="/healthz">/healthz</a></li><li><a href="/readyz">/readyz</a></li></ul></body></html>
"""


# What /metrics can be: (media type, versions we render). OpenMetrics 1.0.0 (also asked for as
# 0.0.1 by older Prometheus) or the text format 0.0.4; "" stands for "no version given".
_PRODUCED = {
    "application/openmetrics-text": ("1.0.0", "0.0.1", ""),
    "text/plain": ("0.0.4", ""),
    "text/*": ("",),
    "*/*": ("",),
}
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@lru_cache(maxsize=64)
def negotiate(accept: str) -> tuple[bool, str]:
    """(openmetrics?, content type) for an Accept header.

    As prometheus-client's ``choose_encoder`` and Prometheus's scrape header expect, with the two
    faults of the former fixed: an entry with ``q=0`` is refused, not chosen, and the answer names
    the version we render (OpenMetrics 1.0.0), never a version the client asked for that we do not
    produce (such an entry is skipped). The highest q wins, the first listed among equals; nothing
    acceptable: the text format, as both Prometheus clients do.
    """
    best: tuple[float, int, bool] | None = None
    for position, entry in enumerate(accept.split(",")):
        media, *params = (part.strip() for part in entry.split(";"))
        versions = _PRODUCED.get(media.lower())
        if versions is None:
            continue
        q, version = 1.0, ""
        for param in params:
            key, _, value = param.partition("=")
            key, value = key.strip().lower(), value.strip().strip('"')
            if key == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
            elif key == "version":
                version = value
        if q <= 0 or q != q or version not in versions:
            continue
        choice = (q, -position, media.lower() == "application/openmetrics-text")
        if best is None or choice[:2] > best[:2]:
            best = choice
    om = best is not None and best[2]
    return om, (OPENMETRICS_CONTENT_TYPE if om else TEXT_CONTENT_TYPE)


def _accepts_gzip(header: str) -> bool:
    for part in header.split(","):
        coding, _, params = part.strip().partition(";")
        if coding.strip().lower() in ("gzip", "*"):
            return params.replace(" ", "") not in ("q=0", "q=0.0", "q=0.00", "q=0.000")
    return False


async def metrics(request: web.Request) -> web.Response:
    sampler = request.app[SAMPLER]
    published = sampler.current
    if published is None:
        return web.Response(status=503, text="no sample taken yet\n")
    om, content_type = negotiate(request.headers.get("Accept", ""))
    gz = _accepts_gzip(request.headers.get("Accept-Encoding", ""))
    headers = {"Content-Type": content_type, "Vary": "Accept, Accept-Encoding"}
    if gz:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=await sampler.body(published, om, gz), headers=headers)


async def api_gpus(request: web.Request) -> web.Response:
    published = request.app[SAMPLER].current
    if published is None:
        return web.json_response({"error": "no sample taken yet"}, status=503)
    return web.Response(body=published.api_json("gpus", gpus_json), content_type="application/json")


async def api_section(request: web.Request) -> web.Response:
    """Other ``/api/v1/<section>`` views, published by extensions (e.g. ``queues``)."""
    published = request.app[SAMPLER].current
    section = request.match_info["section"]
    if published is None:
        return web.json_response({"error": "no sample taken yet"}, status=503)
    api = published.snapshot.api
    if section not in api and section != "pods":
        return web.json_response({"error": f"unknown section {section!r}"}, status=404)

    def view(snap: Any) -> dict[str, Any]:
        value = snap.api[section] if section in snap.api else pods_from_labels(snap)
        return {"timestamp": snap.timestamp, section: value}

    body = published.api_json(section, view)
    return web.Response(body=body, content_type="application/json")


async def healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def readyz(request: web.Request) -> web.Response:
    if request.app[SAMPLER].current is None:
        return web.Response(status=503, text="no sample taken yet\n")
    return web.Response(text="ready\n")


async def landing(request: web.Request) -> web.Response:
    published = request.app[SAMPLER].current
    if published is None:
        return web.Response(text=_LANDING.format(version=__version__), content_type="text/html")
    headers = {"Content-Security-Policy": CONTENT_SECURITY_POLICY, "Cache-Control": "no-store"}
    body = await request.app[STATUS_PAGE].body(published)
    return web.Response(body=body, content_type="text/html", charset="utf-8", headers=headers)


def create_app(sampler: Sampler) -> web.Application:
    app = web.Application()
    app[SAMPLER] = sampler
    source = sampler.source
    scenario = getattr(getattr(source, "scenario", None), "source", None)  # a name or a file's path
    described = f"{source.name} ({PurePath(scenario).stem})" if scenario else source.name
    app[STATUS_PAGE] = StatusPage(described, sampler.interval)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/api/v1/gpus", api_gpus)
    app.router.add_get("/api/v1/{section}", api_section)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/", landing)
    return app


__all__ = ["OPENMETRICS_CONTENT_TYPE", "SAMPLER", "create_app", "negotiate"]
