"""Receipts of blind listening tests: packet set, submission, aggregate (and their parts)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from voxledger.schemas.base import Frozen, ReceiptBase, Sha256
from voxledger.schemas.listening import Hex, Label, ScreeningRules, SlotRole, Statistics, TaskType
from voxledger.schemas.listening_robustness import Robustness


class PositionBalance(Frozen):
    """How often a candidate sat in each position: ACR round, MUSHRA slot, or A/B side."""

    task: TaskType
    candidate: str
    counts: tuple[int, ...]


class BalanceAudit(Frozen):
    """Checks of the design as built: coverage, block sizes, pair concurrence, positions."""

    prompts: int
    raters: int
    raters_per_prompt: int
    raters_per_prompt_min: int
    raters_per_prompt_max: int
    prompts_per_rater_min: int
    prompts_per_rater_max: int
    trials_per_rater_min: int
    trials_per_rater_max: int
    prompt_pair_concurrence_min: int
    prompt_pair_concurrence_max: int
    prompt_pair_concurrence_ideal: float
    rater_pair_overlap_min: int
    rater_pair_overlap_max: int
    positions: tuple[PositionBalance, ...]
    position_spread_max: int  # max over (task, candidate) of max(counts) - min(counts)


class LoudnessReport(Frozen):
    """What blinding did to levels and lengths."""

    target_lufs: float
    applied_lufs: float  # lowered below the target when a clip would exceed the peak ceiling
    input_lufs_min: float
    input_lufs_max: float
    output_lufs_spread: float
    pad_to: str
    durations_s: tuple[float, ...]  # distinct padded durations in the packets


class StimulusFeatures(Frozen):
    """Simple per-file features a listener (or a script) could tell candidates apart by."""

    pseudonym: str
    candidate: str
    prompt_id: str
    dc_lsb: float  # mean sample value, in 16-bit LSB
    leading_silence_s: float  # before the first 10 ms frame above -60 dBFS
    trailing_silence_s: float
    leading_zeros: int  # exact zero samples in the first 10 ms
    rms_dbfs: float
    peak_dbfs: float
    duration_s: float
    reference_correlation: float  # highest |normalised cross-correlation| (any lag) with a labelled reference of its prompt in its packet
    # None where a receipt predates the feature. Not gated, rendering cannot remove them (docs/listening.md):
    pause_noise_dbfs: float | None = (
        None  # noise floor in the speech pauses: 10th percentile of 10 ms frame RMS between first and last speech
    )
    onset_45_s: float | None = None  # first 10 ms frame above -45 dBFS
    onset_30_s: float | None = None  # first 10 ms frame above -30 dBFS (older receipts only)
    # gated:
    onset_35_s: float | None = None  # first 10 ms frame above -35 dBFS
    onset_25_s: float | None = None  # first 10 ms frame above -25 dBFS
    # not gated, rendering cannot remove it:
    cross_packet_correlation: float | None = None  # highest correlation with a labelled reference of its prompt in another rater's packet
    # repetition (None where a receipt predates it): gated within a packet, stated across packets
    repeats_in_packet: int | None = Field(default=None, exclude_if=lambda v: v is None)  # other trials of its packet with its audio
    repeats_across_packets: int | None = Field(default=None, exclude_if=lambda v: v is None)  # other packets with its audio


class FeatureSeparation(Frozen):
    """How well one feature separates two candidates: AUC folded to >= 0.5 (0.5 = chance, 1 = perfectly)."""

    feature: str
    a: str
    b: str
    auc: float
    n_a: int
    n_b: int
    gated: bool = True  # False for intrinsic and unremoved features (measured, never failing the export)


class FamilySeparation(Frozen):
    """The highest AUC over a feature family's variants and candidate pairs, beside the same maximum under shuffled labels."""

    family: str
    member: str  # the variant that separates best
    members: int  # variants searched
    a: str
    b: str
    n_a: int
    n_b: int
    auc: float
    null_p95: float  # 95th percentile of the family maximum with candidate labels shuffled (a seeded generator)
    gated: bool  # rendering families fail the export above the gate; speech families are disclosed in ``unremoved``


