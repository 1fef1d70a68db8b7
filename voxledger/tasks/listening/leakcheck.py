"""Blinding-leak check: could a simple per-file feature tell the candidates apart without listening?

For every file of every packet we measure what a curious rater could compute with a few lines of
numpy: DC offset, leading/trailing silence, exact zeros at the start, RMS, peak, duration, the
noise floor inside speech pauses, the onset (first 10 ms frame) above -45, -35 and -25 dBFS, and
the highest normalised cross-correlation (over all lags) with a labelled MUSHRA reference of the
same prompt in the same packet (the one file whose identity the page gives away). For each
feature and each pair of candidates (files with role ``stimulus`` or ``hidden_reference``) the
Mann-Whitney AUC says how well the feature separates them (folded: 0.5 = chance, 1 = perfectly).

Repetition: how many other trials of the file's packet hold a copy of its audio
(``repeats_in_packet``, gated: the design keeps it equal across conditions) and how many other
packets do (``repeats_across_packets``, stated; see ``UNREMOVED``), each compared within a task.

Also measured, never gated, and stated in the receipt (``unremoved``) when they separate a pair:
the noise floor in speech pauses and the onset at -45 dBFS (what separates there is audible
speech or vocoder noise, see ``UNREMOVED``), and the highest correlation with a labelled
reference of the same prompt in *another* rater's packet (raters who compare files can link a
clip to a reference that way; ``cross_packet_links`` counts files above 0.9). Rendering cannot
remove them without changing what raters judge or giving them different audio for the same
stimulus. Receipts written before the onsets at -35 and -25 dBFS were gated hold ``onset_30_s``
instead; they stay readable.

Each feature is also searched over its family of variants (``families``: levels, frame sizes,
percentiles, bands, crest) against a null from shuffled labels; rendering families are gated,
the others disclosed in ``families_disclosed`` when they separate.

Gated features describe rendering or linkage, not speech: a separation above
``blinding.leak_auc_max`` fails the export (``on_leak: fail``) or is recorded as a warning
(``warn``). Intrinsic features (RMS, peak, trailing silence: they follow from spectral balance,
crest factor and speaking rate, which raters judge) are measured and recorded, never gated. A
hidden reference is not compared with the open reference of its own screen (it is the reference
by design); that correlation is recorded separately.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import combinations

import numpy as np

from voxledger.schemas.listening import Blinding
from voxledger.schemas.listening_receipts import FeatureSeparation, LeakCheck, StimulusFeatures
from voxledger.tasks.listening.families import search_families

GATED = (
    "dc_lsb",
    "leading_silence_s",
    "leading_zeros",
    "duration_s",
    "reference_correlation",
    "onset_35_s",
    "onset_25_s",
    "repeats_in_packet",
)
INTRINSIC = ("trailing_silence_s", "rms_dbfs", "peak_dbfs")
# what rendering cannot remove without changing what is judged: measured and stated in the receipt
# (``unremoved``) when it separates, never gated.
# - pause noise: every clip already lies on the same -66 dBFS floor, so what separates is energy
#   well above it between words (on the demo, medians -41 dBFS for the adapter, -47 for the
#   recordings: 15-20 dB under the speech), which listeners hear and judge.
# - onset at -45 dBFS: every clip's speech starts after the same lead (``leading_silence_s`` is
#   gated), so the time to reach -45 dBFS, 19 dB under the loudness target, is the first phoneme's
#   own attack: a vocoder that smears it (Griffin-Lim's 64 ms window) reaches it a frame later, and
#   only cutting or reshaping the candidate's first sound would hide that. Which crossing lines up
#   follows ``blinding.trim_threshold_db``: the demo pipeline's protocol trims at -45 dB, which puts
#   this one under the gate on the demo's voices (docs/listening.md).
# - correlation with a labelled reference in another rater's packet: every rater of a MUSHRA screen
#   hears the reference's own audio; hiding it would mean different audio for the same stimulus.
# - repetition across packets: every rater of a prompt hears its candidates, but A/B leaves the
#   reference out (``include_reference: false``), so a reference clip is in fewer packets; only
#   raters who pool their files can count that.
UNREMOVED = ("pause_noise_dbfs", "onset_45_s", "cross_packet_correlation", "repeats_across_packets")
UNREMOVED_WHY = {
    "": "rendering cannot remove it without changing what is judged, not gated",
    "repeats_across_packets": "seen only by raters who pool their packets; A/B leaves the reference out, not gated",
}
ONSETS_DBFS = {"onset_45_s": -45.0, "onset_35_s": -35.0, "onset_25_s": -25.0}
CANDIDATE_ROLES = ("stimulus", "hidden_reference")
SILENCE_DBFS = -60.0  # a 10 ms frame below this RMS counts as silence for the silence features
LINK_CORRELATION = 0.9  # an item this correlated with a labelled reference can be linked to it
# differences finer than these are noise (dither, noise floor), not a channel: values are compared
# after rounding to them, so sub-resolution jitter ties instead of "separating" a handful of files
RESOLUTION = {
    "dc_lsb": 1.0,
    "leading_silence_s": 0.01,
    "leading_zeros": 20.0,
    "duration_s": 0.01,
    "reference_correlation": 0.05,
    "trailing_silence_s": 0.01,
    "rms_dbfs": 0.25,
    "peak_dbfs": 0.25,
    "pause_noise_dbfs": 0.5,
    "onset_45_s": 0.01,
    "onset_35_s": 0.01,
    "onset_25_s": 0.01,
    "cross_packet_correlation": 0.05,
    "repeats_in_packet": 1.0,
    "repeats_across_packets": 1.0,
}
# compared within each task (a rater sees which task a trial is): pooled over tasks, a candidate that
# A/B leaves out would differ only by the tasks it takes part in, which every rater is shown
BY_TASK = ("repeats_in_packet", "repeats_across_packets")
MIN_FILES = 6  # fewer files of a candidate than this: the AUC is recorded but gates nothing


@dataclass(frozen=True)
class PacketFile:
    """One rendered file of a packet, with what the sealed key knows about it."""

    rater_id: str
    pseudonym: str
    trial_id: str
    task: str
    role: str
    candidate: str
    prompt_id: str
    pcm: np.ndarray  # int16 sample values
    source: str = ""  # the audio it was rendered from (design.Slot.source): copies of one source are the same clip


def _frame_rms(pcm: np.ndarray, rate: int) -> np.ndarray:
    """RMS (full scale 1.0) of consecutive 10 ms frames."""
    frame = max(1, rate // 100)
    x = pcm.astype(np.float64) / 32768
    n = x.size // frame
    return np.sqrt(np.mean(x[: n * frame].reshape(n, frame) ** 2, axis=1)) if n else np.zeros(0)


def _silence_s(pcm: np.ndarray, rate: int, reverse: bool, threshold_dbfs: float = SILENCE_DBFS) -> float:
    """Seconds before the first (or after the last) 10 ms frame louder than ``threshold_dbfs``."""
    rms = _frame_rms(pcm[::-1] if reverse else pcm, rate)
    loud = np.flatnonzero(rms > 10 ** (threshold_dbfs / 20))
    return round((int(loud[0]) if loud.size else rms.size) * max(1, rate // 100) / rate, 4)


def pause_noise_dbfs(pcm: np.ndarray, rate: int) -> float | None:
    """The noise floor inside speech: 10th percentile of 10 ms frame RMS between the first and last frame above -45 dBFS."""
    rms = _frame_rms(pcm, rate)
    loud = np.flatnonzero(rms > 10 ** (-45 / 20))
    if loud.size < 2:
        return None
    inside = rms[loud[0] : loud[-1] + 1]
    return round(20 * float(np.log10(max(float(np.percentile(inside, 10)), 1e-12))), 3)


def max_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Highest |normalised cross-correlation| of two clips over every lag (FFT)."""
    x, y = a.astype(np.float64) - a.mean(), b.astype(np.float64) - b.mean()
    norm = float(np.sqrt(np.dot(x, x) * np.dot(y, y)))
    if norm == 0:
        return 0.0
    n = 1 << int(np.ceil(np.log2(x.size + y.size)))
    xc = np.fft.irfft(np.fft.rfft(x, n) * np.conj(np.fft.rfft(y, n)), n)
    return float(np.max(np.abs(xc)) / norm)


