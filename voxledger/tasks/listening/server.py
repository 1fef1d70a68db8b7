"""The listening-test server: an ASGI app (Starlette) over a ``ServedSet``, and the loop that runs it.

Routes (nothing else answers, nothing is listable, no request path reaches the file system):

- ``GET /r/<link>/<secret>``: a rater's capability link; sets a session cookie, redirects to ``/t``;
- ``GET /t``: the rater's page (a fresh page id: an earlier tab's posts are refused from then on);
- ``GET|HEAD /a/<opaque id>``: one of the rater's audio files, byte ranges supported;
- ``POST /api/events``, ``POST /api/finish``: the page's events, and the request to seal the answers;
- ``GET /operator``, ``/operator.json``: progress and screening per rater, from loopback only.

Every response carries the same security headers; audio responses differ only in length and bytes.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from voxledger.schemas.errors import RequestRefusedError, VoxledgerError
from voxledger.schemas.listening import LogEvent
from voxledger.tasks.listening.page import render_served_page
from voxledger.tasks.listening.plausibility import check_log
from voxledger.tasks.listening.served import MAX_BODY_BYTES, EventIn, FinishIn, ServedSet, parse_body, refuse
from voxledger.tasks.listening.verify import needed_samples

COOKIE = "vx_session"
AUDIO_TYPE = "audio/wav"
AUDIO_CACHE = "no-store"  # the same for every stimulus; nothing is kept in shared or disk caches
COMMON_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cross-Origin-Resource-Policy": "same-origin",
}
PAGE_CSP = "frame-ancestors 'none'"  # the page's own policy is in its <meta>; this part only works as a header
OPERATOR_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"
PROXY_HEADERS = ("forwarded", "x-forwarded-for", "x-real-ip")
MAX_HEADER_BYTES = 16 * 1024  # request line and headers together, as sent (h11 only caps what is still incomplete)


@dataclass(frozen=True)
class Limits:
    """Request limits: body size, and token buckets per rater session and per client address."""

    body_bytes: int = MAX_BODY_BYTES
    rater_burst: int = 200
    rater_per_s: float = 50.0
    anonymous_burst: int = 100  # requests without a valid session (links, refusals), per client address
    anonymous_per_s: float = 5.0


@dataclass
class Bucket:
    tokens: float
    at: float


@dataclass
class RateLimiter:
    """Token buckets by key (one lock; a bucket per rater or per address, so memory is bounded by them)."""

    burst: int
    per_s: float
    buckets: dict[str, Bucket] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str) -> None:
        now = time.monotonic()
        with self.lock:
            if len(self.buckets) > 100_000:
                self.buckets.clear()
            b = self.buckets.setdefault(key, Bucket(float(self.burst), now))
            b.tokens = min(float(self.burst), b.tokens + (now - b.at) * self.per_s)
            b.at = now
            if b.tokens < 1:
                raise RequestRefusedError(429, "rate_limited", f"too many requests; at most {self.per_s:g} per second are accepted")
            b.tokens -= 1


class Aggregator:
    """Aggregates the finished submissions in a background thread each time a rater finishes.

    ``aggregate`` is the ratings stage (given by the flow): it records the ``submission`` and
    ``aggregate`` receipts transactionally, as ``voxledger ratings aggregate`` does.
    """

    def __init__(self, served: ServedSet, aggregate: Callable[[list[Any]], dict[str, Any]] | None) -> None:
        self.served, self.aggregate = served, aggregate
        self.last: dict[str, Any] = {}
        self._wake = threading.Event()
        self._stop = False
        self._idle = threading.Event()
        self._idle.set()
        self._thread = threading.Thread(target=self._run, name="voxledger-aggregator", daemon=True)
        if aggregate is not None:
            self._thread.start()

    def kick(self) -> None:
        if self.aggregate is not None:
            self._idle.clear()
            self._wake.set()

    def wait_idle(self, timeout_s: float) -> bool:
        return self._idle.wait(timeout_s)

    def stop(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)

    def _run(self) -> None:
        assert self.aggregate is not None
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stop:
                return
            files = self.served.finished_submissions()
            try:
                self.last = {"files": len(files), **self.aggregate(files)} if files else {}
            except VoxledgerError as exc:
                self.last = {"files": len(files), "error": str(exc)}
            except Exception as exc:  # noqa: BLE001  (the server keeps collecting; the operator page shows it)
                self.last = {"files": len(files), "error": f"{type(exc).__name__}: {exc}"}
            if not self._wake.is_set():
                self._idle.set()


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _is_loopback(request: Request) -> bool:
    try:
        local = ipaddress.ip_address(_client(request)).is_loopback
    except ValueError:
        return False
    return local and not any(h in request.headers for h in PROXY_HEADERS)  # a reverse proxy connects from loopback too


def _error(exc: RequestRefusedError, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "1"} if exc.status == 429 else {}
    return JSONResponse({"error": str(exc), "code": exc.code, **extra}, status_code=exc.status, headers=headers)


class ServerApp:
    """The routes over one served set; ``app`` is the ASGI application."""

    def __init__(
        self,
        served: ServedSet,
        *,
        aggregate: Callable[[list[Any]], dict[str, Any]] | None = None,
        limits: Limits | None = None,
        secure_cookie: bool = False,
    ) -> None:
        self.served, self.limits, self.secure_cookie = served, limits or Limits(), secure_cookie
        self.rater_limit = RateLimiter(self.limits.rater_burst, self.limits.rater_per_s)
        self.anonymous_limit = RateLimiter(self.limits.anonymous_burst, self.limits.anonymous_per_s)
        self.aggregator = Aggregator(served, aggregate)
        self.refused: dict[str, int] = {}
        self._audio: dict[str, bytes] = {}
        self._lock = threading.Lock()  # one journal writer: requests are applied one at a time
        routes = [
            Route("/r/{link_id}/{secret}", self.link, methods=["GET"]),
            Route("/t", self.page, methods=["GET"]),
            Route("/a/{opaque}", self.audio, methods=["GET", "HEAD"]),
            Route("/api/events", self.events, methods=["POST"]),
            Route("/api/finish", self.finish, methods=["POST"]),
            Route("/operator", self.operator, methods=["GET"]),
            Route("/operator.json", self.operator_json, methods=["GET"]),
        ]
        self.app = Starlette(routes=routes, exception_handlers={404: self.not_found, 405: self.not_found})
        self.app.add_middleware(_Headers)
        self.app.add_middleware(_HeaderCap)
        self.aggregator.kick()  # submissions finished before a restart are aggregated again (a cache hit when unchanged)

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return JSONResponse({"error": "not found", "code": "not_found"}, status_code=404)

    def _refused(self, request: Request, exc: RequestRefusedError, **extra: Any) -> JSONResponse:
        with self._lock:
            self.refused[exc.code] = self.refused.get(exc.code, 0) + 1
        return _error(exc, **extra)

    def _session(self, request: Request) -> Any:
        try:
            row = self.served.rater_for(request.cookies.get(COOKIE))
        except RequestRefusedError:
            self.anonymous_limit.take(_client(request))
            raise
        self.rater_limit.take(row.rater_id)
        return row

    async def link(self, request: Request) -> Response:
        try:
            self.anonymous_limit.take(_client(request))
            with self._lock:
                login = self.served.login(
                    request.path_params["link_id"], request.path_params["secret"], request.headers.get("user-agent", "")
                )
        except RequestRefusedError as exc:
            return self._refused(request, exc)
        response = RedirectResponse("/t", status_code=303)
        response.set_cookie(COOKIE, login.cookie, httponly=True, samesite="strict", secure=self.secure_cookie, path="/")
        return response

    async def page(self, request: Request) -> Response:
        try:
            row = self._session(request)
            with self._lock:
                page = self.served.open_page(row.rater_id)
                html = render_served_page(self.served.page_document(row.rater_id), page, self.served.resume_state(row.rater_id))
        except RequestRefusedError as exc:
            return self._refused(request, exc)
        return HTMLResponse(html, headers={"Cache-Control": "no-store", "Content-Security-Policy": PAGE_CSP})

    async def audio(self, request: Request) -> Response:
        try:
            row = self._session(request)
            data = self._audio_bytes(self.served.audio_sha256(row.rater_id, request.path_params["opaque"]))
            span = _byte_range(request.headers.get("range"), len(data))
        except RequestRefusedError as exc:
            if exc.status == 416:
                return Response(status_code=416, headers={"Content-Range": f"bytes */{exc.code}", "Cache-Control": AUDIO_CACHE})
            return self._refused(request, exc)
        start, end = span or (0, len(data))
        headers = {"Accept-Ranges": "bytes", "Cache-Control": AUDIO_CACHE, "Content-Length": str(end - start)}
        status = 200
        if span is not None:
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{len(data)}"
        body = b"" if request.method == "HEAD" else data[start:end]
        return Response(body, status_code=status, media_type=AUDIO_TYPE, headers=headers)

    def _audio_bytes(self, sha256: str) -> bytes:
        data = self._audio.get(sha256)
        if data is None:
            data = self.served.home.blobs.get_bytes(sha256)  # verified against its digest on first read
            self._audio[sha256] = data
        return data

    async def _body(self, request: Request, model: type[EventIn] | type[FinishIn]) -> Any:
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
            raise refuse(415, "invalid", "send the body as application/json")
        origin = request.headers.get("origin")
        if origin is not None and origin.split("://", 1)[-1] != request.headers.get("host"):
            raise refuse(403, "cross_origin", f"requests from {origin[:80]} are not accepted")
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limits.body_bytes):
            raise refuse(413, "too_large", f"request body of {declared[:20]} bytes; at most {self.limits.body_bytes} are accepted")
        data = b""
        async for chunk in request.stream():
            data += chunk
            if len(data) > self.limits.body_bytes:
                raise refuse(413, "too_large", f"request body over {self.limits.body_bytes} bytes")
        return parse_body(data, model)

    async def events(self, request: Request) -> Response:
        rater = None
        try:
            rater = self._session(request).rater_id
            ev = await self._body(request, EventIn)
            with self._lock:
                row = self.served.rater_for(request.cookies.get(COOKIE))  # revoked while the body arrived?
                next_seq = self.served.record(row, ev)
        except RequestRefusedError as exc:
            extra = {"next_seq": self.served.states[rater].next_seq} if rater and exc.code in ("replay", "out_of_order") else {}
            return self._refused(request, exc, **extra)
        return JSONResponse({"ok": True, "next_seq": next_seq})

    async def finish(self, request: Request) -> Response:
        try:
            row = self._session(request)
            body = await self._body(request, FinishIn)
            with self._lock:
                path = self.served.finish(row, body.page)
        except RequestRefusedError as exc:
            return self._refused(request, exc)
        self.aggregator.kick()
        return JSONResponse({"ok": True, "submission": path.name})

    def status(self) -> dict[str, Any]:
        """Progress and screening per rater (what the operator page shows)."""
        with self._lock:
            counts = self.served.store.counts()
            rows = {r.rater_id: r for r in self.served.store.raters()}
            raters = [self._rater_status(rid, state, rows[rid], counts.get(rid, (0, 0))) for rid, state in self.served.states.items()]
        return {
            "packet_set": self.served.packet_set_id,
            "raters": raters,
            "aggregate": self.aggregator.last,
            "refused": dict(self.refused),
        }

    def _rater_status(self, rid: str, state: Any, row: Any, counts: tuple[int, int]) -> dict[str, Any]:
        events = self.served.store.events(rid)
        log = tuple(LogEvent(t_ms=e.t_ms, event=e.event, trial=e.trial, stimulus=e.stimulus, detail=e.detail) for e in events)  # type: ignore[arg-type]
        heard = {s for (t, st, _c) in state.answers for s in needed_samples(state.packet.trials[t], st)}
        checks = self.served.protocol.checks
        verdict = check_log(log, state.packet.durations_s, heard, checks)
        screened = next((s for s in self.aggregator.last.get("screening", []) if s["rater_id"] == rid), None)
        return {
            "rater_id": rid,
            "link": "revoked" if row.revoked else "active" if row.link_id else "none",
            "trials": len(state.trial_ids),
            "on_screen": state.index + 1,
            "complete": sum(state.complete(t) for t in state.packet.manifest.trials),
            "answers": counts[1],
            "events": counts[0],
            "finished": state.finished,
            "log_plausible": verdict.plausible,
            "log_flags": list(verdict.flags),
            "screening": None if screened is None else {"included": screened["included"], "reasons": screened["reasons"]},
        }

    async def operator(self, request: Request) -> Response:
        if not _is_loopback(request):
            return JSONResponse({"error": "not found", "code": "not_found"}, status_code=404)
        return HTMLResponse(operator_html(self.status()), headers={"Cache-Control": "no-store", "Content-Security-Policy": OPERATOR_CSP})

    async def operator_json(self, request: Request) -> Response:
        if not _is_loopback(request):
            return JSONResponse({"error": "not found", "code": "not_found"}, status_code=404)
        return JSONResponse(self.status(), headers={"Cache-Control": "no-store"})


class _HeaderCap:
    """Refuse (431) a request whose request line and headers exceed ``MAX_HEADER_BYTES``.

    uvicorn's h11 limit applies only while a head is still arriving: a 17-64 KiB head that comes in
    one read is parsed whole and would pass, so the cap is applied here to every request.
    """

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            size = head_bytes(scope)
            if size > MAX_HEADER_BYTES:
                body = {"error": f"request line and headers are {size} bytes; at most {MAX_HEADER_BYTES} are accepted", "code": "too_large"}
                await JSONResponse(body, status_code=431, headers=COMMON_HEADERS)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def head_bytes(scope: Any) -> int:
    """The size of a request's line and headers as HTTP/1.1 writes them (``name: value\r\n`` each)."""
    line = len(scope.get("method", "")) + len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + 12
    return line + sum(len(k) + len(v) + 4 for k, v in scope.get("headers", []))