class LeakCheck(Frozen):
    """The blinding-leak check of a packet set: per-file features and the worst separation per feature."""

    auc_max: float  # the threshold from the protocol
    action: Literal["fail", "warn"]
    passed: bool
    worst: tuple[FeatureSeparation, ...]  # per feature, the candidate pair it separates best
    leaks: tuple[str, ...]  # features above the threshold, with the pair and AUC
    hidden_reference_correlation_max: float | None  # highest correlation of a hidden reference with its open reference
    reference_links: int = 0  # files outside MUSHRA screens correlating > 0.9 with a labelled reference of their packet
    # features rendering cannot remove (pause noise floor, onset at -45 dBFS, correlation across packets;
    # older receipts also onset_30_s) that separate a pair above ``auc_max``: stated here, not gated
    unremoved: tuple[str, ...] = ()
    cross_packet_links: int = 0  # files correlating > 0.9 with a labelled reference of their prompt in another rater's packet
    families: tuple[FamilySeparation, ...] = Field(default=(), exclude_if=lambda v: not v)  # empty before families were searched
    # speech families (not gated) whose maximum is above ``auc_max`` and their null: disclosed, not removed
    families_disclosed: tuple[str, ...] = Field(default=(), exclude_if=lambda v: not v)
    features: tuple[StimulusFeatures, ...]


class PacketRef(Frozen):
    """One rater's packet."""

    rater_id: Label
    packet_sha256: Sha256
    tree_sha256: Sha256
    trials: int


class PacketExtension(Frozen):
    """What ``packets extend`` added to a packet set: raters in a block design of their own."""

    parent_receipt_sha256: Sha256  # the packet set extended: its packets are listed first, byte for byte the same
    raters_added: tuple[str, ...]
    raters_per_prompt: int  # every prompt is heard by this many of the added raters (the old k plus this, in all)
    extension: int  # 1 for the first extension of the original export, 2 for an extension of that, ...


class PacketSetParameters(Frozen):
    """Identities bound by a packet set."""

    packet_set_id: Hex
    protocol_sha256: Sha256
    evaluation_plan_sha256: Sha256
    stimuli_sha256: Sha256
    key_commitment_sha256: Sha256
    candidates: tuple[str, ...]
    packets: tuple[PacketRef, ...]
    balance: BalanceAudit
    loudness: LoudnessReport
    skipped: tuple[str, ...]  # trials that could not be built, with the reason
    leak_check: LeakCheck | None = None  # absent in packet sets exported before the check existed
    # what each page does besides the scored trials: unscored practice trials per packet (``f01``...,
    # never aggregated), the headphone screen the page runs first, and the completion code it shows
    # last (per-rater codes are the ``completion_codes`` subject, a CSV for the organiser)
    familiarisation_trials: int = 0
    headphone_check: Literal["none", "huggins_pitch"] = "none"
    completion_code: Literal["none", "per_rater", "fixed"] = "none"
    extension: PacketExtension | None = None  # set by ``packets extend``


class PacketSetReceipt(ReceiptBase):
    """Blinded per-rater packets were exported; subjects are each packet's tree digest."""

    kind: Literal["packet_set"] = "packet_set"
    parameters: PacketSetParameters


class RowRejection(Frozen):
    """A rating row refused by verification, with the reason."""

    index: int
    trial: str | None = None
    stimulus: str | None = None
    criterion: str | None = None
    reason: str


class LogCheck(Frozen):
    """Plausibility of a submission's presentation log (see ``tasks/listening/plausibility.py``)."""

    plausible: bool
    flags: tuple[str, ...]
    plays: int
    plays_finished: int
    plays_too_short: int  # finished plays shorter than duration / fastest rate - slack
    ended_without_play: int
    listening_s: float
    required_listening_s: float
    shortest_play_fraction: float | None  # min over finished plays of play time / sample duration


