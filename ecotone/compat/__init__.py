"""Compatibility with other environment protocols, both ways (OpenEnv today)."""
