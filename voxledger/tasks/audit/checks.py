"""Audit checks as pure functions over utterances and measured file facts; each returns findings."""

from __future__ import annotations

import unicodedata
from collections import defaultdict

from voxledger.schemas.audit import AuditPolicy, CorpusStats, Finding, LeakageRule, SplitStats
from voxledger.schemas.manifest import Utterance
from voxledger.tasks.audit.fingerprint import near_duplicate_pairs
from voxledger.tasks.audit.measure import FileFacts
from voxledger.tasks.metrics.normalise import basic

IMPLAUSIBLE_RATE_FACTOR = 4.0
"""A transcript read more than this many times faster than the policy's ``max_chars_per_s`` is not
the clip's transcript (no speech is that fast): an error whatever ``speaking_rate_severity`` says.
A module constant, not a policy field, so existing policies keep their digests."""


def _group_of(split: str, rule: LeakageRule) -> str:
    for group in rule.partition:
        if split in group:
            return "+".join(group)
    return split


def _key_value(utt: Utterance, key: str) -> str:
    if key == "text_norm":
        return basic(utt.text)
    return str(getattr(utt, key))


def leakage(utts: list[Utterance], rules: tuple[LeakageRule, ...]) -> list[Finding]:
    """A value of a group key seen in two split groups is leakage: always an error."""
    findings: list[Finding] = []
    for rule in rules:
        groups: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
        for u in utts:
            value = _key_value(u, rule.key)
            if rule.key == "text_norm" and not value:
                continue  # empty transcripts are reported as such, not as leakage
            groups[value][_group_of(u.split, rule)].append(u.id)
        for value, by_group in sorted(groups.items()):
            if len(by_group) > 1:
                where = "; ".join(f"{g}: {len(ids)}" for g, ids in sorted(by_group.items()))
                ids = tuple(sorted(i for ids in by_group.values() for i in ids))
                findings.append(
                    Finding(
                        code="split_leakage",
                        severity="error",
                        utterance_ids=ids,
                        message=f"{rule.key} {value!r} occurs in {len(by_group)} split groups ({where})",
                    )
                )
    return findings


def duplicates(utts: list[Utterance], digests: dict[str, str], facts: dict[str, FileFacts], policy: AuditPolicy) -> list[Finding]:
    """Exact duplicate audio (by content digest), near duplicates (fingerprint), repeated text."""
    findings: list[Finding] = []
    by_digest: dict[str, list[str]] = defaultdict(list)
    for uid, d in digests.items():
        by_digest[d].append(uid)
    exact: set[tuple[str, str]] = set()
    for d, ids in sorted(by_digest.items()):
        if len(ids) > 1:
            ids = sorted(ids)
            exact.update((a, b) for i, a in enumerate(ids) for b in ids[i + 1 :])
            findings.append(
                Finding(
                    code="duplicate_audio",
                    severity="error",
                    utterance_ids=tuple(ids),
                    message=f"{len(ids)} utterances share identical audio bytes (sha256 {d[:16]}...)",
                )
            )
    if policy.near_duplicate.enabled:
        codes = {uid: f.code for uid, f in facts.items() if f.code is not None}
        for a, b, bits in near_duplicate_pairs(codes, policy.near_duplicate.max_hamming_bits):
            if (a, b) not in exact:
                findings.append(
                    Finding(
                        code="near_duplicate_audio",
                        severity=policy.near_duplicate.severity,
                        utterance_ids=(a, b),
                        message=f"fingerprints differ in {bits} of 256 bits",
                        value=bits,
                        bound=policy.near_duplicate.max_hamming_bits,
                    )
                )
    same: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for u in utts:
        if basic(u.text):
            same[(u.split, u.speaker, basic(u.text))].append(u.id)
    for (split, speaker, text), ids in sorted(same.items()):
        if len(ids) > 1:
            findings.append(
                Finding(
                    code="duplicate_text",
                    severity=policy.duplicate_text_same_speaker,
                    utterance_ids=tuple(sorted(ids)),
                    message=f"speaker {speaker!r} says {text!r} {len(ids)} times in split {split!r}",
                )
            )
    return findings


