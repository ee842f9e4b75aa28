"""The progress bar of ``dt.explore``: a ``rich`` bar over the budget with the candidates done, the
best time so far and the time left. It appears only on a terminal, and only once the exploration
has run for :data:`DELAY_S` seconds (a short one prints nothing); it is transient (erased at the end)."""

from __future__ import annotations

import math

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn

__all__ = ["ExploreProgress", "DELAY_S"]

#: explorations shorter than this show no bar
DELAY_S = 2.0


class ExploreProgress:
    """A progress bar for one exploration of ``name`` with ``budget`` seconds.

    ``enabled=False`` makes every method a no-op; so does a ``console`` (default: standard error)
    that is not a terminal. The bar never refreshes from a thread of its own (the exploration
    forks worker processes, which must not inherit a lock held by such a thread): call
    :meth:`update` often (the explorer does while it waits for workers)."""

    def __init__(self, name: str, budget: float, enabled: bool = True, console: Console | None = None,
                 delay_s: float = DELAY_S):
        self.name, self.budget, self.delay_s = name, float(budget), delay_s
        console = console if console is not None else Console(stderr=True)
        self.enabled = bool(enabled) and console.is_terminal
        self.console = console
        self.bar: Progress | None = None
        self.task = None

    def _open(self) -> None:
        self.bar = Progress(TextColumn("explore [bold]{task.fields[name]}[/]"), BarColumn(),
                            TextColumn("{task.fields[done]} candidates, best {task.fields[best]}, "
                                       "{task.fields[left]} left"),
                            console=self.console, transient=True, auto_refresh=False)
        self.task = self.bar.add_task("explore", total=max(self.budget, 1e-9), name=self.name, done=0,
                                      best="-", left="")
        self.bar.start()

    def update(self, elapsed: float, done: int, best_us: float) -> None:
        """Show ``done`` candidates, the best median ``best_us`` (µs; inf when none yet) and the
        time left after ``elapsed`` seconds."""
        if not self.enabled or elapsed < self.delay_s:
            return
        if self.bar is None:
            self._open()
        best = f"{best_us:,.1f} µs" if math.isfinite(best_us) else "-"
        left = f"{max(0.0, self.budget - elapsed):.0f} s"
        self.bar.update(self.task, completed=min(elapsed, self.budget), done=done, best=best, left=left)
        self.bar.refresh()

    def close(self) -> None:
        """Erase the bar (if it was shown)."""
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
