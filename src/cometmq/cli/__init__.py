"""The ``cometmq`` command line: run servers and administer topics and clusters."""

from cometmq.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
