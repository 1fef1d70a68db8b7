"""Blind listening tests: the protocol plan, stimuli, packets, blinding keys, submissions, receipts.

A protocol names criteria (question, scale with labelled anchors, direction, routing by prompt
category) of four task types: ``acr`` (1-5 MOS), ``mushra`` (0-100 with a hidden reference and
3.5 kHz low and 7 kHz mid low-pass anchors), ``ab`` (CMOS -3..+3, B relative to A) and ``smos``
(1-5 similarity to the target speaker's reference recording). Raters see only keyed
pseudonyms; the pseudonym -> candidate key is sealed in the home and committed to by hash.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, model_validator

from voxledger.schemas.base import Frozen, Sha256

TaskType = Literal["acr", "mushra", "ab", "smos"]
Direction = Literal["higher_better", "lower_better"]
SlotRole = Literal["stimulus", "hidden_reference", "open_reference", "low_anchor", "mid_anchor", "gold", "attention"]
Name = Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
Label = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:+-]{0,63}$")]
Hex = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{16,64}$")]


class Anchor(Frozen):
    """A labelled point of a rating scale (shown next to that value)."""

    value: int
    label: str = Field(min_length=1, max_length=60)


class Scale(Frozen):
    """An integer rating scale [min, max] in steps of ``step`` with labelled anchors."""

    min: int
    max: int
    step: int = Field(default=1, ge=1)
    anchors: tuple[Anchor, ...] = Field(min_length=2)

    @model_validator(mode="after")
    def _check(self) -> Scale:
        if self.min >= self.max or (self.max - self.min) % self.step:
            raise ValueError(f"scale [{self.min}, {self.max}] step {self.step}: need min < max and a whole number of steps")
        values = [a.value for a in self.anchors]
        if values != sorted(set(values)) or not all(self.min <= v <= self.max for v in values):
            raise ValueError(f"anchors {values} must be increasing, unique and inside [{self.min}, {self.max}]")
        return self

    def contains(self, score: float) -> bool:
        """True when ``score`` is a value a rater can give on this scale."""
        return float(score).is_integer() and self.min <= score <= self.max and (int(score) - self.min) % self.step == 0


ACR_SCALE = Scale(
    min=1, max=5, anchors=tuple(Anchor(value=v, label=t) for v, t in enumerate(("Bad", "Poor", "Fair", "Good", "Excellent"), 1))
)
MUSHRA_SCALE = Scale(
    min=0, max=100, anchors=tuple(Anchor(value=10 + 20 * i, label=t) for i, t in enumerate(("Bad", "Poor", "Fair", "Good", "Excellent")))
)
SMOS_SCALE = Scale(
    min=1,
    max=5,
    anchors=tuple(
        Anchor(value=v, label=t)
        for v, t in enumerate(("Not at all similar", "Slightly similar", "Moderately similar", "Very similar", "Extremely similar"), 1)
    ),
)
CMOS_LABELS = ("A much better", "A better", "A slightly better", "About the same", "B slightly better", "B better", "B much better")
CMOS_SCALE = Scale(min=-3, max=3, anchors=tuple(Anchor(value=v, label=t) for v, t in zip(range(-3, 4), CMOS_LABELS, strict=True)))


class _Criterion(Frozen):
    name: Name
    question: str = Field(min_length=3, max_length=300)
    direction: Direction = "higher_better"
    categories: tuple[str, ...] = ()  # routing: prompt categories this applies to; empty means all

    def applies_to(self, category: str) -> bool:
        """Whether prompts of ``category`` are rated on this criterion."""
        return not self.categories or category in self.categories


class AcrCriterion(_Criterion):
    """Absolute category rating of one stimulus (P.800 MOS)."""

    task: Literal["acr"]
    scale: Scale = ACR_SCALE


class MushraCriterion(_Criterion):
    """MUSHRA screen (ITU-R BS.1534-3): every candidate of a prompt + hidden reference + two low-pass anchors.

    The low anchor (3.5 kHz) and the mid anchor (7 kHz) are the reference low-passed; ``None``
    for the mid anchor leaves it out (screens as before BS.1534-3's second anchor).
    """

    task: Literal["mushra"]
    scale: Scale = MUSHRA_SCALE
    low_anchor_cutoff_hz: float = Field(default=3500.0, gt=0)
    mid_anchor_cutoff_hz: float | None = Field(default=7000.0, gt=0)

    @model_validator(mode="after")
    def _anchors(self) -> MushraCriterion:
        if self.mid_anchor_cutoff_hz is not None and self.mid_anchor_cutoff_hz <= self.low_anchor_cutoff_hz:
            raise ValueError(
                f"mid_anchor_cutoff_hz {self.mid_anchor_cutoff_hz:g} must be above low_anchor_cutoff_hz {self.low_anchor_cutoff_hz:g} "
                "(BS.1534-3: 7000 and 3500), or null to leave the mid anchor out"
            )
        return self


class AbCriterion(_Criterion):
    """A/B comparison (CMOS): the score says how much better B is than A."""

    task: Literal["ab"]
    direction: Literal["higher_better"] = "higher_better"  # the scale itself says which sample is better
    scale: Scale = CMOS_SCALE
    include_reference: bool = False  # whether the reference candidate takes part in the pairs


class SmosCriterion(_Criterion):
    """Similarity MOS: how alike the voice of one sample and the target speaker's reference recording sound.

    The reference is a recording (``reference_candidate``) of another prompt, so the words never
    match and only the voice is compared; every candidate of a prompt is compared with the same
    reference, the reference candidate's own recording included (the same-speaker ceiling).
    """

    task: Literal["smos"]
    scale: Scale = SMOS_SCALE


Criterion = Annotated[AcrCriterion | MushraCriterion | AbCriterion | SmosCriterion, Field(discriminator="task")]


class Design(Frozen):
    """Who hears what: a balanced incomplete block design over prompts, plus checks per rater."""

    raters: int = Field(default=6, ge=1, le=500)
    raters_per_prompt: int = Field(default=3, ge=1)  # k: every stimulus is heard by k raters
    seed: int = 0
    gold_items: int = Field(default=2, ge=0, le=20)  # per rater; need the reference candidate
    attention_checks: int = Field(default=1, ge=0, le=10)  # per rater
    # per rater: an A/B trial of the reference against its scrambled copy (same audio, words cut and
    # shuffled), so the right answer needs the two heard against each other; needs an ab criterion
    comparison_gold_items: int = Field(default=0, ge=0, le=20)
    # per rater, before the scored trials: unscored practice trials of the packet's task types, on
    # prompts the rater hears nowhere else; marked in the packet (``familiarisation``), never aggregated
    familiarisation_trials: int = Field(default=0, ge=0, le=12)

    @model_validator(mode="after")
    def _check(self) -> Design:
        if self.raters_per_prompt > self.raters:
            raise ValueError(f"raters_per_prompt {self.raters_per_prompt} exceeds raters {self.raters}")
        return self


class Blinding(Frozen):
    """Rendering that hides the candidate: one loudness target, plain PCM, padded durations."""

    target_loudness_lufs: float = Field(default=-26.0, le=0)
    peak_ceiling_dbfs: float = Field(default=-1.0, le=0)
    pad_to: Literal["none", "prompt_max"] = "prompt_max"
    pad_bucket_s: float = Field(default=0.25, gt=0)
    pseudonym_hex_chars: int = Field(default=16, ge=12, le=64)
    # channels that identify a source without being part of what is judged (docs/listening.md)
    high_pass_hz: float = Field(default=60.0, gt=0, le=200)  # one zero-phase high-pass for every clip: removes DC and rumble
    trim_threshold_db: float = Field(default=-40.0, lt=0)  # silence = 10 ms frames this far below the clip's loudest frame
    edge_silence_s: float = Field(default=0.15, ge=0, le=2)  # after trimming, every clip starts (and at least ends) with this
    noise_floor_dbfs: float = Field(default=-66.0, ge=-100, le=-40)  # one white noise floor (RMS) under every clip
    hidden_reference_gain_db: float = Field(default=-0.2, ge=-1, le=1)  # hidden reference vs open reference (inaudible)
    hidden_reference_delay_samples: float = Field(default=0.5, ge=0, le=4)  # fractional delay of the hidden reference
    leak_auc_max: float = Field(default=0.8, gt=0.5, le=1)  # a feature that separates candidates better fails the leak check
    on_leak: Literal["fail", "warn"] = "fail"


class ScreeningRules(Frozen):
    """Versioned post-screening (BS.1534-3 reference and anchor rules, P.808 gold and variance rules).

    ``min_rating_variance`` is compared with the population variance (ddof = 0) of a rater's ACR
    stimulus ratings. ``mushra_anchor_max``: BS.1534-3 excludes an assessor who rates the mid-range
    (7 kHz) anchor above 90 on more than 15% of items; the same bound is applied on its own to the
    3.5 kHz low-range anchor (a stricter sign of not listening).
    """

    version: Literal["voxledger.screening/1"] = "voxledger.screening/1"
    mushra_reference_min: float = 90.0
    mushra_reference_max_fraction: float = Field(default=0.15, ge=0, le=1)
    mushra_anchor_max: float = 90.0
    mushra_anchor_max_fraction: float = Field(default=0.15, ge=0, le=1)
    gold_tolerance: int = Field(default=1, ge=0)
    gold_max_failures: int = Field(default=0, ge=0)
    attention_max_failures: int = Field(default=0, ge=0)
    min_rating_variance: float = Field(default=0.1, ge=0)


class SubmissionChecks(Frozen):
    """Plausibility of a submission's log, and what a submission missing screening items means."""

    max_playback_rate: float = Field(default=1.0, ge=1, le=4)  # the page pins 1.0; a play may not end sooner than duration / rate
    timing_slack_s: float = Field(default=0.25, ge=0, le=5)  # allowed early ``ended`` per play (event and clock jitter)
    min_listening_fraction: float = Field(default=1.0, ge=0, le=1)  # total listening vs the sum of the durations that had to be heard
    on_implausible: Literal["flag", "refuse"] = "refuse"  # an implausible log refuses the file, or is only recorded
    missing_screening: Literal["refuse", "fail_screening"] = "refuse"  # a file lacking a gold/attention/hidden-reference item


class HeadphoneCheck(Frozen):
    """A headphone screen before any trial: the Huggins-pitch test of Milne et al. (2021).

    Each trial plays three bursts of the same white noise in both ears; in one of them a narrow
    band (``centre_hz`` +- ``band_fraction``) is phase-inverted in the right ear. Over headphones
    that burst holds a faint tone (the Huggins pitch); over loudspeakers the ears mix and no tone
    is heard. The rater names the burst; ``pass_min`` of ``trials`` right passes, with ``attempts``
    tries. The page scores it (the answers are in the packet): an environment check for honest
    raters, not a defence against scripts.
    """

    method: Literal["none", "huggins_pitch"] = "none"
    trials: int = Field(default=6, ge=1, le=12)
    pass_min: int = Field(default=5, ge=1)
    attempts: int = Field(default=2, ge=1, le=5)
    centre_hz: float = Field(default=600.0, ge=200, le=2000)
    band_fraction: float = Field(default=0.06, gt=0, le=0.3)  # half-width of the inverted band, relative to centre_hz
    burst_s: float = Field(default=1.0, ge=0.3, le=3)
    gap_s: float = Field(default=0.5, ge=0.1, le=2)

    @model_validator(mode="after")
    def _check(self) -> HeadphoneCheck:
        if self.pass_min > self.trials:
            raise ValueError(f"headphone_check.pass_min {self.pass_min} exceeds its trials {self.trials}")
        return self


class Completion(Frozen):
    """What a rater gets on finishing, for crowd platforms: a completion code and a link back.

    ``code``: ``none``; ``per_rater`` (a code keyed by the home's secret per packet, listed for the
    organiser in ``OUT/completion-codes.csv``); or ``fixed`` (``fixed_code``, the one a platform
    such as Prolific issues per study). ``redirect_url`` (https) is shown as a link on the last
    page, ``{code}`` in it replaced by the code.
    """

    code: Literal["none", "per_rater", "fixed"] = "none"
    fixed_code: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_-]{1,40}$")] | None = None
    redirect_url: Annotated[str, StringConstraints(pattern=r"^https://[^\s<>\"']{1,500}$")] | None = None

    @model_validator(mode="after")
    def _check(self) -> Completion:
        if (self.code == "fixed") != (self.fixed_code is not None):
            raise ValueError("completion: give fixed_code exactly when code is 'fixed'")
        if self.redirect_url and "{code}" in self.redirect_url and self.code == "none":
            raise ValueError("completion.redirect_url names {code} but completion.code is 'none'; set code to per_rater or fixed")
        return self


