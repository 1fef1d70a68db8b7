"""How a p-value and its family are said wherever one is printed (CLI, dashboard, ratings aggregate, eval report).

A raw p-value of one comparison among many reads as evidence it is not: every printed p carries
the adjusted value beside it, and every table of them one line naming the family, its size and
the adjustment, so a reader never has to know that the verdicts read the adjusted value.
Pure formatting over fields the receipts already hold (``PairedTest``, ``PairedDelta``).
"""

from __future__ import annotations

ADJUSTMENTS: dict[str, str] = {"holm": "Holm", "fdr_bh": "Benjamini-Hochberg", "bonferroni": "Bonferroni"}
"""Display names of the adjustments receipts record."""


STORED_P_FLOOR = 5e-7
"""Listening receipts store p rounded to 6 decimals: a stored 0 means p < 5e-7, never p = 0."""


def format_p(p: float | None) -> str:
    """``3.12e-04``; ``< 5e-07`` for a stored zero; ``n/a`` when there is none."""
    if p is None:
        return "n/a"
    return f"< {STORED_P_FLOOR:.0e}" if p < STORED_P_FLOOR else f"{p:.2e}"


def p_with_adjusted(p: float | None, p_adjusted: float | None, adjustment: str | None) -> str:
    """``p 3.12e-04, Holm-adjusted 1.87e-03``: the raw p-value and the value a verdict reads."""
    if p is None:
        return "p n/a"
    if p_adjusted is None or adjustment is None:
        return f"p {format_p(p)} (unadjusted: in no family)"
    return f"p {format_p(p)}, {ADJUSTMENTS.get(adjustment, adjustment)}-adjusted {format_p(p_adjusted)}"


def family_line(adjustment: str | None, family: str | None, size: int | None, verdict: str = "") -> str:
    """One line naming the family a table's p-values were adjusted over (empty when none was)."""
    if adjustment is None or family is None:
        return ""
    name = ADJUSTMENTS.get(adjustment, adjustment)
    what = "familywise error" if adjustment in ("holm", "bonferroni") else "false discovery rate"
    line = f"p-values adjusted by {name} ({what}) over the family '{family}': {size} test(s)"
    return line + (f"; {verdict}" if verdict else "")
