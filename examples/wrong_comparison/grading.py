"""Letter grades."""

BOUNDARIES = [(90, "A"), (80, "B"), (70, "C"), (60, "D")]


def letter(score: float) -> str:
    """The letter grade for a score out of 100; boundaries are inclusive."""
    if not 0 <= score <= 100:
        raise ValueError(f"score out of range: {score}")
    for bound, grade in BOUNDARIES:
        if score > bound:
            return grade
    return "F"


def summary(scores: list[float]) -> dict[str, int]:
    """How many scores got each letter."""
    counts: dict[str, int] = {}
    for score in scores:
        grade = letter(score)
        counts[grade] = counts.get(grade, 0) + 1
    return counts