MIN_RATERS = 5
MIN_LISTENING_PROMPTS = 5
"""Fewest included raters and prompts an interval or test needs."""


class Statistics(Frozen):
    """How the aggregate is computed.

    Intervals and tests use the two-way (raters x prompts, crossed units) cluster-robust t
    statistic; its reference distribution is simulated, ``bootstrap_resamples`` data sets drawn from
    ``seed``, from a crossed random-effects model fitted to the ratings (a parametric bootstrap;
    receipts record ``two_way_cluster_t_pretested_bootstrap``). ``method`` names the statistic.
    With fewer than ``MIN_RATERS`` included raters or ``MIN_LISTENING_PROMPTS`` prompts they are
    reported as not estimable.
    """

    bootstrap_resamples: int = Field(default=2000, ge=100)
    confidence: float = Field(default=0.95, gt=0.5, lt=1)
    seed: int = 0
    bt_max_iterations: int = Field(default=2000, ge=10)
    bt_tolerance: float = Field(default=1e-9, gt=0)
    method: Literal["two_way_cluster_t"] = "two_way_cluster_t"


DEFAULT_INSTRUCTIONS = (
    "Use headphones in a quiet room. Play every sample to the end before rating it. "
    "Rate each sample on its own merits; the samples are in random order."
)