class SubmissionParameters(Frozen):
    """One accepted submission: who, which packet, what was kept and refused."""

    packet_set_receipt_sha256: Sha256
    rater_id: Label
    packet_sha256: Sha256
    submission_sha256: Sha256
    session_id: Hex
    accepted_rows: int
    rejected_rows: tuple[RowRejection, ...]
    plays: int
    listening_s: float
    log_check: LogCheck | None = None  # absent in receipts written before the check existed


class SubmissionReceipt(ReceiptBase):
    """A rater submission passed verification (digest, token, MAC, log); subject is its bytes."""

    kind: Literal["submission"] = "submission"
    parameters: SubmissionParameters


class SubmissionRejection(Frozen):
    """A whole submission file refused, with the reason."""

    file: str
    submission_sha256: Sha256 | None
    reason: str


class RatingRow(Frozen):
    """One accepted rating, unblinded and bound to audio digests (a row of the ``ratings`` table)."""

    rater_id: str
    stimulus: str
    trial: str
    role: SlotRole
    task: TaskType
    criterion: str
    candidate: str
    prompt_id: str
    category: str
    score: float
    audio_sha256: Sha256
    versus_candidate: str | None = None  # A of an A/B trial (the score is B relative to A)
    versus_audio_sha256: Sha256 | None = None
    included: bool  # False when post-screening excluded the rater


class RaterScreening(Frozen):
    """Post-screening outcome of one rater, with the measured values."""

    rater_id: str
    included: bool
    reasons: tuple[str, ...]
    gold_failures: int
    attention_failures: int
    rating_variance: float | None  # population variance (ddof = 0) of the rater's ACR stimulus ratings
    mushra_reference_low_fraction: float | None
    mushra_anchor_high_fraction: float | None = None  # share of MUSHRA screens with the low anchor above the bound
    mushra_mid_anchor_high_fraction: float | None = None  # the same for the 7 kHz mid anchor (BS.1534-3's rule)


class MissingCell(Frozen):
    """A rating that was due but is absent (rater never submitted, row missing or refused)."""

    rater_id: str
    trial: str
    stimulus: str
    criterion: str
    reason: str


class Attrition(Frozen):
    """Who and what is missing."""

    missing_raters: tuple[str, ...]
    missing_cells: int
    cells: tuple[MissingCell, ...]


CrossedMethod = Literal["two_way_cluster_t", "two_way_cluster_t_parametric_bootstrap", "two_way_cluster_t_pretested_bootstrap"]
"""``two_way_cluster_t``: two-way cluster-robust t on min(raters, prompts) - 1 df (receipts written
before the reference distribution was simulated); ``two_way_cluster_t_parametric_bootstrap``: the
same statistic and standard error, its reference distribution simulated from a fitted crossed
random-effects model, the heavier of that and the model without rater and prompt effects (``df``
is then None); ``two_way_cluster_t_pretested_bootstrap`` (current): the heavier of the fitted model
and the fitted model keeping only the effects whose two-way ANOVA F test has p < 0.2."""


class CandidateScore(Frozen):
    """Mean score of a candidate on a criterion with an interval clustered on raters and prompts.

    For A/B criteria the mean is the candidate's CMOS advantage over its opponents (its own
    side's score, sign-flipped when it was A), so every comparison counts for both candidates.
    ``ci_low``/``ci_high`` are None when not estimable; ``note`` says why.
    """

    criterion: str
    task: TaskType
    candidate: str
    ratings: int
    raters: int
    prompts: int = 0
    mean: float
    ci_low: float | None
    ci_high: float | None
    method: CrossedMethod = "two_way_cluster_t"
    df: int | None = None
    note: str | None = None
    fallback: str | None = None  # set when the t interval left the scale's range and a bounded one replaced it


