"""Progress of a long run: done / running / queued, rate and time left, in one format.

The same format is written by tools/cli/progress.hpp (`format_progress`), which renders the
status records this package appends to `--progress-file`:

    #status done=12 running=2 queued=86 elapsed=3.5 | 2 failed

A line that starts with STATUS_MARKER is a status record (redrawn in place on a terminal,
printed every few seconds otherwise); every other line is a message printed as it is. The
text after " | " is appended to the rendered status unchanged.
"""
from __future__ import annotations

import math
import sys
import time
from typing import Optional, TextIO

STATUS_MARKER = "#status "


def format_duration(seconds: float) -> str:
    """42s, 3m05s, 2h07m: the two leading units, zero-padded after the first."""
    s = max(0, math.floor(seconds + 0.5))  # halves up, as C++'s llround
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


def format_rate(per_second: float) -> str:
    """Per second from one a second up, per minute below (0.4/s reads worse than 24/min)."""
    if per_second >= 1.0:
        return f"{per_second:.1f}/s"
    return f"{per_second * 60:.1f}/min"


def format_status(done: int, running: int, queued: int, elapsed_s: float,
                  done_at_start: int = 0) -> str:
    """done 12/100 running 2 queued 86 | 3.4/s | 26s left. The rate counts what was done since
    the start (less `done_at_start`, e.g. what a resumed run found settled)."""
    total = done + running + queued
    head = f"done {done}/{total} running {running} queued {queued}"
    fresh = done - done_at_start
    if fresh <= 0 or elapsed_s <= 0:
        return f"{head} | rate - | time left -"
    rate = fresh / elapsed_s
    return f"{head} | {format_rate(rate)} | {format_duration((running + queued) / rate)} left"


def status_record(done: int, running: int, queued: int, elapsed_s: float, tail: str = "") -> str:
    """The machine-readable status line for a progress file (without the newline)."""
    line = f"{STATUS_MARKER}done={done} running={running} queued={queued} elapsed={elapsed_s:.3f}"
    return f"{line} | {tail}" if tail else line


class Reporter:
    """Messages and status lines of one run. With a progress file, both go there (status lines
    as records, at most every `file_interval_s`, the C++ side draws them); without one, to
    `stream`: a status redrawn in place on a terminal, otherwise a plain line every
    `plain_interval_s`. Messages are also printed on `stream` when there is a file, as before."""

    def __init__(self, path: Optional[str] = None, stream: Optional[TextIO] = None,
                 file_interval_s: float = 0.5, plain_interval_s: float = 10.0):
        self.file = open(path, "a", buffering=1) if path else None
        self.stream = stream or sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.file_interval_s = file_interval_s
        self.plain_interval_s = plain_interval_s
        self._last_status = None      # (done, running, queued, elapsed, tail) not yet shown
        self._shown_at = float("-inf")
        self._drawn = False           # a status line is on the terminal, under the cursor

    def __call__(self, message: str) -> None:
        if self._drawn:
            self.stream.write("\r\x1b[K")
        print(f"[corpus] {message}", file=self.stream, flush=True)
        if self._drawn:
            self._draw()
        if self.file:
            self.file.write(message + "\n")

    def status(self, done: int, running: int, queued: int, elapsed_s: float, tail: str = "",
               force: bool = False) -> None:
        """Report counts; shown now if the interval has passed (or `force`), else kept."""
        self._last_status = (done, running, queued, elapsed_s, tail)
        interval = self.file_interval_s if self.file or self.tty else self.plain_interval_s
        now = time.monotonic()
        if not force and now - self._shown_at < interval:
            return
        self._shown_at = now
        if self.file:
            self.file.write(status_record(*self._last_status) + "\n")
        elif self.tty:
            self._draw()
        else:
            print(f"[corpus] {self._text()}", file=self.stream, flush=True)

    def finish(self) -> None:
        """Shows the last status if it was held back, and ends an in-place line."""
        if self._last_status is not None:
            self.status(*self._last_status, force=True)
        if self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False
        self._last_status = None

    def _text(self) -> str:
        done, running, queued, elapsed, tail = self._last_status
        text = format_status(done, running, queued, elapsed)
        return f"{text} | {tail}" if tail else text

    def _draw(self) -> None:
        self.stream.write(f"\r[corpus] {self._text()}\x1b[K")
        self.stream.flush()
        self._drawn = True
