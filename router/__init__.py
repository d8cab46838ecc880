"""Routing policies: pure functions of the run's history that pick the next drafter.

May import ralph.domain only."""

from ralph.router.policies import CascadePolicy, FixedPolicy, StallPolicy, Tier, create_router

__all__ = ["CascadePolicy", "FixedPolicy", "StallPolicy", "Tier", "create_router"]
