"""Render a rater's page: one self-contained HTML file (CSS, JS and packet data inline).

The static page loads nothing from the network (its Content-Security-Policy forbids it) and
reads its audio from the ``audio/`` folder next to it, so it works opened straight from disk.
The served page is the same template and script with another binding: no token, the page's id
and where the rater is; it fetches audio from and posts events to its own origin only.
"""

from __future__ import annotations

import html
import json
import re
from functools import cache
from importlib import resources
from typing import Any

from voxledger.schemas.listening import PacketManifest


@cache
def _asset(name: str) -> str:
    return resources.files("voxledger.tasks.listening").joinpath(name).read_text(encoding="utf-8")


def _script_json(value: Any) -> str:
    """JSON safe inside a ``<script>`` element (no ``<``, ``>`` or ``&`` can end it early)."""
    text = json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


STATIC_CSP = (
    "default-src 'none'; media-src 'self' file:; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src 'none'; connect-src 'none'; form-action 'none'"
)
SERVED_CSP = (
    "default-src 'none'; media-src 'self'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
    "img-src 'none'; connect-src 'self'; form-action 'none'; base-uri 'none'"
)


def render_page(manifest: PacketManifest, packet_sha256: str, token: str) -> str:
    """The static page of one packet, binding submissions to ``packet_sha256`` and ``token``."""
    binding = {"packet_sha256": packet_sha256, "token": token}
    return _fill(html.escape(manifest.title), manifest.model_dump(mode="json"), binding, STATIC_CSP)


def render_served_page(document: dict[str, Any], page: str, state: dict[str, Any]) -> str:
    """The served page of one rater: ``document`` is the packet with audio by opaque URL, ``page``
    the id its posts carry, ``state`` where the rater is (``ServedSet.resume_state``). No secret."""
    return _fill(html.escape(str(document["title"])), document, {"served": True, "page": page, "state": state}, SERVED_CSP)


def _fill(title: str, packet: dict[str, Any], binding: dict[str, Any], csp: str) -> str:
    parts = {
        "TITLE": title,
        "CSP": csp,
        "CSS": _asset("page.css"),
        "PACKET": _script_json(packet),
        "BINDING": _script_json(binding),
        "JS": _asset("page.js"),
    }
    # one pass, so text inserted for one marker is never scanned for another
    return re.sub(r"\{\{(TITLE|CSP|CSS|PACKET|BINDING|JS)\}\}", lambda m: parts[m.group(1)], _asset("page.html"))
