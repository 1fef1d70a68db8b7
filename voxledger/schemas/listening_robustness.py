"""The robustness part of an aggregate receipt: bot scores, the robust aggregate, each verdict's dependence on raters.

Computed by ``tasks/listening/robustness.py`` (docs/listening.md, "Conclusions that survive a
scripted rater"); carried by ``AggregateResult.robustness``.
"""

from __future__ import annotations

from typing import Literal

from voxledger.schemas.base import Frozen
from voxledger.schemas.listening import TaskType


class RaterBotScore(Frozen):
    """How well signal-only predictors explain one rater's answers beyond what the other raters heard.

    Per criterion, the rater's scores and each predictor (ranks) are regressed on the other included
    raters' median score of the same unit (criterion x candidate x prompt) and of the same condition
    (criterion x candidate; A/B: the pair, B minus A).
    ``max_abs_r``: the highest |correlation| of the two residuals over predictors (``best_predictor``);
    ``p_value``: the share of permutations of the score residuals within criterion reaching it
    (Freedman-Lane, a max-statistic permutation test); ``p_adjusted``: Holm over every scored rater of
    the aggregate (``Robustness.bot_adjustment``). ``flagged``: p (adjusted where recorded) and |r|
    past the receipt's bounds.
    """

    rater_id: str
    included: bool  # kept by screening
    ratings: int  # candidate ratings scored (a condition the other raters also rated, a criterion with 3 or more)
    best_predictor: str | None
    max_abs_r: float | None
    p_value: float | None
    flagged: bool
    note: str | None = None
    p_adjusted: float | None = None  # None in receipts written before the family-wise adjustment


RobustMethod = Literal["yuen_trimmed_mean_of_rater_means"]
"""Each rater's mean paired delta, then the 20% trimmed mean over raters with Yuen's (1974) one-sample
test and interval (winsorised variance, t on raters - 2g - 1 degrees of freedom)."""


class RobustDelta(Frozen):
    """A paired delta from the raters' own means, with the most extreme raters trimmed (``RobustMethod``)."""

    criterion: str
    task: TaskType
    a: str
    b: str
    raters: int
    trimmed: int  # raters trimmed from each end
    estimate: float
    ci_low: float | None
    ci_high: float | None
    p_value: float | None
    p_adjusted: float | None  # Holm over every robust delta of the aggregate
    better: str | None
    method: RobustMethod = "yuen_trimmed_mean_of_rater_means"
    note: str | None = None


class VerdictCheck(Frozen):
    """Whether one verdict (a paired delta's ``better``) survives dropping raters and a robust aggregate.

    ``flipped_by``: included raters whose removal alone changes the verdict (to another candidate or
    to none, or from none to one); ``without_flagged``: the verdict with every bot-flagged rater
    removed (None when no included rater is flagged). ``flagged`` is True when the verdict rests on
    suspicious raters: a flagged rater is in ``flipped_by``, removing the flagged raters changes it,
    removing some of the suspects (``Robustness.suspects``) gives a verdict for another candidate or
    one where there was none, or the plain and robust aggregates disagree; ``reasons`` says which.
    """

    criterion: str
    task: TaskType
    a: str
    b: str
    better: str | None  # the plain verdict
    robust_better: str | None
    flipped_by: tuple[str, ...]
    without_flagged: str | None = None
    flagged: bool
    reasons: tuple[str, ...] = ()


BotAdjustment = Literal["none", "holm"]
"""How a rater's bot-score p is compared with ``bot_p_max``: as it is (receipts written before the adjustment),
or Holm-adjusted over every scored rater of the aggregate, so ``bot_p_max`` is the chance that any honest
rater of the set is flagged (family-wise)."""


class Robustness(Frozen):
    """Do the conclusions survive one rater less, a robust aggregate and raters whose answers follow the signal?

    The suspects are the ``suspects_max`` included raters with the lowest bot-score p; every verdict is
    recomputed without each non-empty subset of them that leaves the minimum raters for a verdict. They
    are a ranking, not an accusation: a suspect is not flagged.
    """

    predictors: tuple[str, ...]  # signal (and evaluation) measures of each rated file the bot score tried
    permutations: int
    bot_p_max: float  # a rater is flagged when the bot score's p (``bot_adjustment``) is at most this ...
    bot_r_min: float  # ... and the best predictor's |correlation| at least this
    trim: float  # the fraction of raters trimmed from each end in ``robust_deltas``
    bot_scores: tuple[RaterBotScore, ...]
    robust_deltas: tuple[RobustDelta, ...]
    verdicts: tuple[VerdictCheck, ...]
    flagged_raters: tuple[str, ...]
    flagged_verdicts: int
    bot_adjustment: BotAdjustment = "none"
    suspects: tuple[str, ...] = ()  # most suspicious first
    suspects_max: int = 0  # 0 in receipts written before suspects were recorded