def repetition(files: list[PacketFile]) -> dict[str, tuple[int, int]]:
    """Per file: how many other trials of its packet, and other packets, hold a copy of its audio.

    A copy differs from another only in its noise floor and dither (``render.samples``), so it
    correlates with it near 1: a rater who compares clips finds every repeat. A MUSHRA hidden
    reference and the open reference of its own screen are one trial (the rater is told).
    """
    trials: dict[tuple[str, str], set[str]] = defaultdict(set)  # (packet, source) -> trials
    packets: dict[str, set[str]] = defaultdict(set)  # source -> packets
    for f in files:
        if f.source:
            trials[(f.rater_id, f.source)].add(f.trial_id)
            packets[f.source].add(f.rater_id)
    return {f.pseudonym: (len(trials[(f.rater_id, f.source)]) - 1, len(packets[f.source]) - 1) if f.source else (0, 0) for f in files}


def _features(f: PacketFile, rate: int, corr: float, cross: float, repeats: tuple[int, int]) -> StimulusFeatures:
    x = f.pcm.astype(np.float64)
    rms = float(np.sqrt(np.mean((x / 32768) ** 2)))
    peak = float(np.max(np.abs(x)) / 32768)
    return StimulusFeatures(
        pseudonym=f.pseudonym,
        candidate=f.candidate,
        prompt_id=f.prompt_id,
        dc_lsb=round(float(x.mean()), 3),
        leading_silence_s=_silence_s(f.pcm, rate, False),
        trailing_silence_s=_silence_s(f.pcm, rate, True),
        leading_zeros=int(np.sum(f.pcm[: rate // 100] == 0)),
        rms_dbfs=round(20 * np.log10(max(rms, 1e-12)), 3),
        peak_dbfs=round(20 * np.log10(max(peak, 1e-12)), 3),
        duration_s=round(f.pcm.size / rate, 4),
        reference_correlation=round(corr, 5),
        pause_noise_dbfs=pause_noise_dbfs(f.pcm, rate),
        **{name: _silence_s(f.pcm, rate, False, level) for name, level in ONSETS_DBFS.items()},
        cross_packet_correlation=round(cross, 5),
        repeats_in_packet=repeats[0],
        repeats_across_packets=repeats[1],
    )


def auc(a: list[float], b: list[float]) -> float:
    """Folded Mann-Whitney AUC of two samples (ties count half): 0.5 = no separation, 1.0 = complete."""
    if not a or not b:
        return 0.5
    from scipy.stats import rankdata  # scipy.stats: ~0.8 s of imports, here and not in a cached packets stage

    ranks = rankdata(np.concatenate([a, b]))
    u = float(ranks[: len(a)].sum()) - len(a) * (len(a) + 1) / 2
    value = u / (len(a) * len(b))
    return max(value, 1 - value)


def _correlations(files: list[PacketFile]) -> tuple[dict[str, float], list[float]]:
    """Per file: max correlation with a labelled (open) reference of its prompt in its packet, its
    own MUSHRA screen excluded; and every hidden reference's correlation with its open reference."""
    best: dict[str, float] = defaultdict(float)
    hidden: list[float] = []
    refs: dict[tuple[str, str], list[PacketFile]] = defaultdict(list)
    for f in files:
        if f.role == "open_reference":
            refs[(f.rater_id, f.prompt_id)].append(f)
    for f in files:
        for ref in refs.get((f.rater_id, f.prompt_id), []):
            if f.role == "open_reference":
                continue
            c = max_correlation(f.pcm, ref.pcm)
            if f.trial_id == ref.trial_id:
                if f.role == "hidden_reference":
                    hidden.append(c)
                continue
            best[f.pseudonym] = max(best[f.pseudonym], c)
    return best, hidden


def _cross_packet(files: list[PacketFile]) -> dict[str, float]:
    """Per file: max correlation with a labelled (open) reference of its prompt in another rater's packet.

    Raters who compare their files can link a clip this way to a reference they were told about.
    """
    refs: dict[str, list[PacketFile]] = defaultdict(list)
    for f in files:
        if f.role == "open_reference":
            refs[f.prompt_id].append(f)
    spectra: dict[tuple[str, int], np.ndarray] = {}
    best: dict[str, float] = defaultdict(float)
    for f in files:
        if f.role not in CANDIDATE_ROLES:
            continue
        for ref in refs.get(f.prompt_id, []):
            if ref.rater_id != f.rater_id:
                best[f.pseudonym] = max(best[f.pseudonym], _correlation_cached(f.pcm, ref, spectra))
    return best


def _correlation_cached(a: np.ndarray, ref: PacketFile, spectra: dict[tuple[str, int], np.ndarray]) -> float:
    x = a.astype(np.float64) - a.mean()
    y = ref.pcm.astype(np.float64) - ref.pcm.mean()
    norm = float(np.sqrt(np.dot(x, x) * np.dot(y, y)))
    if norm == 0:
        return 0.0
    n = 1 << int(np.ceil(np.log2(x.size + y.size)))
    key = (ref.pseudonym, n)
    if key not in spectra:
        spectra[key] = np.conj(np.fft.rfft(y, n))
    return float(np.max(np.abs(np.fft.irfft(np.fft.rfft(x, n) * spectra[key], n))) / norm)


def _values(feats: list[StimulusFeatures], name: str) -> list[float]:
    step = RESOLUTION[name]
    return [round((getattr(f, name) or 0.0) / step) * step for f in feats]


def _separation(name: str, by_cand: dict[str, list[StimulusFeatures]], a: str, b: str) -> FeatureSeparation:
    return FeatureSeparation(
        feature=name,
        a=a,
        b=b,
        gated=name in GATED,
        n_a=len(by_cand[a]),
        n_b=len(by_cand[b]),
        auc=round(auc(_values(by_cand[a], name), _values(by_cand[b], name)), 4),
    )


def check_leaks(files: list[PacketFile], rate: int, blinding: Blinding) -> LeakCheck:
    """Measure every file, then every feature's best separation of a candidate pair."""
    corr, hidden = _correlations(files)
    linked = sum(c > LINK_CORRELATION for c in corr.values())
    cross = _cross_packet(files)
    repeats = repetition(files)
    feats = [_features(f, rate, corr.get(f.pseudonym, 0.0), cross.get(f.pseudonym, 0.0), repeats[f.pseudonym]) for f in files]
    scored = [(f, ft) for f, ft in zip(files, feats, strict=True) if f.role in CANDIDATE_ROLES]
    by_cand: dict[str, list[StimulusFeatures]] = defaultdict(list)
    by_task: dict[str, dict[str, list[StimulusFeatures]]] = defaultdict(lambda: defaultdict(list))
    for f, ft in scored:
        by_cand[ft.candidate].append(ft)
        by_task[f.task][ft.candidate].append(ft)
    worst, leaks, unremoved = [], [], []
    for name in (*GATED, *INTRINSIC, *UNREMOVED):
        # tasks in sorted order: a tie between pairs goes the same way whatever order the files came in
        groups = [by_task[t] for t in sorted(by_task)] if name in BY_TASK else [by_cand]
        pairs = [_separation(name, group, a, b) for group in groups for a, b in combinations(sorted(group), 2)]
        if not pairs:
            continue
        top = max(pairs, key=lambda p: p.auc)
        worst.append(top)
        if top.gated and top.auc > blinding.leak_auc_max and min(top.n_a, top.n_b) >= MIN_FILES:
            leaks.append(f"{name} separates {top.a} from {top.b} (AUC {top.auc:.3f} > {blinding.leak_auc_max:g})")
        elif name in UNREMOVED and top.auc > blinding.leak_auc_max:
            unremoved.append(f"{name} separates {top.a} from {top.b} (AUC {top.auc:.3f}); {UNREMOVED_WHY.get(name, UNREMOVED_WHY[''])}")
    disclosed: list[str] = []
    families = search_families([f.pcm for f, _ in scored], [ft.candidate for _, ft in scored], rate)
    for fam in families:
        if fam.auc <= blinding.leak_auc_max or fam.auc <= fam.null_p95:
            continue
        found = f"family {fam.family} ({fam.members} variants): {fam.member} separates {fam.a} from {fam.b} (AUC {fam.auc:.3f}; shuffled labels' 95th percentile {fam.null_p95:.3f})"
        if fam.gated and min(fam.n_a, fam.n_b) >= MIN_FILES:
            leaks.append(f"{found} > {blinding.leak_auc_max:g}")
        elif not fam.gated:
            disclosed.append(f"{found}; {UNREMOVED_WHY['']}")
    return LeakCheck(
        families=families,
        families_disclosed=tuple(disclosed),
        auc_max=blinding.leak_auc_max,
        action=blinding.on_leak,
        passed=not leaks,
        worst=tuple(worst),
        leaks=tuple(leaks),
        hidden_reference_correlation_max=round(max(hidden), 5) if hidden else None,
        reference_links=linked,
        unremoved=tuple(unremoved),
        cross_packet_links=sum(c > LINK_CORRELATION for c in cross.values()),
        features=tuple(sorted(feats, key=lambda f: f.pseudonym)),
    )
