"""The ``charrnn`` command line: parse the options, call :mod:`charrnn.api`, render the result."""

from charrnn.cli.main import cli, main

__all__ = ["cli", "main"]