class ListeningProtocol(Frozen):
    """A frozen listening-test plan. Every default lives here."""

    kind: Literal["listening_protocol"] = "listening_protocol"
    name: str = Field(min_length=1, max_length=80)
    title: str = "Listening test"
    instructions: str = DEFAULT_INSTRUCTIONS
    sample_rate_hz: int = Field(default=16000, gt=0)
    reference_candidate: Label = "recordings"
    criteria: tuple[Criterion, ...] = Field(min_length=1)
    design: Design = Design()
    blinding: Blinding = Blinding()
    screening: ScreeningRules = ScreeningRules()
    statistics: Statistics = Statistics()
    checks: SubmissionChecks = SubmissionChecks()
    headphone_check: HeadphoneCheck = HeadphoneCheck()
    completion: Completion = Completion()

    @model_validator(mode="after")
    def _check(self) -> ListeningProtocol:
        names = [c.name for c in self.criteria]
        if len(set(names)) != len(names):
            raise ValueError(f"criterion names repeat: {names}; give each criterion a unique name")
        if (self.design.gold_items or self.design.attention_checks) and not any(c.task == "acr" for c in self.criteria):
            raise ValueError("gold_items and attention_checks are ACR items: add an acr criterion or set them to 0")
        if self.design.comparison_gold_items and not any(c.task == "ab" for c in self.criteria):
            raise ValueError("comparison_gold_items are A/B items: add an ab criterion or set design.comparison_gold_items to 0")
        return self

    def check_criterion(self) -> AcrCriterion | None:
        """The ACR criterion gold and attention items are asked on (the first one)."""
        return next((c for c in self.criteria if isinstance(c, AcrCriterion)), None)

    def comparison_criterion(self) -> AbCriterion | None:
        """The A/B criterion comparison gold items are asked on (the first one)."""
        return next((c for c in self.criteria if isinstance(c, AbCriterion)), None)


