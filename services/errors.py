"""The root of Parley's user-facing errors: their message says what failed and how to fix it."""


class ParleyError(Exception):
    """An expected failure (service down, index missing, weights absent) with an actionable message."""
