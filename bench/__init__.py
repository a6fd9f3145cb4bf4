"""Kafscale benchmark runner: ``python -m bench [section ...]``."""
