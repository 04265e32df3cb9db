"""Stopping a training run cleanly on Ctrl-C or SIGTERM.

The first SIGINT or SIGTERM only records that a stop was asked for; the training
loop finishes its current step, writes a resumable checkpoint and stops. A second
SIGINT raises ``KeyboardInterrupt`` at once for a user who will not wait; the
checkpoint from before stays intact because every write is atomic.
"""

from __future__ import annotations

import signal
from types import FrameType

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report them


class GracefulStop:
    """A context manager that turns the first SIGINT/SIGTERM into a stop request.

    ``signal_name`` is None until a signal arrives, then ``"SIGINT"`` or ``"SIGTERM"``.
    Only the main thread can install signal handlers; elsewhere this does nothing.
    """

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name

    def __enter__(self) -> GracefulStop:
        for signum in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