def speaker_lookalikes(utts: list[Utterance], policy: AuditPolicy) -> list[Finding]:
    """Speaker ids that mix scripts with confusable letters (Unicode's confusables data, via confusable-homoglyphs),
    or that equal another speaker's id once NFKC-normalised and case-folded: one finding per such speaker."""
    from confusable_homoglyphs import confusables

    speakers: dict[str, list[str]] = {}
    for u in utts:
        speakers.setdefault(u.speaker, []).append(u.id)
    folded: dict[str, list[str]] = {}
    for name in speakers:
        folded.setdefault(unicodedata.normalize("NFKC", name).casefold(), []).append(name)
    findings = []
    for name, ids in speakers.items():
        mixed = confusables.is_dangerous(name)
        twins = [other for other in folded[unicodedata.normalize("NFKC", name).casefold()] if other != name]
        if not mixed and not twins:
            continue
        if mixed:
            letters = confusables.is_confusable(name, preferred_aliases=["latin"]) or []
            shown = ", ".join(f"{c['character']!r} ({c['alias'].lower()}) looks like {c['homoglyphs'][0]['c']!r}" for c in letters[:3])
            why = f"mixes scripts: {shown}"
        else:
            why = f"differs from speaker {twins[0]!r} only in case or Unicode form"
        findings.append(
            Finding(
                code="speaker_lookalike",
                severity=policy.speaker_lookalike_severity,
                utterance_ids=tuple(ids[:20]),
                message=(
                    f"speaker id {name!r} {why}: it reads as another speaker's id but is a different one, splitting one voice "
                    "in two and walking past speaker leakage rules; rename it in the manifest"
                ),
            )
        )
    return findings


def transcript(utt: Utterance) -> list[Finding]:
    """Empty transcripts and control characters."""
    if not utt.text.strip():
        return [
            Finding(
                code="empty_transcript",
                severity="error",
                utterance_ids=(utt.id,),
                message=f"{utt.id}: transcript is empty; fill it in or drop the utterance",
            )
        ]
    bad = [c for c in utt.text if unicodedata.category(c) == "Cc"]
    if bad:
        return [
            Finding(
                code="control_characters",
                severity="error",
                utterance_ids=(utt.id,),
                message=f"{utt.id}: transcript holds control characters {sorted({hex(ord(c)) for c in bad})}; remove them",
            )
        ]
    return []