class _Headers:
    """The same security headers on every response, and no ``Server`` header (uvicorn's is off)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def send_with_headers(message: Any) -> None:
            if message["type"] == "http.response.start":
                names = {k.lower() for k, _ in message.get("headers", [])}
                extra = [(k.lower().encode(), v.encode()) for k, v in COMMON_HEADERS.items() if k.lower().encode() not in names]
                message["headers"] = [*message.get("headers", []), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _byte_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The [start, end) of a single ``bytes=`` range; None (the whole file) when absent, malformed or
    multi-range (RFC 9110 lets a server ignore those); a 416 when unsatisfiable."""
    if not header:
        return None
    unit, _, spec = header.partition("=")
    if unit.strip() != "bytes" or "," in spec:
        return None
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            start, end = max(0, size - n), size
        else:
            start = int(first)
            end = min(size, int(last) + 1) if last else size
    except ValueError:
        return None
    if start >= size or start >= end or start < 0:
        raise RequestRefusedError(416, str(size), "range not satisfiable")
    return start, end


def operator_html(status: dict[str, Any]) -> str:
    """The operator page: one row per rater, refreshed every 5 s."""
    import html

    head = "<tr><th>rater</th><th>link</th><th>on screen</th><th>rated</th><th>answers</th><th>events</th><th>finished</th><th>log</th><th>screening</th></tr>"
    rows = []
    for r in status["raters"]:
        log = "plausible so far" if r["log_plausible"] else "; ".join(r["log_flags"])
        scr = (
            "-"
            if r["screening"] is None
            else ("included" if r["screening"]["included"] else "excluded: " + "; ".join(r["screening"]["reasons"]))
        )
        cells = [r["rater_id"], r["link"], f"{r['on_screen']} / {r['trials']}", str(r["complete"]), str(r["answers"]), str(r["events"]),
                 "yes" if r["finished"] else "no", log, scr]  # fmt: skip
        rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    agg = status["aggregate"]
    summary = (
        f"aggregate {agg.get('receipt', '')[:12]}: {agg.get('accepted', 0)} accepted, {len(agg.get('rejections', []))} refused"
        if agg.get("receipt")
        else agg.get("error", "no submission aggregated yet")
    )
    refused = ", ".join(f"{k}: {v}" for k, v in sorted(status["refused"].items())) or "none"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="5">'
        f"<title>voxledger: served packet set {html.escape(status['packet_set'][:12])}</title>"
        "<style>body{font-family:system-ui,sans-serif;margin:1.5rem}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:left}</style></head><body>"
        f"<h1>Packet set {html.escape(status['packet_set'][:12])}</h1><table>{head}{''.join(rows)}</table>"
        f"<p>{html.escape(summary)}</p><p>refused requests: {html.escape(refused)}</p></body></html>"
    )


def run_server(server: ServerApp, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Bind ``host:port`` (0: any free port), announce the address, serve until SIGINT or SIGTERM."""
    import socket

    import uvicorn

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # accepted sockets inherit it: small replies go out at once
    try:
        sock.bind((host, port))
        sock.listen(1024)  # connections queue from the moment the address is announced
    except OSError as exc:
        sock.close()
        raise VoxledgerError(f"cannot listen on {host}:{port}: {exc.strerror or exc}; choose another --port or --host") from None
    bound = sock.getsockname()[1]
    config = uvicorn.Config(
        server.app,
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_keep_alive=5,
        h11_max_incomplete_event_size=MAX_HEADER_BYTES,  # a head still arriving; _HeaderCap checks a whole one
        limit_concurrency=1000,
        lifespan="off",
    )
    announce(f"http://{host if ':' not in host else f'[{host}]'}:{bound}")
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        server.aggregator.stop()
        server.served.close()
        sock.close()
