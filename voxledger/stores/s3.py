"""Content-addressed blob store on an S3-compatible object store, shared by several machines.

Same layout as the local store under an optional prefix: objects at ``objects/sha256/ab/cdef...``
and receipt markers at ``receipts/ab/<id>``. Writes never overwrite: they carry
``If-None-Match: *`` (a conditional write, answered 412 when the key exists); a server that
answers 501 NotImplemented is remembered and written check-then-put, then read back and
verified. An object that already exists is verified, never rewritten. Large files go up as a
multipart upload to the final key, hashed while uploading; the object only becomes visible when
the upload completes, so a killed writer leaves no partial object (only an incomplete upload,
which is aborted on error and otherwise expired by a bucket lifecycle rule); its parts go up
in parallel. ``existing`` answers "which of these digests are shared?" from listings that jump
over the key space (one request per 1,000 keys or per wanted digest, whichever is fewer), and
``journal/`` holds append-only segments naming the receipts each push added, so a reader that
remembers where it stopped lists only what is new.

Longer than 500 lines on purpose: it is one class, the S3 side of the ``BlobStore`` protocol, whose
conditional writes, multipart uploads, listings and verification share one client and its retry
rules; split, each half would import the other.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]

from voxledger.schemas.canonical import canonical_bytes, is_sha256_hex
from voxledger.schemas.errors import BlobMissingError, DigestMismatchError, VoxledgerError
from voxledger.settings import S3Settings, load_settings
from voxledger.stores.hashing import CHUNK_BYTES, sha256_stream

MIB = 1024 * 1024
MIN_PART_BYTES = 5 * MIB  # S3 rejects smaller parts (except the last one)
MAX_PARTS = 10_000
_MISSING = {"404", "NoSuchKey", "NotFound"}
_EXISTS = {"412", "PreconditionFailed"}
_CONFLICT = {"409", "ConditionalRequestConflict"}  # another conditional write to the key in flight
_UNSUPPORTED = {"501", "NotImplemented"}
JOURNAL_FORMAT = "voxledger-journal/1"
LIST_PAGE_KEYS = 1000  # the most keys one ListObjectsV2 call returns


@dataclass(frozen=True)
class S3Config:
    """Where the shared store lives. Credentials come from the standard AWS chain, never from here."""

    bucket: str
    prefix: str = ""
    endpoint_url: str | None = None
    region: str | None = None
    part_size_bytes: int = 8 * MIB
    multipart_threshold_bytes: int = 16 * MIB
    conditional_writes: bool = True
    max_workers: int = 16

    def __post_init__(self) -> None:
        if not self.bucket:
            raise VoxledgerError("S3 bucket is empty; set VOXLEDGER_S3_BUCKET to the shared bucket's name")
        if self.part_size_bytes < MIN_PART_BYTES:
            raise VoxledgerError(
                f"part_size_bytes={self.part_size_bytes} is below the S3 minimum of {MIN_PART_BYTES}; "
                "raise VOXLEDGER_S3_PART_SIZE_MIB to 5 or more"
            )
        if self.max_workers < 1:
            raise VoxledgerError(f"max_workers={self.max_workers} must be at least 1; set VOXLEDGER_S3_WORKERS to 1 or more")
        if self.prefix and not self.prefix.endswith("/"):
            object.__setattr__(self, "prefix", self.prefix + "/")

    @classmethod
    def from_settings(cls, s3: S3Settings) -> S3Config:
        """The store that ``VOXLEDGER_S3_*`` describe (see docs/settings.md and docs/shared-storage.md)."""
        return cls(
            bucket=s3.bucket,
            prefix=s3.prefix,
            endpoint_url=s3.endpoint_url or None,
            region=s3.region or None,
            part_size_bytes=s3.part_size_mib * MIB,
            conditional_writes=s3.conditional_writes,
            max_workers=s3.workers,
        )

    @classmethod
    def from_env(cls) -> S3Config:
        """Read ``VOXLEDGER_S3_*`` now; raises SettingsError naming a variable with a bad value."""
        return cls.from_settings(load_settings().s3)


def _code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    return str(err.get("Code") or exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


MAX_RESUMES = 8
"""How many times one download is resumed (a ranged GET from the byte it broke off at) before giving up."""
RESUME_BACKOFF_S = (0.05, 2.0)
"""The wait before resume k: ``min(cap, base * 2**k)`` seconds (9.1 s over all eight resumes)."""


def _read_broke_off(exc: BaseException) -> bool:
    """A body read that ended early or stalled: the connection, not the object, failed."""
    from botocore.exceptions import ConnectionClosedError, IncompleteReadError, ReadTimeoutError, ResponseStreamingError
    from urllib3.exceptions import HTTPError as Urllib3Error

    return isinstance(
        exc,
        (IncompleteReadError, ResponseStreamingError, ReadTimeoutError, ConnectionClosedError, Urllib3Error, ConnectionError, TimeoutError),
    )


class _VerifyingStream(io.RawIOBase):
    """Reads a response body and, on reaching its end, raises DigestMismatchError if bytes differ.

    A body that breaks off (truncated, reset, stalled) is resumed with ``reopen(offset)``, a
    ranged GET from the first byte not yet received, so progress is kept and the digest still
    covers every byte exactly once; ``resumes`` counts them.
    """

    def __init__(self, body: Any, sha256: str, where: str, reopen: Callable[[int], Any] | None = None) -> None:
        self._body: Any = body
        self._expected, self._where, self._reopen = sha256, where, reopen
        self._h = hashlib.sha256()
        self._checked = False
        self.offset = 0
        self.resumes = 0

    def readable(self) -> bool:
        return True

    def _read(self, n: int) -> bytes:
        while True:
            try:
                if self._body is None:
                    self._body = self._reopen(self.offset)  # type: ignore[misc]
                chunk: bytes = self._body.read(n)
                return chunk
            except Exception as exc:  # noqa: BLE001  (classified: only a broken-off read is resumed)
                if self._reopen is None or not _read_broke_off(exc):
                    raise
                if self.resumes >= MAX_RESUMES:
                    raise VoxledgerError(
                        f"download of {self._where} broke off {self.resumes + 1} times (last at byte {self.offset:,}: "
                        f"{type(exc).__name__}); the network or the server is failing, retry later"
                    ) from exc
                self.resumes += 1
                base, cap = RESUME_BACKOFF_S
                time.sleep(min(cap, base * 2**self.resumes))
                if self._body is not None:
                    self._body.close()
                self._body = None

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        chunk = self._read(len(buffer))
        n = len(chunk)
        if n:
            memoryview(buffer)[:n] = chunk
            self._h.update(chunk)
            self.offset += n
        elif not self._checked:
            self._checked = True
            actual = self._h.hexdigest()
            if actual != self._expected:
                raise DigestMismatchError(
                    f"object {self._expected} at {self._where} is corrupt: its bytes hash to {actual}; "
                    "restore it from a machine that holds the original (push_to) or delete the key"
                )
        return n

    def close(self) -> None:
        if self._body is not None:
            self._body.close()
        super().close()


class S3BlobStore:
    """Blob store in an S3 bucket: the same calls as ``LocalBlobStore``, plus receipt markers."""

    def __init__(self, config: S3Config, *, client: Any = None) -> None:
        self.config = config
        self.client = client or boto3.session.Session().client(
            "s3",
            endpoint_url=config.endpoint_url,
            region_name=config.region,
            config=Config(
                retries={"max_attempts": 5, "mode": "standard"},
                connect_timeout=10,
                read_timeout=60,
                max_pool_connections=config.max_workers + 4,  # one connection per transfer thread
            ),
        )
        self._conditional = config.conditional_writes
        self.url = f"s3://{config.bucket}/{config.prefix}"

    @classmethod
    def from_env(cls) -> S3BlobStore:
        """A store configured from ``VOXLEDGER_S3_*`` and the standard AWS credential variables."""
        return cls(S3Config.from_env())

    # ---- keys and low-level calls -------------------------------------------------------------
    def key_of(self, sha256: str) -> str:
        """Object key of a digest (it may not exist)."""
        if not is_sha256_hex(sha256):
            raise VoxledgerError(f"{sha256!r} is not a sha256 digest: expected 64 lower-case hex characters")
        return f"{self.config.prefix}objects/sha256/{sha256[:2]}/{sha256[2:]}"

    def _call(self, op: str, **kw: Any) -> Any:
        """Call the client; turn transport and server errors into VoxledgerError naming the key."""
        try:
            return getattr(self.client, op)(Bucket=self.config.bucket, **kw)
        except ClientError as exc:
            if _code(exc) in _MISSING | _EXISTS | _CONFLICT | _UNSUPPORTED:
                raise
            raise VoxledgerError(
                f"S3 {op} on s3://{self.config.bucket}/{kw.get('Key', '')} failed ({_code(exc)}): {exc}; "
                "check VOXLEDGER_S3_BUCKET, the endpoint and the credentials"
            ) from exc
        except BotoCoreError as exc:
            raise VoxledgerError(
                f"S3 {op} at {self.config.endpoint_url or 'the AWS default endpoint'} failed: {exc}; "
                "check VOXLEDGER_S3_ENDPOINT_URL and the AWS_* credential variables"
            ) from exc

    def _missing(self, sha256: str) -> BlobMissingError:
        return BlobMissingError(f"object {sha256} is not in the shared store {self.url}; push it with push_to")

    def _get(self, key: str, sha256: str) -> Any:
        try:
            return self._call("get_object", Key=key)
        except ClientError as exc:
            raise self._missing(sha256) from exc

    # ---- conditional writes -----------------------------------------------------------------
    def _commit(self, sha256: str, send: Callable[[dict[str, str]], object]) -> bool:
        """Run ``send`` as a create-only write; if the key exists, verify it instead.

        Returns True when this call wrote the object, False when it was already there.
        """
        for attempt in range(6):
            if not self._conditional:
                send({})  # check-then-put: the caller checked; re-read to be sure what is there
                self.verify(sha256)
                return True
            try:
                send({"IfNoneMatch": "*"})
                return True
            except ClientError as exc:
                code = _code(exc)
                if code in _EXISTS:
                    self.verify(sha256)
                    return False
                if code in _UNSUPPORTED:
                    self._conditional = False
                elif code in _CONFLICT:
                    time.sleep(0.05 * 2**attempt)
                else:
                    raise
        raise VoxledgerError(f"object {sha256} in {self.url}: conditional write kept conflicting; retry later")

    def put_bytes(self, data: bytes) -> str:
        """Store bytes; return their sha256. Idempotent; an existing object is verified."""
        sha256 = hashlib.sha256(data).hexdigest()
        if self.has(sha256):
            self.verify(sha256)
            return sha256
        key = self.key_of(sha256)
        self._commit(sha256, lambda extra: self._call("put_object", Key=key, Body=data, **extra))
        return sha256

    def put_file(self, path: Path, expected_sha256: str | None = None, *, known_absent: bool = False) -> str:
        """Upload a file (multipart above the threshold, hashed while uploading); return its sha256.

        The digest names the key, so it is computed first unless ``expected_sha256`` is given.
        Raises DigestMismatchError when the uploaded bytes do not hash to it (the file changed);
        the upload is then aborted and nothing becomes visible. When the object is already shared
        the file is not read again: the shared object is verified instead. ``known_absent`` skips
        the existence request when a listing just said the key is free (a racing writer is still
        caught: the write is create-only).
        """
        sha256 = expected_sha256 or sha256_stream(path)[0]
        if not known_absent and self.has(sha256):
            self.verify(sha256)
            return sha256
        size = path.stat().st_size
        if size <= self.config.multipart_threshold_bytes:
            data = path.read_bytes()
            self._check_upload(path, sha256, hashlib.sha256(data).hexdigest())
            self._commit(sha256, lambda extra: self._call("put_object", Key=self.key_of(sha256), Body=data, **extra))
        else:
            self._put_multipart(path, sha256, size)
        return sha256

    @staticmethod
    def _check_upload(path: Path, expected: str, actual: str) -> None:
        if actual != expected:
            raise DigestMismatchError(f"{path} changed while being stored: expected {expected}, read {actual}")

    def _put_multipart(self, path: Path, sha256: str, size: int) -> None:
        """Parts are read and hashed in order, uploaded by a bounded pool (at most ``max_workers``
        parts in memory at once); the object appears only at the completing call."""
        key = self.key_of(sha256)
        part_bytes = max(self.config.part_size_bytes, -(-size // MAX_PARTS))
        upload_id = self._call("create_multipart_upload", Key=key)["UploadId"]
        completed = False
        try:
            h = hashlib.sha256()
            futures: list[Future[Any]] = []
            with ThreadPoolExecutor(self.config.max_workers) as pool, open(path, "rb") as f:
                while chunk := f.read(part_bytes):
                    h.update(chunk)
                    if len(futures) >= self.config.max_workers:
                        futures[len(futures) - self.config.max_workers].result()  # bound the bytes held
                    n = len(futures) + 1
                    futures.append(pool.submit(self._call, "upload_part", Key=key, UploadId=upload_id, PartNumber=n, Body=chunk))
            parts = [{"ETag": fut.result()["ETag"], "PartNumber": n} for n, fut in enumerate(futures, 1)]
            self._check_upload(path, sha256, h.hexdigest())
            done = {"Parts": parts}
            completed = self._commit(
                sha256, lambda extra: self._call("complete_multipart_upload", Key=key, UploadId=upload_id, MultipartUpload=done, **extra)
            )
        finally:
            if not completed:
                self._abort(key, upload_id)

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            self.client.abort_multipart_upload(Bucket=self.config.bucket, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError):
            pass  # best effort while another error propagates; a lifecycle rule expires leftovers

    # ---- reads ----------------------------------------------------------------------------------
    def has(self, sha256: str) -> bool:
        """True when the object exists (use ``verify`` to check its bytes)."""
        try:
            self._call("head_object", Key=self.key_of(sha256))
        except ClientError:
            return False
        return True

    def open(self, sha256: str) -> BinaryIO:
        """Open an object for streaming; reading to the end verifies its digest."""
        key = self.key_of(sha256)
        body = self._get(key, sha256)["Body"]
        raw = _VerifyingStream(body, sha256, f"s3://{self.config.bucket}/{key}", self._resume_from(key))
        return io.BufferedReader(raw, CHUNK_BYTES)

    def _resume_from(self, key: str) -> Callable[[int], Any]:
        """A function giving the body of ``key`` from a byte offset on (a ranged GET), for resumes."""

        def reopen(offset: int) -> Any:
            try:
                return self.client.get_object(Bucket=self.config.bucket, Key=key, Range=f"bytes={offset}-")["Body"]
            except ClientError as exc:
                if _code(exc) in ("416", "InvalidRange"):  # it broke off after the last byte: nothing is left
                    return io.BytesIO(b"")
                raise

        return reopen

    def get_bytes(self, sha256: str) -> bytes:
        """Read a whole (small) object, verified."""
        with self.open(sha256) as f:
            return f.read()

    def verify(self, sha256: str) -> None:
        """Re-hash an object; raise BlobMissingError or DigestMismatchError naming both digests."""
        with self.open(sha256) as f:
            while f.read(CHUNK_BYTES):
                pass

    def size_of(self, sha256: str) -> int:
        """Size in bytes of a stored object."""
        try:
            return int(self._call("head_object", Key=self.key_of(sha256))["ContentLength"])
        except ClientError as exc:
            raise self._missing(sha256) from exc

    def _list(self, prefix: str, start_after: str = "") -> Iterator[str]:
        extra = {"StartAfter": start_after} if start_after else {}
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.config.bucket, Prefix=prefix, **extra)
        try:
            for page in pages:
                for item in page.get("Contents", []):
                    yield item["Key"][len(prefix) :]
        except (ClientError, BotoCoreError) as exc:
            raise VoxledgerError(f"listing {self.url}{prefix[len(self.config.prefix) :]} failed: {exc}") from exc

    def iter_digests(self) -> Iterator[str]:
        """Every object digest in the store (keys that are not ``ab/cdef...`` digests are skipped)."""
        for rest in self._list(f"{self.config.prefix}objects/sha256/"):
            digest = rest.replace("/", "", 1)
            if rest[2:3] == "/" and is_sha256_hex(digest):
                yield digest

    def export(self, sha256: str, dest: Path) -> None:
        """Copy an object out to ``dest`` (verified, atomic, refuses to overwrite)."""
        if dest.exists():
            raise VoxledgerError(f"{dest} exists; choose another destination (nothing overwritten)")
        tmp = dest.with_name(f".{dest.name}.tmp-{secrets.token_hex(4)}")
        try:
            with self.open(sha256) as src, open(tmp, "xb") as out:
                shutil.copyfileobj(src, out, CHUNK_BYTES)
                out.flush()
                os.fsync(out.fileno())
            os.link(tmp, dest)  # exclusive: fails rather than replace a file that appeared meanwhile
        except FileExistsError as exc:
            raise VoxledgerError(f"{dest} exists; choose another destination (nothing overwritten)") from exc
        finally:
            tmp.unlink(missing_ok=True)

    # ---- receipt markers --------------------------------------------------------------------
    def mark_receipt(self, rid: str) -> None:
        """List ``rid`` as a receipt (an empty object at ``receipts/ab/<id>``); idempotent."""
        key = f"{self.config.prefix}receipts/{rid[:2]}/{rid}"
        if not is_sha256_hex(rid):
            raise VoxledgerError(f"{rid!r} is not a receipt id (64 hex characters)")
        try:
            self._call("put_object", Key=key, Body=b"", **({"IfNoneMatch": "*"} if self._conditional else {}))
        except ClientError as exc:
            if _code(exc) in _UNSUPPORTED:
                self._conditional = False
                self._call("put_object", Key=key, Body=b"")
            elif _code(exc) not in _EXISTS | _CONFLICT:
                raise

    def receipt_ids(self) -> list[str]:
        """Every receipt id listed in the shared store, sorted (deterministic ingest)."""
        found = (r.partition("/")[2] for r in self._list(f"{self.config.prefix}receipts/"))
        return sorted(rid for rid in found if is_sha256_hex(rid))

    # ---- bulk existence -----------------------------------------------------------------------
    def existing(self, digests: Iterable[str]) -> set[str]:
        """Which of ``digests`` the store holds, answered by listings rather than one HEAD each.

        The wanted digests are sorted and split into contiguous runs, one per worker. Each run
        lists from just before its next unanswered digest; a page (up to 1,000 keys) answers
        every wanted digest up to its last key, then the listing jumps to the next unanswered
        one. Requests are thus about min(wanted, keys in range / 1,000).
        """
        wanted = sorted(set(digests))
        for d in wanted:
            self.key_of(d)  # refuse malformed digests before any request
        if not wanted:
            return set()
        n_runs = min(self.config.max_workers, -(-len(wanted) // 64))
        size = -(-len(wanted) // n_runs)
        runs = [wanted[i : i + size] for i in range(0, len(wanted), size)]
        found: set[str] = set()
        with ThreadPoolExecutor(len(runs)) as pool:
            for part in pool.map(self._existing_run, runs):
                found |= part
        return found

    def _existing_run(self, run: list[str]) -> set[str]:
        found: set[str] = set()
        i = 0
        while i < len(run):
            start = self.key_of(run[i])[:-1]  # sorts just before the wanted key
            page = self._call("list_objects_v2", Prefix=f"{self.config.prefix}objects/sha256/", StartAfter=start, MaxKeys=LIST_PAGE_KEYS)
            keys = {item["Key"] for item in page.get("Contents", [])}
            last = max(keys) if page.get("IsTruncated") and keys else None
            while i < len(run) and (last is None or self.key_of(run[i]) <= last):
                if self.key_of(run[i]) in keys:
                    found.add(run[i])
                i += 1
        return found

    # ---- journal --------------------------------------------------------------------------------
    def append_journal(self, rids: list[str], now_ns: int | None = None) -> str:
        """Write one create-only journal segment naming ``rids``; return its key.

        The key is ``journal/<writer's clock, ns, 20 digits>-<sha256 of the segment>``: it sorts
        by time, so a reader lists from where it stopped, and it names its own digest, so every
        segment read is verified.
        """
        for rid in rids:
            if not is_sha256_hex(rid):
                raise VoxledgerError(f"{rid!r} is not a receipt id (64 hex characters)")
        data = canonical_bytes({"format": JOURNAL_FORMAT, "receipts": sorted(set(rids))})
        stamp = time.time_ns() if now_ns is None else now_ns
        key = f"{self.config.prefix}journal/{stamp:020d}-{hashlib.sha256(data).hexdigest()}"
        try:
            self._call("put_object", Key=key, Body=data, **({"IfNoneMatch": "*"} if self._conditional else {}))
        except ClientError as exc:
            if _code(exc) in _UNSUPPORTED:
                self._conditional = False
                self._call("put_object", Key=key, Body=data)
            elif _code(exc) not in _EXISTS | _CONFLICT:  # same bytes at the same instant: already there
                raise
        return key[len(self.config.prefix) :]

    def journal_after(self, start_after: str = "") -> list[str]:
        """Journal segment keys (relative to the prefix, sorted) that sort after ``start_after``."""
        prefix = f"{self.config.prefix}journal/"
        after = f"{self.config.prefix}{start_after}" if start_after else ""
        return [f"journal/{rest}" for rest in self._list(prefix, after)]

    def read_journal(self, name: str) -> list[str]:
        """The receipt ids of one segment, verified against the digest in its name."""
        expected = name.rpartition("-")[2]
        if not name.startswith("journal/") or not is_sha256_hex(expected):
            raise VoxledgerError(f"{name!r} is not a journal segment key (journal/<ns>-<sha256>)")
        key = f"{self.config.prefix}{name}"
        try:
            body = self._call("get_object", Key=key)["Body"]
        except ClientError as exc:
            raise BlobMissingError(f"journal segment {name} is not in {self.url}; it was listed a moment ago, so retry") from exc
        with io.BufferedReader(
            _VerifyingStream(body, expected, f"s3://{self.config.bucket}/{key}", self._resume_from(key)), CHUNK_BYTES
        ) as f:
            doc = json.loads(f.read())
        rids = doc.get("receipts") if isinstance(doc, dict) and doc.get("format") == JOURNAL_FORMAT else None
        if not isinstance(rids, list) or not all(isinstance(r, str) and is_sha256_hex(r) for r in rids):
            raise VoxledgerError(f"journal segment {name} in {self.url} is not a {JOURNAL_FORMAT} document; delete the key")
        return rids