def file_findings(utt: Utterance, f: FileFacts, policy: AuditPolicy) -> list[Finding]:
    """Format, duration and signal checks for one file."""
    one = (utt.id,)
    if f.error_code:
        return [Finding(code=f.error_code, severity="error", utterance_ids=one, message=f.error or "", file=utt.audio)]  # type: ignore[arg-type]
    s = f.stats
    if s is None:
        return [
            Finding(
                code="audio_unreadable", severity="error", utterance_ids=one, message=f"{utt.audio}: no statistics measured", file=utt.audio
            )
        ]
    out: list[Finding] = []

    def add(code: str, severity: str, message: str, value: float | None = None, bound: float | None = None) -> None:
        where = f"{f.origin}: " if f.origin else ""
        out.append(
            Finding(
                code=code,  # type: ignore[arg-type]  # callers pass the literal codes
                severity=severity,  # type: ignore[arg-type]
                utterance_ids=one,
                message=f"{where}{utt.audio}: {message}",
                value=value,
                bound=bound,
                file=utt.audio,
            )
        )

    if f.sample_rate_hz != policy.sample_rate_hz:
        add(
            "sample_rate_mismatch",
            "error",
            f"{f.sample_rate_hz} Hz, policy requires {policy.sample_rate_hz} Hz; resample with voxledger corpus prepare",
            f.sample_rate_hz,
            policy.sample_rate_hz,
        )
    if f.channels != policy.channels:
        add(
            "channel_mismatch",
            "error",
            f"{f.channels} channels, policy requires {policy.channels}; down-mix with voxledger corpus prepare",
            f.channels,
            policy.channels,
        )
    if not policy.min_duration_s <= s.duration_s <= policy.max_duration_s:
        bound = policy.min_duration_s if s.duration_s < policy.min_duration_s else policy.max_duration_s
        add(
            "duration_out_of_bounds",
            "error",
            f"{s.duration_s:.2f} s outside [{policy.min_duration_s}, {policy.max_duration_s}] s",
            s.duration_s,
            bound,
        )
    v = policy.validity
    if "non_finite" in s.problems:
        add("non_finite", "error", "audio holds NaN or Inf samples")
    if "silent" in s.problems or "empty" in s.problems:
        add(
            "silence",
            "error",
            f"{s.silence_fraction:.0%} of frames below {v.silence_threshold_dbfs} dBFS",
            s.silence_fraction,
            v.max_silence_fraction,
        )
    if "clipped" in s.problems:
        add("clipping", "error", f"{s.clipping_fraction:.2%} of samples clipped", s.clipping_fraction, v.max_clipping_fraction)
    if "dc_offset" in s.problems:
        add("dc_offset", policy.dc_offset_severity, f"DC offset {s.dc_offset:+.4f}", s.dc_offset, v.max_abs_dc_offset)
    if ("too_fast" in s.problems or "too_slow" in s.problems) and "silent" not in s.problems:
        bound = v.max_chars_per_s if "too_fast" in s.problems else v.min_chars_per_s
        if "too_fast" in s.problems and (s.chars_per_s or 0.0) > IMPLAUSIBLE_RATE_FACTOR * v.max_chars_per_s:
            message = (
                f"{s.chars_per_s:.1f} characters/s for this transcript, over {IMPLAUSIBLE_RATE_FACTOR:g}x the policy's "
                f"max_chars_per_s: no speech is this fast, the transcript does not belong to this clip"
            )
            add("speaking_rate", "error", message, s.chars_per_s, IMPLAUSIBLE_RATE_FACTOR * v.max_chars_per_s)
        else:
            add(
                "speaking_rate",
                policy.speaking_rate_severity,
                f"{s.chars_per_s:.1f} characters/s for this transcript",
                s.chars_per_s,
                bound,
            )
    return out


def corpus_stats(utts: list[Utterance], facts: dict[str, FileFacts]) -> CorpusStats:
    """Hours and utterances per split and speaker; a 1-second duration histogram."""
    dur = {u.id: (facts[u.id].stats.duration_s if facts[u.id].stats else 0.0) for u in utts}  # type: ignore[union-attr]
    splits: dict[str, list[Utterance]] = defaultdict(list)
    hours: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    hist: dict[str, int] = defaultdict(int)
    by_split: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for u in utts:
        splits[u.split].append(u)
        by_split[u.speaker][u.split] += 1
        hours[u.speaker] += dur[u.id] / 3600
        counts[u.speaker] += 1
        hist[f"{int(dur[u.id])}-{int(dur[u.id]) + 1}"] += 1
    split_stats = tuple(
        SplitStats(split=s, utterances=len(us), speakers=len({u.speaker for u in us}), hours=round(sum(dur[u.id] for u in us) / 3600, 6))
        for s, us in sorted(splits.items())
    )
    return CorpusStats(
        splits=split_stats,
        speaker_hours={k: round(v, 6) for k, v in sorted(hours.items())},
        speaker_utterances=dict(sorted(counts.items())),
        speaker_split_utterances={spk: dict(sorted(by_split[spk].items())) for spk in sorted(by_split)},
        duration_histogram_s=dict(sorted(hist.items(), key=lambda kv: int(kv[0].split("-")[0]))),
        total_hours=round(sum(dur.values()) / 3600, 6),
    )
