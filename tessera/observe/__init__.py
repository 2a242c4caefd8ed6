"""Observability (OBSERVE.md): logging, crash capture and repro packs."""

from .crash import capture, record
from .log import LOGGER, tail

__all__ = ["LOGGER", "capture", "record", "tail"]
