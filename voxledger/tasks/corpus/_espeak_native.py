"""The libespeak-ng C library behind a pristine-state fork server.

libespeak-ng keeps synthesis state in C statics that survive between utterances and even across
``espeak_Terminate``/``espeak_Initialize`` (for example the pitch-flutter index in
``wavegen.c``), so the same text synthesized twice in one process gives different samples and
different lengths. Reloading the library is not possible from ctypes either. So the library lives
in one helper process that initializes it once and then never synthesizes itself: every request
is served by a ``fork()`` of that pristine state, which reseeds espeak's random generator (used
for breath noise; ``espeak_Initialize`` seeds it from the clock), synthesizes one utterance,
sends it back and exits. Same request -> same bytes, at ~10 ms per call. The helper is single-threaded, which
makes ``fork()`` safe; the caller's process may have any number of threads.

Wire format: one JSON request per line on the helper's stdin; each reply on its stdout is
``kind (1 byte, b"K" ok | b"E" error) + length (uint64 LE) + body``. An ok body is
``header length (uint32 LE) + JSON header + int16 LE PCM``.
"""

from __future__ import annotations

import ctypes
import json
import os
import struct
import sys
from typing import Any, BinaryIO

import espeakng_loader

AUDIO_OUTPUT_SYNCHRONOUS = 2
INITIALIZE_PHONEME_EVENTS = 0x0001
EVENT_LIST_TERMINATED = 0
EVENT_PHONEME = 7
CHARS_UTF8 = 1
PARAM_RATE = 1
PARAM_PITCH = 3
REPLY_HEAD = struct.Struct("<cQ")
# espeak_Initialize seeds the generator behind breath noise and klatt voices with time(NULL);
# each child reseeds it with this constant (the value espeak-ng's own deterministic mode uses).
RAND_SEED = 1


class _EventId(ctypes.Union):
    _fields_ = [("number", ctypes.c_int), ("name", ctypes.c_char_p), ("string", ctypes.c_char * 8)]


class _Event(ctypes.Structure):
    """``espeak_EVENT`` from speak_lib.h (API revision 12)."""

    _fields_ = [
        ("type", ctypes.c_int),
        ("unique_identifier", ctypes.c_uint),
        ("text_position", ctypes.c_int),
        ("length", ctypes.c_int),
        ("audio_position", ctypes.c_int),
        ("sample", ctypes.c_int),
        ("user_data", ctypes.c_void_p),
        ("id", _EventId),
    ]


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.POINTER(_Event))
_pcm: list[bytes] = []
_events: list[tuple[str, int]] = []


@_CALLBACK  # type: ignore[untyped-decorator]
def _on_synth(wav: Any, n_samples: int, events: Any) -> int:
    if wav and n_samples > 0:
        _pcm.append(ctypes.string_at(wav, 2 * n_samples))
    i = 0
    while events[i].type != EVENT_LIST_TERMINATED:
        if events[i].type == EVENT_PHONEME:
            _events.append((events[i].id.string.decode("utf-8", "replace"), events[i].sample))
        i += 1
    return 0


def _open_library() -> tuple[ctypes.CDLL, dict[str, Any]]:
    lib = ctypes.CDLL(espeakng_loader.get_library_path())
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_Info.restype = ctypes.c_char_p
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_ng_SetRandSeed.argtypes = [ctypes.c_long]
    lib.espeak_Synth.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_uint,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.c_uint,
        ctypes.c_void_p,
        ctypes.c_void_p,
    ]
    data_path = espeakng_loader.get_data_path().encode()
    rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path, INITIALIZE_PHONEME_EVENTS)
    if rate <= 0:
        raise RuntimeError(f"espeak_Initialize failed ({rate}) with data path {data_path!r}")
    lib.espeak_SetSynthCallback(_on_synth)
    info = {"version": lib.espeak_Info(None).decode(), "sample_rate_hz": rate}
    return lib, info


def _synthesize_once(lib: ctypes.CDLL, request: dict[str, Any]) -> bytes:
    """Synthesize one request (in a forked child); return the ok body."""
    lib.espeak_ng_SetRandSeed(RAND_SEED)
    voice = request["voice"]
    status = lib.espeak_SetVoiceByName(voice.encode())
    if status != 0:
        raise ValueError(f"espeak-ng has no voice {voice!r} (status {status})")
    lib.espeak_SetParameter(PARAM_RATE, int(request["rate_wpm"]), 0)
    lib.espeak_SetParameter(PARAM_PITCH, int(request["pitch"]), 0)
    text = request["text"].encode() + b"\0"
    status = lib.espeak_Synth(text, len(text), 0, 0, 0, CHARS_UTF8, None, None)
    if status != 0 or lib.espeak_Synchronize() != 0:
        raise RuntimeError(f"espeak_Synth failed (status {status})")
    header = json.dumps({"events": _events}).encode()
    return struct.pack("<I", len(header)) + header + b"".join(_pcm)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


def _forked_reply(lib: ctypes.CDLL, info: dict[str, Any], request: dict[str, Any]) -> bytes:
    if request.get("op") == "info":
        return b"K" + json.dumps(info).encode()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: start from the pristine parent state, answer once, always exit
        os.close(read_fd)
        reply = b"E" + f"synthesis failed for {request}".encode()
        try:
            reply = b"K" + _synthesize_once(lib, request)
        except (ValueError, RuntimeError, KeyError, TypeError, UnicodeError) as exc:
            reply = b"E" + f"{type(exc).__name__}: {exc}".encode()
        finally:
            _write_all(write_fd, reply)
            os._exit(0)
    os.close(write_fd)
    reply = _read_all(read_fd)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    if status != 0 or not reply:
        return b"E" + f"synthesis child died (wait status {status})".encode()
    return reply


def serve(requests: BinaryIO | None = None) -> None:
    """Run the helper loop until stdin closes (entry point of the helper process)."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # anything the C library prints goes to stderr, never into the reply stream
    lib, info = _open_library()
    for line in requests or sys.stdin.buffer:
        reply = _forked_reply(lib, info, json.loads(line))
        _write_all(reply_fd, REPLY_HEAD.pack(reply[:1], len(reply) - 1) + reply[1:])


if __name__ == "__main__":
    serve()
