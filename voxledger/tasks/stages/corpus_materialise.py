"""Materialise ``wav.scp`` pipe commands: run each once, without a shell, into files and the store.

Kaldi recipes often write ``wav.scp`` lines such as ``rec1 sox /data/rec1.flac -t wav - |``:
the audio exists only as a command's output. voxledger refuses those lines when auditing (a
command's output has no stable identity). ``voxledger corpus materialise SRC --out DIR`` runs
every such command once and writes a copy of the data directory whose ``wav.scp`` names the files
it produced, and a receipt recording, per line, the exact argument vector, the program that ran
(its resolved path and sha256), and the digest, format and duration of what it wrote.

Commands run without a shell: the line is split with ``shlex`` and executed directly, in the
working directory given (by default the current one, where Kaldi runs them too). Shell syntax
(a second pipe, ``;``, ``&&``, redirections, backticks, ``$(...)``) is refused, naming the line:
write such a line as one program reading a file, or convert the audio yourself. A command's
standard output goes to a file as it arrives (never held in memory); standard input is empty.
A failure (program missing, non-zero exit, time-out, output that is not audio) stops the run
naming the file, the line and the fix; nothing is left under ``--out`` and no receipt is written.
"""

from __future__ import annotations

import json
import os
import secrets
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from voxledger.schemas.base import InputRef, utc_now
from voxledger.schemas.corpus import MaterialiseParameters, MaterialiseReceipt, MaterialiseResult
from voxledger.schemas.errors import CorpusError
from voxledger.stores.hashing import sha256_file
from voxledger.stores.home import Home
from voxledger.stores.trees import TREE_MEDIA_TYPE, put_tree
from voxledger.tasks.corpus.kaldi import is_kaldi_dir
from voxledger.tasks.processes import die_with_parent
from voxledger.tasks.receipting import artifact, build_receipt

SHELL_TOKENS = frozenset({"|", "||", "&", "&&", ";", ";;", ">", ">>", "<", "<<", "2>", "2>>", "&>", "2>&1", ">&2"})
FORMAT_SUFFIX = {"WAV": ".wav", "WAVEX": ".wav", "FLAC": ".flac", "OGG": ".ogg", "MP3": ".mp3", "AIFF": ".aiff"}
COMMANDS_MEDIA_TYPE = "application/vnd.voxledger.pipe-commands+jsonl"


@dataclass(frozen=True)
class MaterialiseOutcome:
    receipt_id: str
    receipt: MaterialiseReceipt
    out_dir: Path


def is_pipe(value: str) -> bool:
    """True for a ``wav.scp`` value that is a command whose standard output is the audio."""
    return value.rstrip().endswith("|")


def command_argv(value: str, where: str) -> list[str]:
    """The argument vector of a pipe value (``sox a.flac -t wav - |``), checked to need no shell.

    Raises:
        CorpusError: the line cannot be split, is empty, or uses shell syntax; names ``where``.
    """
    try:
        argv = shlex.split(value.rstrip()[:-1])
    except ValueError as exc:
        raise CorpusError(f"{where}: cannot split the command ({exc}); fix its quoting") from exc
    if not argv:
        raise CorpusError(f"{where}: the pipe command is empty; write the program and its arguments before the final '|'")
    bad = next((t for t in argv if t in SHELL_TOKENS or "`" in t or "$(" in t), None)
    if bad is not None:
        raise CorpusError(
            f"{where}: the command uses shell syntax ({bad!r}); voxledger runs commands without a shell: "
            "make it one program that writes the audio to its standard output (e.g. sox in.flac -t wav - |), "
            "or convert the audio to files yourself and point wav.scp at them"
        )
    return argv


def _split_dirs(src: Path) -> list[Path]:
    if is_kaldi_dir(src):
        return [src]
    dirs = sorted(p for p in src.iterdir() if p.is_dir() and is_kaldi_dir(p))
    if not dirs:
        raise CorpusError(f"{src} holds no wav.scp (nor do its sub-folders); give a Kaldi data directory")
    return dirs


def _safe_name(key: str, where: str) -> str:
    if not key or key in (".", "..") or "/" in key or "\x00" in key:
        raise CorpusError(f"{where}: recording id {key!r} cannot name a file; rename it in wav.scp (no '/', not '.' or '..')")
    return key


def _run(argv: list[str], cwd: Path, dest: Path, timeout_s: float, where: str) -> tuple[str, float]:
    """Run ``argv`` with stdout into ``dest``; return (the resolved program, seconds)."""
    program = shutil.which(argv[0], path=os.environ.get("PATH")) if "/" not in argv[0] else os.path.abspath(cwd / argv[0])
    if program is None or not os.access(program, os.X_OK):
        raise CorpusError(f"{where}: program {argv[0]!r} is not installed here (not on PATH); install it or convert the audio yourself")
    t0 = time.monotonic()
    with open(dest, "xb") as out:
        try:
            proc = subprocess.run(  # noqa: S603 - no shell: the vector was checked by command_argv
                [program, *argv[1:]],
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.PIPE,
                timeout=timeout_s,
                check=False,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - async-signal-safe: one prctl call
            )
        except subprocess.TimeoutExpired as exc:
            raise CorpusError(
                f"{where}: {argv[0]} ran past {timeout_s:g} s and was stopped; raise --timeout-s or check the command"
            ) from exc
        out.flush()
        os.fsync(out.fileno())
    if proc.returncode != 0:
        tail = proc.stderr.decode("utf-8", "replace").strip()[-300:]
        raise CorpusError(
            f"{where}: {argv[0]} exited with status {proc.returncode}: {tail or '(no error output)'}; fix the command and run again"
        )
    return program, time.monotonic() - t0


