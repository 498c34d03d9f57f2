"""Scenario configuration: the schema of a scenario file, its error messages, loading and overrides."""
