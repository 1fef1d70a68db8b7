"""Players for a few prompts of the newest evaluation, one per candidate, embedded in the page.

Clips are embedded as ``data:`` URIs holding the exact stored bytes (the digest under each player
names them), so the page stays one offline file. A byte budget bounds the page: clips past it are
listed by digest, not embedded.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from html import escape

import duckdb
from pydantic import ValidationError

from voxledger.dashboards.html import digest, nothing
from voxledger.schemas.evaluation import EvaluationPlan, EvaluationReceipt
from voxledger.stores import dashboard_queries as q

BlobReader = Callable[[str], bytes]


def players(
    con: duckdb.DuckDBPyConnection, evaluation_sha256: str | None, blobs: BlobReader | None, *, prompts: int = 3, max_bytes: int = 8_000_000
) -> str:
    """A prompt x candidate grid of ``<audio>`` players for the first ``prompts`` prompts.

    Without ``blobs`` (no store to read clips from) the grid lists digests and says why.
    """
    if evaluation_sha256 is None:
        return nothing("no evaluations yet")
    clips = q.audio_clips(con, evaluation_sha256, prompts)
    if not clips:
        return nothing("the newest evaluation has no valid clips")
    ev = q.receipt(con, evaluation_sha256, EvaluationReceipt)
    texts = _prompt_texts(ev.parameters.plan_sha256, blobs)
    candidates = [c.name for c in ev.parameters.candidates if any(k["candidate"] == c.name for k in clips)]
    by_prompt: dict[str, dict[str, q.Row]] = {}
    for k in clips:
        by_prompt.setdefault(k["prompt_id"], {})[k["candidate"]] = k
    budget = [max_bytes]
    head = "<tr><th>prompt</th>" + "".join(f"<th>{escape(c)}</th>" for c in candidates) + "</tr>"
    body = "".join(
        f"<tr><td><b>{escape(pid)}</b><br><span class='muted'>{escape(texts.get(pid, ''))}</span></td>"
        + "".join(f"<td>{_player(row.get(c), blobs, budget)}</td>" for c in candidates)
        + "</tr>"
        for pid, row in by_prompt.items()
    )
    why = "" if blobs else nothing("clips not embedded: this dashboard was built without access to the blob store")
    return (
        f"<p class='muted'>plan {escape(ev.parameters.plan_name)}: the first {len(by_prompt)} prompt(s), lowest seed, every candidate; "
        f"each clip is the stored file named by the digest under it</p>{why}<table class='players'>{head}{body}</table>"
    )


def _player(clip: q.Row | None, blobs: BlobReader | None, budget: list[int]) -> str:
    if clip is None:
        return '<span class="muted">no valid clip</span>'
    info = f"<br><span class='muted'>{clip['duration_s']:.2f} s</span> {digest(clip['audio_sha256'])}"
    size = int(clip["size_bytes"] or 0)
    if blobs is None:
        return "not embedded" + info
    if size > budget[0]:
        return '<span class="warn">not embedded: page budget reached</span>' + info
    budget[0] -= size
    data = base64.b64encode(blobs(clip["audio_sha256"])).decode("ascii")
    media = escape(clip["media_type"] or "audio/wav")
    return f'<audio controls preload="none" data-candidate="{escape(clip["candidate"])}" src="data:{media};base64,{data}"></audio>' + info


def _prompt_texts(plan_sha256: str, blobs: BlobReader | None) -> dict[str, str]:
    """Prompt id -> text from the registered evaluation plan; empty when it cannot be read."""
    if blobs is None:
        return {}
    try:
        plan = EvaluationPlan.model_validate_json(blobs(plan_sha256))
    except ValidationError:
        return {}  # a plan that no longer validates still has its clips shown, without texts
    return {p.id: p.text for p in plan.prompts}