class PairedDelta(Frozen):
    """``b - a`` paired within (rater, prompt) (for A/B: the CMOS of b over a), tested at the level of
    raters and prompts (two-way cluster-robust t; ``method`` says how its reference distribution was had)."""

    criterion: str
    task: TaskType
    a: str
    b: str
    pairs: int
    raters: int = 0
    prompts: int = 0
    mean_delta: float
    ci_low: float | None
    ci_high: float | None
    method: CrossedMethod = "two_way_cluster_t"
    t_statistic: float | None = None
    df: int | None = None
    p_value: float | None
    better: str | None  # the candidate favoured under the criterion's direction (Holm-adjusted p and interval agree)
    note: str | None = None
    p_adjusted: float | None = None
    adjustment: Literal["holm"] | None = None
    family: str | None = None
    family_size: int | None = None
    fallback: str | None = None
    resamples: int | None = Field(default=None, exclude_if=lambda v: v is None)
    """Simulated data sets behind ``p_value`` (its floor is 1 / (resamples + 1)); more than the protocol's
    ``bootstrap_resamples`` where the family is large enough for that floor to bind (``family_resamples``)."""


class BradleyTerry(Frozen):
    """Bradley-Terry strengths (MM algorithm, ties count half) from A/B preferences.

    ``strengths`` is None when the maximum-likelihood fit does not exist: a disconnected comparison
    graph, or a candidate set that won (or lost) every comparison with the rest (separable data);
    ``note`` says which. ``converged`` is only ever True for an identifiable fit.
    """

    criterion: str
    identifiable: bool = True
    strengths: dict[str, float] | None  # normalised to sum 1
    comparisons: int
    iterations: int
    converged: bool
    note: str | None = None


class Agreement(Frozen):
    """Krippendorff's alpha of one criterion over (prompt, candidate) units."""

    criterion: str
    level: Literal["ordinal", "interval"]
    alpha: float | None
    units: int
    note: str | None = None


class RaterBias(Frozen):
    """Mean of a rater's score minus the other raters' mean on the same units."""

    rater_id: str
    criterion: str
    bias: float
    units: int


class AggregateParameters(Frozen):
    """What the aggregate bound: the packet set, the revealed key, the rules."""

    packet_set_receipt_sha256: Sha256
    protocol_sha256: Sha256
    key_commitment_sha256: Sha256  # the revealed key (an input artifact) hashes to this
    screening: ScreeningRules
    statistics: Statistics


class AggregateResult(Frozen):
    """Verified, screened and unblinded ratings with their statistics."""

    submissions_accepted: int
    rejections: tuple[SubmissionRejection, ...]
    rejected_rows: int
    screening: tuple[RaterScreening, ...]
    attrition: Attrition
    scores: tuple[CandidateScore, ...]
    deltas: tuple[PairedDelta, ...]
    bradley_terry: tuple[BradleyTerry, ...]
    agreement: tuple[Agreement, ...]
    bias: tuple[RaterBias, ...]
    rating_rows: int  # rows of the ``ratings`` subject blob (a JSON list of RatingRow)
    # agreement over candidate stimuli only: ``agreement`` also counts the MUSHRA hidden reference
    # and low anchor, which raters agree on easily and which inflate alpha
    agreement_candidates_only: tuple[Agreement, ...] = ()
    # the MUSHRA hidden reference and anchors are screening items, never candidates: their means
    # are here (``candidate`` is the role, ``hidden_reference``, ``low_anchor`` or ``mid_anchor``), and
    # ``scores`` and ``deltas`` count candidate stimuli only
    screening_scores: tuple[CandidateScore, ...] = ()
    # per-rater influence, the robust aggregate and bot scores; absent in aggregates recorded before them
    robustness: Robustness | None = Field(default=None, exclude_if=lambda v: v is None)


class AggregateReceipt(ReceiptBase):
    """Listening-test results; inputs: the packet set, each submission, the revealed key.

    Subjects: ``ratings`` (canonical JSON list of RatingRow) and ``ratings_csv``.
    """

    kind: Literal["aggregate"] = "aggregate"
    parameters: AggregateParameters
    result: AggregateResult
