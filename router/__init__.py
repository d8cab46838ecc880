"""Routing policies: pure functions of the run's history that pick the next drafter."""

from router.policies import FixedPolicy, create_router

__all__ = ["FixedPolicy", "create_router"]
