"""What the commands share for people's outputs: the consoles (``err`` on stderr, ``out`` on
stdout) and :func:`emit` (a JSON document or a table), where ``--plot`` writes, the progress bar
of long simulations, and errors, warnings and notes on stderr (:func:`error`, :func:`warn`,
:func:`note`). Text printed through them and table cells are printed as written: rich markup
(``[red]``) is escaped there, once, and the consoles make no emoji of ``:x:`` (a ``FILE.py:NAME``
spec), so no caller escapes its message.

``--plot PATH`` (``simulate``, ``compare``, ``train``) follows one rule, :func:`plot_files`: a path
ending in ``.png`` is the file the (main) figure is written to, and a command that draws more than
one figure writes the others beside it as ``STEM-FIGURE.png``; any other path is a folder (made if
missing) that receives every figure under its fixed name (``FIGURE.png``). A path that exists as a
file but does not end in ``.png``, or that ends in another image format's extension, is refused
before anything runs. The paths a command reports (``"plot"`` in its JSON, ``wrote ...`` on
stderr) are the files written.

:class:`RunProgress` is the bar of ``simulate`` and ``compare``: one bar over every round the
command runs, on stderr, shown only when stderr is a terminal and only once the command has run for
:data:`PROGRESS_AFTER` seconds (quick runs print nothing); it is erased when done, so a terminal
keeps just the table. It never writes to stdout, so ``--json`` stays one document.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

#: stderr console for people; stdout is reserved for --json documents and plain tables. Neither
#: turns ``:name:`` into an emoji: messages hold paths and ``FILE.py:NAME`` specs (``nofile.py:x:``)
err = Console(stderr=True, emoji=False)
# piped output (files, CI logs, README examples) gets a fixed width wide enough for our tables
out = Console(width=None if sys.stdout.isatty() else 160, emoji=False)


def emit(doc, *, as_json: bool, title: str | None = None, columns: list[str] | None = None) -> None:
    """Print ``doc`` (``{"rows": [...]}`` or any JSON-able object) as JSON or as a table. A JSON
    document that is an object says how the command ended (``"exit_code"``: 0 unless given)."""
    if as_json:
        if isinstance(doc, dict) and "exit_code" not in doc:
            doc = {**doc, "exit_code": 0}
        sys.stdout.write(json.dumps(doc, default=_jsonable) + "\n")
        return
    rows = doc.get("rows") if isinstance(doc, dict) else None
    if rows is None:
        out.print_json(json.dumps(doc, default=_jsonable))
        return
    columns = columns or list(dict.fromkeys(k for r in rows for k in r))
    table = Table(title=None if title is None else escape(title))
    numeric = {c for c in columns if all(isinstance(r.get(c), (int, float, type(None))) for r in rows)}
    for c in columns:
        # a key's words as the header (time_s: "time s"), which a narrow terminal wraps at the
        # spaces instead of cutting it short; --json keeps the keys
        header = c.replace("_", " ")
        table.add_column(header, justify="right" if c in numeric else "left",
                         min_width=max(map(len, header.split() or [""])))
    for r in rows:
        table.add_row(*(_fmt(r.get(c)) for c in columns))
    out.print(table)


def _fmt(v) -> str:
    """A table cell: numbers to 4 significant digits, text as it is (rich markup escaped)."""
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}"
    return escape(str(v))


def _jsonable(obj):
    import numpy as np

    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")

PLOT_HELP = ("PNG output: a PATH ending in .png is the file written (other figures, if any, go beside it as"
             " STEM-FIGURE.png); any other PATH is a folder, made if missing, that gets FIGURE.png files.")

#: extensions of other image formats: a --plot path with one of them is refused, not made a folder
_OTHER_IMAGE_SUFFIXES = {".pdf", ".svg", ".svgz", ".jpg", ".jpeg", ".eps", ".ps", ".tif", ".tiff", ".webp", ".gif",
                         ".pgf", ".raw", ".rgba", ".bmp"}

#: seconds a simulate/compare command runs before its progress bar appears
PROGRESS_AFTER = 1.0


def plot_files(path: str | Path, figures: list[str]) -> list[Path]:
    """The files ``--plot path`` writes for ``figures`` (names without ``.png``; the first is the
    main one): ``[path, STEM-f2.png, ...]`` for a ``.png`` path, ``[path/f1.png, path/f2.png, ...]``
    for a folder. Raises ``ValueError`` for a path that can be neither (checked before a run
    starts, so that its result is not lost to a bad plot path)."""
    path = Path(path)
    if path.suffix.lower() == ".png" and not path.is_dir():
        _writable_folder(path.parent, f"--plot {path}")
        return [path] + [path.with_name(f"{path.stem}-{f}.png") for f in figures[1:]]
    if path.exists() and not path.is_dir():
        raise ValueError(f"--plot {path} is a file; give a folder for the PNG plots or a path ending in .png")
    if not path.exists() and path.suffix.lower() in _OTHER_IMAGE_SUFFIXES:
        raise ValueError(f"--plot {path}: plots are PNG files; give a path ending in .png or a folder")
    _writable_folder(path, f"--plot {path}")
    return [path / f"{f}.png" for f in figures]


def _writable_folder(folder: Path, what: str) -> None:
    """Raise ``ValueError`` (before a run starts) unless ``folder`` is, or can be made, a folder
    this process may write in: its nearest existing ancestor is a writable folder."""
    import os

    there = folder
    while not os.path.lexists(there) and there != there.parent:
        there = there.parent
    if not there.is_dir():
        raise ValueError(f"{what}: {there} is not a folder, so nothing can be written under it")
    if not os.access(there, os.W_OK | os.X_OK):
        raise ValueError(f"{what}: {there} is not writable")


def make_parents(paths: list[Path]) -> None:
    """Create the folder(s) the plot files go in."""
    for p in {p.parent for p in paths}:
        p.mkdir(parents=True, exist_ok=True)


class RunProgress:
    """One progress bar over ``total`` rounds made of several runs (schemes x repeats).

    :meth:`run` gives the callback that :func:`gradcode.simulate` calls with the rounds its run has
    completed (``progress=``); the bar adds them to the rounds of the runs before it. The bar starts
    (on :data:`err`, i.e. stderr) once :data:`PROGRESS_AFTER` seconds have passed and only
    when that console is a terminal; :meth:`close` (or leaving the ``with`` block) erases it.
    """

    def __init__(self, total: int, what: str = "simulating"):
        self.total, self.what = int(total), what
        self._t0 = time.monotonic()
        self._bar = None
        self._task = None
        self._label = ""
        self._done = 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, label: str, rounds: int):
        """The ``progress`` callback of the next run (``rounds`` rounds, shown as ``label``)."""
        offset, self._done = self._done, self._done + int(rounds)
        self._label = label
        self._update(offset)
        return lambda done: self._update(offset + int(done))

    def _update(self, completed: int) -> None:
        if self._bar is None:
            if time.monotonic() - self._t0 < PROGRESS_AFTER:
                return

            if not err.is_terminal:
                return
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn(self.what), TextColumn("{task.fields[label]}"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("rounds"), TimeRemainingColumn(),
                                 console=err, transient=True)
            self._task = self._bar.add_task(self.what, total=self.total, label=self._label)
            self._bar.start()
        self._bar.update(self._task, completed=completed, label=self._label)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def error(message: str) -> None:
    """``error: message`` on stderr (rich markup in ``message`` is printed as text)."""
    err.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)


#: exit statuses: bad arguments (refused before any work), a run or computation that failed, SIGINT
EXIT_USAGE, EXIT_FAILED, EXIT_INTERRUPTED = 2, 1, 130


def exit_code_of(exc: BaseException) -> int:
    """:data:`EXIT_USAGE` for bad arguments or input (``ValueError``, ``TypeError``, a missing
    file or extra), :data:`EXIT_INTERRUPTED` for SIGINT, :data:`EXIT_FAILED` for the rest."""
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (ValueError, TypeError, FileNotFoundError, ImportError, MemoryError)):  # too large a request
        return EXIT_USAGE
    return EXIT_FAILED


def fail(exc: BaseException | str, code: int, *, as_json: bool, doc: dict | None = None):
    """The one way a command fails: ``error: ...`` on stderr and, with ``--json``, one JSON
    document on stdout holding ``"error"``, ``"error_type"`` and ``"exit_code"`` (``doc``, e.g.
    the records of the rounds a run completed, gets them added); then exit with ``code``
    (:data:`EXIT_USAGE` for bad arguments, :data:`EXIT_FAILED` for a run that failed,
    :data:`EXIT_INTERRUPTED` after SIGINT)."""
    import typer


    text = exc if isinstance(exc, str) else (str(exc) or type(exc).__name__)
    if isinstance(exc, MemoryError):  # numpy says how much it tried to allocate
        text = f"not enough memory for this run ({text or 'allocation failed'}): use fewer workers (-n) or rounds"
    if isinstance(exc, KeyboardInterrupt):
        text = "interrupted"
    error(text)
    if as_json:
        kind = "error" if isinstance(exc, str) else type(exc).__name__
        emit({**(doc or {}), "error": text, "error_type": kind, "exit_code": code}, as_json=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    """``warning: message`` on stderr (rich markup in ``message`` is printed as text)."""
    err.print(f"[yellow]warning:[/yellow] {escape(message)}", highlight=False, soft_wrap=True)


def plain_warnings() -> None:
    """Python warnings raised while a command runs (gradcode's own: workers sharing cores,
    ignored engine settings, deprecations) as ``warning: message`` lines on stderr, each distinct
    message once, instead of Python's ``file:line: Category: message`` and the source line."""
    import warnings

    seen: set[str] = set()

    def show(message, category, filename, lineno, file=None, line=None):
        text = str(message)
        if text not in seen:
            seen.add(text)
            warn(text)

    warnings.showwarning = show


def note(message: str) -> None:
    """``message`` on stderr, as is (rich markup in it is printed as text)."""
    err.print(escape(message), highlight=False, soft_wrap=True)
