"""Run a served packet set the way ``voxledger packets serve`` does, without Prefect (a test's child process).

``python -m tests.tasks.listening.serve_script HOME PACKET_SET [PORT]``: prints ``URL``, then one
``RATER PATH`` line per usable link, then ``ready``; finished raters are aggregated by the ratings
stage, as the flow does.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from voxledger.stores.home import Home
from voxledger.tasks.listening.served import ServedSet
from voxledger.tasks.listening.server import ServerApp, run_server
from voxledger.tasks.stages.ratings import aggregate_ratings, load_packet_set


def main(home_dir: str, packet_set: str, port: int = 0) -> None:
    home = Home(Path(home_dir))
    served = ServedSet(home, packet_set, load_packet_set(home, packet_set))

    def aggregate(files: list[Path]) -> dict[str, Any]:
        out = aggregate_ratings(home, packet_set, files, flow="test")
        return {"receipt": out.receipt_id, "accepted": out.receipt.result.submissions_accepted, "rejections": [],
                "screening": [s.model_dump(mode="json") for s in out.receipt.result.screening]}  # fmt: skip

    server = ServerApp(served, aggregate=aggregate)
    served.issue_links()

    def announce(url: str) -> None:
        print(url)
        for rid, path in sorted(served.links().items()):
            print(rid, path)
        print("ready", flush=True)

    run_server(server, "127.0.0.1", port, announce)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 0)
