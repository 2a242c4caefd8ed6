"""The package version, in one place (read by the disk cache's keys too)."""

__version__ = "0.1.0"
