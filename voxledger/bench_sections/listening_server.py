"""``listening-server``: a bounded load test of ``voxledger packets serve`` on loopback.

A packet set of N raters (ACR over espeak clips) is served by the real server in its own
process; N simulated raters at once open their links, fetch the page, stream every sample in two
byte ranges and post every event of every trial (start, present, play, ended, rate, next) and
finally seal their answers, as fast as the server answers. Measured: requests per second, median
and 95th-percentile latency, and answers lost (acknowledged by the server but absent from its
journal afterwards; the goal is 0). Nothing waits for real-time playback, so the logs are
implausible and the aggregation the server runs meanwhile refuses them: that work is part of the load.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from voxledger.bench_sections.common import Figure

PROMPTS = (
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It is easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
)


def build_served_set(root: Path, raters: int) -> tuple[Path, str]:
    """A home with an ACR packet set of ``raters`` packets (2 prompts each); (home root, packet-set receipt id)."""
    import io

    import soundfile as sf

    from voxledger.schemas.listening import AcrCriterion, Design, ListeningProtocol, Stimulus, StimulusSet
    from voxledger.stores.home import Home
    from voxledger.tasks.corpus.espeak import resample_synthesis, synthesize
    from voxledger.tasks.stages.packets import export_packets

    home = Home(root / "home")
    stimuli = []
    for i, text in enumerate(PROMPTS):
        for cand, voice in (("recordings", "en-us"), ("tts", "en+f3")):
            buf = io.BytesIO()
            sf.write(buf, resample_synthesis(synthesize(text, voice=voice), 16000).audio, 16000, subtype="PCM_16", format="WAV")
            sha = home.blobs.put_bytes(buf.getvalue())
            stimuli.append(Stimulus(prompt_id=f"p{i}", category="bench", text=text, candidate=cand, seed=0, audio_sha256=sha))
    protocol = ListeningProtocol(
        name="bench-served",
        criteria=(AcrCriterion(task="acr", name="naturalness", question="How natural does this voice sound?"),),
        design=Design(raters=raters, raters_per_prompt=raters // 2, gold_items=0, attention_checks=0, seed=1),
    )
    stim_set = StimulusSet(evaluation_plan_sha256="b" * 64, stimuli=tuple(stimuli))
    outcome = export_packets(home, protocol, stim_set, root / "packets", protocol_name="bench-served")
    return home.root, outcome.receipt_id


def serve_child(home: str, packet_set: str) -> None:
    """The server as ``packets serve`` runs it (ratings stage as the aggregator), on a free port; prints URL and links."""
    from voxledger.stores.home import Home
    from voxledger.tasks.listening.served import ServedSet
    from voxledger.tasks.listening.server import ServerApp, run_server
    from voxledger.tasks.stages.ratings import aggregate_ratings, load_packet_set

    h = Home(Path(home))
    served = ServedSet(h, packet_set, load_packet_set(h, packet_set))

    def aggregate(files: list[Path]) -> dict[str, Any]:
        out = aggregate_ratings(h, packet_set, files, flow="bench")
        return {"receipt": out.receipt_id, "accepted": out.receipt.result.submissions_accepted}

    server = ServerApp(served, aggregate=aggregate)
    served.issue_links()

    def announce(url: str) -> None:
        print(json.dumps({"url": url, "links": served.links()}), flush=True)

    run_server(server, "127.0.0.1", 0, announce)


async def _rater(url: str, link: str, latencies: list[float], tally: dict[str, int]) -> None:
    import httpx

    transport = httpx.AsyncHTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    async with httpx.AsyncClient(base_url=url, transport=transport, follow_redirects=True, timeout=60) as client:

        async def request(method: str, path: str, **kw: Any) -> Any:
            t = time.perf_counter()
            r = await client.request(method, path, **kw)
            latencies.append(time.perf_counter() - t)
            tally["requests"] += 1 + len(r.history)
            if r.status_code not in (200, 206):
                tally["errors"] += 1
            return r

        page = await request("GET", link)
        found = dict(re.findall(r'<script type="application/json" id="(packet|binding)">(.*?)</script>', page.text, flags=re.DOTALL))
        packet, binding = json.loads(found["packet"]), json.loads(found["binding"])
        audio = {a["id"]: a["file"] for a in packet["audio"]}
        seq = binding["state"]["seq"]

        async def post(event: str, trial: str | None = None, stimulus: str | None = None, detail: str | None = None) -> bool:
            nonlocal seq
            body = {"page": binding["page"], "seq": seq, "event": event, "trial": trial, "stimulus": stimulus, "detail": detail}
            r = await request("POST", "/api/events", json=body)
            seq += r.status_code == 200
            return bool(r.status_code == 200)

        await post("start")
        for trial in packet["trials"]:
            await post("present", trial["id"])
            for stim in trial["stimuli"]:
                await request("GET", audio[stim], headers={"Range": "bytes=0-32767"})
                await request("GET", audio[stim], headers={"Range": "bytes=32768-"})
                await post("play", trial["id"], stim)
                await post("ended", trial["id"], stim)
            for crit in trial["criteria"]:
                tally["answers_sent"] += 1
                acked = await post("rate", trial["id"], trial["stimuli"][0], f"{crit}=3")
                tally["answers_acked"] += acked  # added after the await: other raters update the tally meanwhile
            await post("next", trial["id"])
        r = await request("POST", "/api/finish", json={"page": binding["page"]})
        tally["finished"] += r.status_code == 200


async def _load(url: str, links: dict[str, str]) -> tuple[float, list[float], dict[str, int]]:
    latencies: list[float] = []
    tally = dict.fromkeys(("requests", "errors", "answers_sent", "answers_acked", "finished"), 0)
    t0 = time.perf_counter()
    await asyncio.gather(*(_rater(url, link, latencies, tally) for link in links.values()))
    return time.perf_counter() - t0, latencies, tally


def bench_listening_server(work: Path, raters: int) -> list[Figure]:
    """``raters`` simulated raters at once against one server process on loopback."""
    from voxledger.stores.listening_sessions import SessionStore
    from voxledger.tasks.listening.served import SERVED_DIR

    home, packet_set = build_served_set(work / "served", raters)
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "voxledger.bench_sections.listening_server", str(home), packet_set]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
    try:
        assert proc.stdout is not None
        started = json.loads(proc.stdout.readline())
        wall_s, latencies, tally = asyncio.run(_load(started["url"], started["links"]))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    store = SessionStore(home / SERVED_DIR / packet_set[:16] / "sessions.sqlite")
    journalled = sum(len(store.answers(r.rater_id)) for r in store.raters())
    store.close()
    lat = sorted(latencies)
    return [
        Figure(f"served test: {raters} raters at once, requests", tally["requests"], "requests"),
        Figure("served test: throughput", tally["requests"] / wall_s, "requests/s"),
        Figure("served test: median latency", 1000 * lat[len(lat) // 2], "ms"),
        Figure("served test: p95 latency", 1000 * lat[int(0.95 * (len(lat) - 1))], "ms"),
        Figure("served test: refused or failed requests", tally["errors"], "requests", "== 0"),
        Figure("served test: raters finished", tally["finished"], "raters", f"== {raters}"),
        Figure("served test: answers lost (acknowledged, not journalled)", tally["answers_acked"] - journalled, "answers", "== 0"),
        Figure("served test: answers journalled / sent", journalled / max(1, tally["answers_sent"]), "x", "== 1"),
    ]


if __name__ == "__main__":
    serve_child(sys.argv[1], sys.argv[2])
