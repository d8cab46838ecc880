"""Sliding-window helpers."""


def sliding_sums(xs: list[int], k: int) -> list[int]:
    """Sums of every window of `k` consecutive items."""
    if k <= 0:
        raise ValueError("k must be positive")
    return [sum(xs[i : i + k]) for i in range(len(xs) - k)]


def moving_max(xs: list[int], k: int) -> list[int]:
    """Largest item of every window of `k` consecutive items."""
    return [max(xs[i : i + k]) for i in range(len(xs) - k + 1)]
