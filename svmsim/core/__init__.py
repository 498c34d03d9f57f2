"""Foundations: errors aside, what every floor of svmsim builds on (random streams, time models)."""
