"""Flow ``listening_server``: serve a packet set to raters over HTTP until stopped (``voxledger packets serve``)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from prefect import flow, task

from voxledger.flows.common import flow_name
from voxledger.stores.home import HomeRef
from voxledger.tasks.stages.ratings import aggregate_ratings, load_packet_set


def _echo(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


@task(name="serve_packet_set")
def serve_packet_set(home: HomeRef, packet_set: str, host: str, port: int, public_url: str | None) -> dict[str, Any]:
    """Serve until SIGINT/SIGTERM; each finished rater's submission is aggregated with the ratings stage."""
    from voxledger.tasks.listening.served import ServedSet
    from voxledger.tasks.listening.server import ServerApp, run_server

    h = home.open()
    h.require_writable()
    served = ServedSet(h, packet_set, load_packet_set(h, packet_set))
    name = flow_name()

    def aggregate(files: list[Path]) -> dict[str, Any]:
        out = aggregate_ratings(h, packet_set, files, flow=name)
        r = out.receipt.result
        return {
            "receipt": out.receipt_id,
            "accepted": r.submissions_accepted,
            "rejections": [{"file": x.file, "reason": x.reason} for x in r.rejections],
            "screening": [s.model_dump(mode="json") for s in r.screening],
        }

    server = ServerApp(served, aggregate=aggregate, secure_cookie=bool(public_url and public_url.startswith("https://")))
    issued = served.issue_links()

    def announce(url: str) -> None:
        base = (public_url or url).rstrip("/")
        _echo(f"serving packet set {packet_set[:12]} on {url} (operator page: {url}/operator, from this machine only)")
        for rid, path in sorted(served.links().items()):
            _echo(f"{rid} {base}{path}{'' if rid in issued else ' (issued earlier)'}")
        _echo(f"links are also in {served.links_file}; submissions land in {served.submissions_dir}")

    run_server(server, host, port, announce)
    return {"finished": [p.name for p in served.finished_submissions()]}


@flow(name="listening_server")
def listening_server(
    home: HomeRef | str, packet_set: str, host: str = "127.0.0.1", port: int = 8765, public_url: str | None = None
) -> dict[str, Any]:
    """Serve ``packet_set`` (a packet_set receipt id) to its raters: one capability link each."""
    return serve_packet_set(HomeRef.of(home), packet_set, host, port, public_url)


@flow(name="revoke_link")
def revoke_rater_link(home: HomeRef | str, packet_set: str, rater: str, new_link: bool = False) -> str | None:
    """Revoke ``rater``'s link to a served ``packet_set`` (and issue a new one): the new link's path, or None."""
    from voxledger.tasks.listening.served import revoke_link

    h = HomeRef.of(home).open()
    h.require_writable()
    return revoke_link(h, packet_set, rater, new_link=new_link)
