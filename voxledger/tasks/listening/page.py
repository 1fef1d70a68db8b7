"""Render a rater's page: one self-contained HTML file (CSS, JS and packet data inline).

The page loads nothing from the network (its Content-Security-Policy forbids it) and reads its
audio from the ``audio/`` folder next to it, so it works opened straight from disk.
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


def render_page(manifest: PacketManifest, packet_sha256: str, token: str) -> str:
    """The page of one packet, binding submissions to ``packet_sha256`` and ``token``."""
    parts = {
        "TITLE": html.escape(manifest.title),
        "CSS": _asset("page.css"),
        "PACKET": _script_json(manifest.model_dump(mode="json")),
        "BINDING": _script_json({"packet_sha256": packet_sha256, "token": token}),
        "JS": _asset("page.js"),
    }
    # one pass, so text inserted for one marker is never scanned for another
    return re.sub(r"\{\{(TITLE|CSS|PACKET|BINDING|JS)\}\}", lambda m: parts[m.group(1)], _asset("page.html"))
