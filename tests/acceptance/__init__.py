"""Acceptance tier: several real OS processes against one store (STYLE.md, Tests)."""