def materialise_pipes_fn(
    home: Home, src: Path, out_dir: Path, *, cwd: Path | None = None, timeout_s: float = 600.0, flow: str = "cli"
) -> MaterialiseOutcome:
    """Run every pipe command of the Kaldi data directory ``src`` into a copy of it at ``out_dir``.

    Raises:
        CorpusError: ``out_dir`` exists, or a line fails (see the module docstring); nothing is written then.
    """
    started = utc_now()
    src, cwd = src.absolute(), (cwd or Path.cwd()).absolute()
    if out_dir.exists():
        raise CorpusError(f"{out_dir} exists; choose a new --out folder (nothing is overwritten)")
    splits = _split_dirs(src)
    tmp = out_dir.with_name(f".{out_dir.name}.tmp-{secrets.token_hex(4)}")
    tmp.mkdir(parents=True)
    records: list[dict[str, object]] = []
    seconds_each: list[float] = []
    scp_digests: list[str] = []
    try:
        for d in splits:
            rel = d.relative_to(src).as_posix() if d != src else "."
            target = tmp / rel
            target.mkdir(parents=True, exist_ok=True)
            for f in sorted(d.iterdir()):
                if f.is_file() and f.name != "wav.scp":
                    shutil.copyfile(f, target / f.name)
            scp_digests.append(home.blobs.put_file(d / "wav.scp"))
            lines = []
            for lineno, raw in enumerate((d / "wav.scp").read_text(encoding="utf-8").splitlines(), start=1):
                key, _, value = raw.strip().partition(" ")
                value = value.strip()
                where = f"{rel}/wav.scp:{lineno}"
                if not key or not is_pipe(value):
                    # a file path: kept, made absolute so it still names the same file from the new folder
                    lines.append(raw if not key or value.startswith("/") else f"{key} {(d / value).resolve()}")
                    continue
                argv = command_argv(value, where)
                name = _safe_name(key, where)
                (target / "materialised").mkdir(exist_ok=True)
                raw_out = target / "materialised" / f"{name}.out"
                program, seconds = _run(argv, cwd, raw_out, timeout_s, where)
                try:
                    info = sf.info(str(raw_out))
                except (sf.LibsndfileError, RuntimeError) as exc:
                    raise CorpusError(
                        f"{where}: {argv[0]} wrote {raw_out.stat().st_size} bytes that are not audio ({exc}); "
                        "make the command write WAV/FLAC to its standard output (e.g. sox ... -t wav -)"
                    ) from exc
                final = raw_out.with_suffix(FORMAT_SUFFIX.get(info.format, ".audio"))
                os.replace(raw_out, final)
                digest = home.blobs.put_file(final)
                records.append(
                    {
                        "split": rel,
                        "line": lineno,
                        "recording_id": key,
                        "argv": argv,
                        "cwd": str(cwd),
                        "program": program,
                        "program_sha256": sha256_file(program),
                        "output_sha256": digest,
                        "output_bytes": final.stat().st_size,
                        "format": info.format,
                        "sample_rate_hz": info.samplerate,
                        "channels": info.channels,
                        "frames": info.frames,
                        "seconds": round(seconds, 3),
                    }
                )
                seconds_each.append(seconds)
                lines.append(f"{key} materialised/{final.name}")
            (target / "wav.scp").write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        if not records:
            raise CorpusError(f"{src}: no wav.scp line is a pipe command; audit the folder as it is")
        tree_sha, manifest = put_tree(home.blobs, tmp, cache=home.stat_cache)
        commands_sha = home.blobs.put_bytes("".join(json.dumps(r, sort_keys=True) + "\n" for r in records).encode())
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    receipt = build_receipt(
        MaterialiseReceipt,
        flow=flow,
        task="materialise_pipes",
        started_at=started,
        subjects=[
            artifact(home.blobs, "data_dir", tree_sha, TREE_MEDIA_TYPE),
            artifact(home.blobs, "commands", commands_sha, COMMANDS_MEDIA_TYPE),
        ],
        inputs=[InputRef(role="wav_scp", sha256=s, ref="artifact") for s in sorted(set(scp_digests))],
        parameters=MaterialiseParameters(source_name=src.name, timeout_s=timeout_s),
        result=MaterialiseResult(n_commands=len(records), n_files=len(manifest.entries), seconds=round(sum(seconds_each), 3)),
    )
    return MaterialiseOutcome(home.record(receipt), receipt, out_dir)
