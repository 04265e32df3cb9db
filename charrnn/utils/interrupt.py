"""Stopping cleanly on Ctrl-C, SIGTERM or SIGHUP (a closed terminal). In training the first signal only
asks for a stop (:class:`GracefulStop`), taken after the step; droppable work runs in
:meth:`GracefulStop.raising`. Elsewhere :func:`raise_on_termination` makes SIGTERM and SIGHUP raise, as
SIGINT does, so that cleanups run and no temporary file outlives the process."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from types import FrameType

EXIT_CODES = {"SIGHUP": 129, "SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Signalled(BaseException):
    """A signal arrived (``signal_name``); like ``KeyboardInterrupt``, ``except Exception`` lets it by."""

    def __init__(self, signal_name: str):
        super().__init__(signal_name)
        self.signal_name = signal_name


class Terminated(Signalled):
    """SIGTERM or SIGHUP arrived outside training."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signal.Signals(signum).name)


@contextmanager
def _handling(signums: tuple[int, ...], handler: Callable[[int, FrameType | None], None]) -> Iterator[None]:
    """Within the block ``handler`` takes ``signums``: from the main thread, which alone can install one."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, handler) for signum in signums}
    try:
        yield
    finally:
        for signum, earlier in previous.items():
            signal.signal(signum, earlier)


def raise_on_termination() -> AbstractContextManager[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only)."""
    return _handling((signal.SIGTERM, signal.SIGHUP), _raise_terminated)


class StopRequested(Signalled):
    """A stop signal arrived inside :meth:`GracefulStop.raising`: the work in the block is dropped."""


class GracefulStop:
    """Within it, the first SIGINT/SIGTERM/SIGHUP is a stop request named in ``signal_name`` (None until
    then); a second SIGINT raises ``KeyboardInterrupt`` at once. Off the main thread it does nothing."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._raising = False

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.signal_name is not None and signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signal_name = signal.Signals(signum).name
        if self._raising:
            self._raising = False  # raised once: the handler of the work dropped runs undisturbed
            raise StopRequested(self.signal_name)

    @contextmanager
    def raising(self) -> Iterator[None]:
        """Within the block a stop signal, or one received before it, raises :class:`StopRequested` at
        once: for work that can be dropped (an evaluation), which a stop would otherwise wait for."""
        if self.signal_name is not None:
            raise StopRequested(self.signal_name)
        self._raising = True
        try:
            yield
        finally:
            self._raising = False

    def __enter__(self) -> GracefulStop:
        self._handlers = _handling(STOP_SIGNALS, self._handle)
        self._handlers.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._handlers.__exit__(None, None, None)


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Run the block whole: a stop signal that arrives during it takes effect as it ends (from the main
    thread, where Python runs signal handlers; elsewhere the block runs as it is)."""
    received: list[int] = []
    try:
        with _handling(STOP_SIGNALS, lambda signum, frame: received.append(signum)):
            yield
    finally:
        if received:
            signal.raise_signal(received[0])