class Stimulus(Frozen):
    """One candidate's audio for one prompt: a 16 kHz mono WAV blob in the store."""

    prompt_id: Label
    category: str = Field(min_length=1, max_length=60)
    text: str = Field(min_length=1)
    candidate: Label
    seed: int
    audio_sha256: Sha256


class StimulusSet(Frozen):
    """What the evaluation stage hands over: stimuli plus the evaluation plan they came from."""

    format: Literal["voxledger.stimuli/1"] = "voxledger.stimuli/1"
    evaluation_plan_sha256: Sha256
    stimuli: tuple[Stimulus, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _check(self) -> StimulusSet:
        seen: dict[tuple[str, str], int] = {}
        prompts: dict[str, tuple[str, str]] = {}
        problems = []
        for i, s in enumerate(self.stimuli):
            if (s.prompt_id, s.candidate) in seen:
                problems.append(
                    f"stimuli[{i}] repeats prompt {s.prompt_id!r} candidate {s.candidate!r} (first at [{seen[(s.prompt_id, s.candidate)]}])"
                )
            seen.setdefault((s.prompt_id, s.candidate), i)
            if prompts.setdefault(s.prompt_id, (s.category, s.text)) != (s.category, s.text):
                problems.append(f"stimuli[{i}]: prompt {s.prompt_id!r} has a different category or text than before")
        if problems:
            raise ValueError("; ".join(problems))
        return self


# --- what a rater's packet holds (no candidate names, no prompt ids) ---------------------------


class PacketCriterion(Frozen):
    """What the page shows of a criterion: no routing, no anchor construction."""

    name: Name
    task: TaskType
    question: str
    scale: Scale


class PacketTrial(Frozen):
    """One screen: the stimuli in display order (A, B for ``ab``) and the criteria asked."""

    id: str
    task: TaskType
    criteria: tuple[Name, ...] = Field(min_length=1)
    stimuli: tuple[str, ...] = Field(min_length=1)
    reference: str | None = None  # the open (labelled) reference of a MUSHRA screen


class PacketHeadphoneTrial(Frozen):
    """One headphone-screen trial: a stereo file of three noise bursts; ``answer`` (1-3) holds the tone."""

    audio: str
    answer: int = Field(ge=1, le=3)


class PacketHeadphoneCheck(Frozen):
    """The headphone screen as the page runs it (``HeadphoneCheck``): the page scores it."""

    method: Literal["huggins_pitch"]
    trials: tuple[PacketHeadphoneTrial, ...] = Field(min_length=1)
    pass_min: int
    attempts: int


class PacketCompletion(Frozen):
    """What the page shows on finishing: the rater's completion code and the platform link (``{code}`` filled in)."""

    code: str | None = None
    redirect_url: str | None = None


class PacketAudio(Frozen):
    """One audio file of a packet and its digest."""

    id: str
    file: str
    sha256: Sha256


class PacketManifest(Frozen):
    """Everything a rater's page shows. Its canonical bytes are ``packet.json``; their sha256 is the packet digest."""

    format: Literal["voxledger.packet/1"] = "voxledger.packet/1"
    packet_set_id: Hex
    rater_id: Label
    protocol_sha256: Sha256
    title: str
    instructions: str
    criteria: tuple[PacketCriterion, ...]
    trials: tuple[PacketTrial, ...]
    audio: tuple[PacketAudio, ...]
    # before the scored trials: unscored practice trials (ids ``f01``...; no rating is exported or
    # aggregated) and the headphone screen; after them, the completion code and link
    familiarisation: tuple[PacketTrial, ...] = ()
    headphone_check: PacketHeadphoneCheck | None = None
    completion: PacketCompletion | None = None


class KeyEntry(Frozen):
    """What a pseudonym stands for: revealed only at aggregation."""

    pseudonym: str
    rater_id: Label
    trial_id: str
    role: SlotRole
    candidate: str
    prompt_id: str
    category: str
    audio_sha256: Sha256  # the source audio (the reference for anchors and gold items)
    rendered_sha256: Sha256  # the file in the packet
    expected: int | None = None  # gold and attention answers


class BlindingKey(Frozen):
    """The sealed pseudonym -> candidate key; the packet-set receipt holds only its sha256."""

    format: Literal["voxledger.blinding-key/1"] = "voxledger.blinding-key/1"
    packet_set_id: Hex
    nonce: Hex  # makes the commitment unguessable from the (few) candidate names
    protocol_sha256: Sha256
    evaluation_plan_sha256: Sha256
    entries: tuple[KeyEntry, ...]


class SubmissionRating(Frozen):
    """One rating row as the page exports it."""

    trial: str
    stimulus: str
    criterion: str
    score: float
    t_ms: int


class LogEvent(Frozen):
    """One presentation/playback event of the page, in milliseconds since the page opened."""

    t_ms: int = Field(ge=0)
    event: Literal["start", "present", "play", "pause", "seek", "ended", "rate", "ratechange", "blur", "focus", "next", "export"]
    trial: str | None = None
    stimulus: str | None = None
    detail: str | None = None


class Submission(Frozen):
    """A rater's exported file, bound to the packet digest and the rater token; ``mac`` covers the rest."""

    format: Literal["voxledger.submission/1"]
    packet_sha256: Sha256
    rater_id: str
    token: str
    session_id: Hex
    user_agent: str
    started_at: str
    finished_at: str
    ratings: tuple[dict[str, Any], ...]  # validated row by row so one bad row is reported, not fatal
    log: tuple[LogEvent, ...]
    mac: str
