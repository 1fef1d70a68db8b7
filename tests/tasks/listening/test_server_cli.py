"""``voxledger packets serve`` through the real command (a Prefect flow): links printed, page served, Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.factories import terminal_sigint
from tests.tasks.listening.conftest import Exported
from tests.tasks.listening.served_rater import page_parts

BIN = Path(sys.executable).parent / "voxledger"


@pytest.mark.prefect
def test_packets_serve_prints_links_serves_pages_and_stops_on_ctrl_c(exported: Exported) -> None:
    cmd = [str(BIN), "--home", str(exported.home.root), "packets", "serve", exported.receipt_id[:12], "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ}, preexec_fn=terminal_sigint)
    try:
        assert proc.stdout is not None
        header = proc.stdout.readline()
        assert header.startswith(f"serving packet set {exported.receipt_id[:12]} on http://127.0.0.1:"), header
        url = header.split(" on ")[1].split()[0]
        links = {}
        while not (line := proc.stdout.readline()).startswith("links are also in"):
            assert line, f"the command exited: {proc.wait(timeout=30)}"
            rid, link = line.split()
            links[rid] = link
        assert sorted(links) == [f"r0{i}" for i in range(1, 7)] and all(link.startswith(url + "/r/") for link in links.values())
        with httpx.Client(follow_redirects=True, timeout=10) as client:
            page = client.get(links["r02"])
            assert page.status_code == 200 and page_parts(page.text)[1]["served"] is True
            assert client.get(url + "/operator.json").json()["packet_set"] == exported.receipt_id
            revoke = [str(BIN), "--home", str(exported.home.root), "packets", "revoke", exported.receipt_id[:12], "r03", "--new-link"]
            done = subprocess.run(revoke, capture_output=True, text=True, timeout=120, env={**os.environ})  # a flow, like serve
            assert done.returncode == 0 and "revoked the link of rater r03" in done.stdout, done.stdout + done.stderr[-2000:]
            fresh = done.stdout.split("new link path for r03: ")[1].split()[0]
            assert client.get(links["r03"]).status_code != 200  # the running server refuses the old link at once
            assert client.get(url + fresh).status_code == 200
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "Traceback" not in err, err[-2000:]
    assert "Interrupted" in err.splitlines()[-1]
    links_file = exported.home.root / "listening" / "served" / exported.receipt_id[:16] / "links.txt"
    assert links_file.stat().st_mode & 0o777 == 0o600
    # the file holds every live link: r03's is the one issued when its first was revoked
    assert {line.split("\t")[0]: url + line.split("\t")[1] for line in links_file.read_text().splitlines()} == links | {"r03": url + fresh}
