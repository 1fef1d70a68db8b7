"""Is a submission's presentation log what a person listening in real time would produce?

The token that seals a submission sits in the page, so a rater can write a log by hand. These
checks make a cheap forgery expensive, not impossible: a forger must also spend (or fake, with
consistent timestamps) the listening time the audio takes. Checked per submission:

- ``monotonic``: timestamps never go backwards (refused earlier, at file level);
- ``play_time``: every play that reaches ``ended`` lasted at least the sample's duration divided
  by the fastest allowed playback rate, less ``timing_slack_s``;
- ``orphan_ended``: an ``ended`` event follows a ``play`` of the same sample;
- ``total_listening``: the time spent playing is at least ``min_listening_fraction`` of the summed
  durations of the samples that had to be heard, divided by the fastest rate.

What a static page can and cannot prove is written down in ``docs/listening.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from voxledger.schemas.listening import LogEvent, SubmissionChecks
from voxledger.schemas.listening_receipts import LogCheck


@dataclass(frozen=True)
class Play:
    """One playback of one sample: from ``play`` to the ``ended``/``pause`` that closed it."""

    trial: str | None
    stimulus: str | None
    start_ms: int
    end_ms: int
    ended: bool


def plays(log: tuple[LogEvent, ...]) -> tuple[list[Play], int]:
    """Playback intervals in log order, and the number of ``ended`` events with no open play."""
    out: list[Play] = []
    open_play: LogEvent | None = None
    orphans = 0
    for e in log:
        if e.event == "play":
            if open_play is not None:  # a new play stops the previous one (the page pauses it first)
                out.append(Play(open_play.trial, open_play.stimulus, open_play.t_ms, e.t_ms, False))
            open_play = e
        elif e.event in ("ended", "pause"):
            same = open_play is not None and (open_play.trial, open_play.stimulus) == (e.trial, e.stimulus)
            if same and open_play is not None:
                out.append(Play(open_play.trial, open_play.stimulus, open_play.t_ms, e.t_ms, e.event == "ended"))
                open_play = None
            elif e.event == "ended":
                orphans += 1
    return out, orphans


def check_log(log: tuple[LogEvent, ...], durations_s: dict[str, float], heard: set[str], checks: SubmissionChecks) -> LogCheck:
    """Measure the log against the audio durations; ``heard`` are the samples that had to be played."""
    intervals, orphans = plays(log)
    rate, slack = checks.max_playback_rate, checks.timing_slack_s
    finished = [p for p in intervals if p.ended and p.stimulus in durations_s]
    fractions = [(p.end_ms - p.start_ms) / 1000 / durations_s[p.stimulus] for p in finished if durations_s[p.stimulus] > 0]  # type: ignore[index]
    short = [p for p in finished if (p.end_ms - p.start_ms) / 1000 < durations_s[p.stimulus] / rate - slack]  # type: ignore[index]
    listening_s = sum(p.end_ms - p.start_ms for p in intervals) / 1000
    required_s = max(0.0, checks.min_listening_fraction * sum(durations_s.get(s, 0.0) for s in heard) / rate - slack)
    flags = []
    if short:
        worst = min(short, key=lambda p: (p.end_ms - p.start_ms) / durations_s[p.stimulus])  # type: ignore[index]
        worst_s = durations_s[worst.stimulus]  # type: ignore[index]
        flags.append(
            f"play_time: {len(short)} of {len(finished)} plays ended sooner than the audio lasts "
            f"(shortest: {(worst.end_ms - worst.start_ms) / 1000:.3f} s for a {worst_s:.2f} s sample)"
        )
    if orphans:
        flags.append(f"orphan_ended: {orphans} ended event(s) without a play of that sample")
    if listening_s < required_s:
        flags.append(f"total_listening: {listening_s:.3f} s of playback for {len(heard)} samples lasting {required_s + slack:.3f} s")
    return LogCheck(
        plausible=not flags,
        flags=tuple(flags),
        plays=len(intervals),
        plays_finished=len(finished),
        plays_too_short=len(short),
        ended_without_play=orphans,
        listening_s=round(listening_s, 3),
        required_listening_s=round(required_s, 3),
        shortest_play_fraction=round(min(fractions), 4) if fractions else None,
    )
