"""The golden gate's per-session state: settings, the golden tree lock, the harvest folder, the report.

One :class:`GoldenSession` lives in each pytest process (controller or xdist
worker), stored in ``config.stash``; the hooks in :mod:`pytest_graphcapture.plugin`
hand off to it.  Nothing here compares summaries: that is
:mod:`pytest_graphcapture.golden.gate`'s.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import tempfile
import warnings
from pathlib import Path
from typing import Callable, Optional

import pytest

from .._io import write_atomic
from ..errors import FileError, GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.change import op_classes, parse_globs
from ..golden.report import FileRecord, SessionReport, picture_place, write_markdown
from ..golden.store import GoldenLock, reset_folder, reset_harvest, unused_goldens
from ..keys import CaptureKey
from . import settings as s


class GoldenSession:
    """The golden gate's settings and report in one pytest process (controller or xdist worker)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.golden_dir: Path = s.resolve_path(config, s.GOLDEN_DIR)  # type: ignore[assignment]
        self.update: Optional[str] = s.resolve(config, s.UPDATE_GOLDEN)
        self.out_dir = s.resolve_path(config, s.GOLDEN_OUT)
        self.level: str = s.resolve(config, s.GOLDEN_LEVEL) or "name"
        #: Which ops lead a failure and which fold as view/metadata ops.
        self.op_classes = op_classes(
            parse_globs(s.resolve(config, s.VIEW_OPS) or ""), parse_globs(s.resolve(config, s.COMPUTE_OPS) or "")
        )
        self.report_md = s.resolve_path(config, s.REPORT_MD)
        self.report_json = s.resolve_path(config, s.REPORT_JSON)
        self.is_worker = hasattr(config, "workerinput")
        sizes, source = s.resolve_with_source(config, s.BATCH_SIZES)
        #: The batch sizes a selection option narrowed every capture to (None: each runner's own).
        self.batch_sizes: Optional[frozenset[int]] = (
            frozenset(s.parse_batch_sizes(sizes, s.where(s.BATCH_SIZES, source))) if sizes else None
        )
        #: The option (or variable, ini key) that narrowed the batch sizes, as messages name it.
        self.batch_sizes_where = f"{s.where(s.BATCH_SIZES, source)}={sizes}"
        self._check_paths()
        #: Report files actually written at session end (only those are announced).
        self.written: list[Path] = []
        self.lock = GoldenLock(self.golden_dir)
        self.report = SessionReport(
            golden_dir=self.display(self.golden_dir),
            update_mode=self.update,
            obtained_dir=self.display(self.out_dir) if self.out_dir else None,
        )
        #: nodeid -> True when every phase of the test passed, False when any failed.
        self.test_passed: dict[str, bool] = {}
        #: Node ids of every collected test (xdist: as the workers report them).
        self.collected: set[str] = set()
        #: Node ids of collectors that were skipped or failed: their goldens are never orphans.
        self.protected: set[str] = set()
        #: Set when a plugin deselected tests: the run did not collect the whole suite.
        self.deselected = False
        self.finalized = False
        self._diff_dir: Optional[Path] = None
        if self.update:
            ci_var = s.ci_environment()
            if ci_var is not None:
                raise UsageError(
                    f"--update-golden is refused on CI (environment variable {ci_var} is set): goldens are "
                    f"reviewed changes; harvest the obtained summaries with --golden-out DIR and commit them instead"
                )
            if not self.is_worker:  # xdist workers write on behalf of their controller, which holds the lock
                try:
                    self.lock.acquire()
                except GoldenError as exc:
                    raise UsageError(f"--update-golden: {exc}") from None

    def _check_paths(self) -> None:
        """Refuse, before any test runs, output paths that cannot be written as the options say."""
        for setting, path, want_dir in (
            (s.GOLDEN_OUT, self.out_dir, True),
            (s.REPORT_MD, self.report_md, False),
            (s.REPORT_JSON, self.report_json, False),
        ):
            if path is None:
                continue
            where = s.where(setting, s.resolve_with_source(self.config, setting)[1])
            if want_dir and path.exists() and not path.is_dir():
                raise UsageError(f"{where} {self.display(path)}: is a file, expected a folder for the summaries")
            if not want_dir and path.is_dir():
                raise UsageError(f"{where} {self.display(path)}: is a folder, expected a file name for the report")
        if self.out_dir is not None:
            golden = self.golden_dir.resolve()
            if self.out_dir.resolve() == golden or self.out_dir.resolve() in golden.parents:
                raise UsageError(
                    f"{s.GOLDEN_OUT.option} {self.display(self.out_dir)}: holds the golden dir "
                    f"{self.display(self.golden_dir)}; the harvest goes to a folder of its own"
                )

    def start(self) -> None:
        """Controller only, before any test: empty the harvest folder and the folder of full diffs.

        What an earlier session left there would mix into this session's harvest,
        picture and diffs.  A harvest folder is only emptied when it is new, empty or
        marked as ours (:data:`HARVEST_MARK`); anything else is refused, so a
        mistyped ``--golden-out`` never deletes a user's files.
        """
        if self.is_worker:
            return
        if self.out_dir is not None:
            self._reset_harvest(self.out_dir)
        reset_folder(self.diff_dir())

    def _reset_harvest(self, folder: Path) -> None:
        where = s.where(s.GOLDEN_OUT, s.resolve_with_source(self.config, s.GOLDEN_OUT)[1])
        reset_harvest(folder, f"{where} {self.display(folder)}")

    def release(self) -> None:
        """End of the session: let the next writer of the golden tree in."""
        self.lock.release()

    def display(self, path: Path) -> str:
        """``path`` relative to the invocation dir when below it, else absolute."""
        try:
            return Path(path).relative_to(self.config.invocation_params.dir).as_posix()
        except ValueError:
            return str(path)

    def rerun_command(self, nodeid: str) -> str:
        """``pytest <test>`` that runs ``nodeid`` from the directory pytest was invoked in.

        Node ids are relative to the rootdir; the user may have run pytest from
        elsewhere (``pytest examples/…`` with the rootdir in ``examples``).
        """
        module, sep, rest = nodeid.partition("::")
        path = Path(self.config.rootpath) / module
        try:
            target = os.path.relpath(path, self.config.invocation_params.dir)
        except ValueError:  # another drive (Windows): only the absolute path works
            target = str(path)
        return f"pytest {shlex.quote(Path(target).as_posix() + sep + rest)}"

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.golden_dir).as_posix()

    def diff_dir(self) -> Path:
        """Where full diffs go when no --golden-out dir is given; emptied when a session starts.

        The pytest cache (``.pytest_cache/d/graphcapture-diffs``), else one folder per
        rootdir under the temp dir: always the same place, never a new one per run.
        """
        if self._diff_dir is None:
            cache = getattr(self.config, "cache", None)
            if cache is not None:
                self._diff_dir = Path(cache.mkdir("graphcapture-diffs"))
            else:
                root = hashlib.sha256(str(self.config.rootpath).encode()).hexdigest()[:12]
                user = str(os.getuid()) if hasattr(os, "getuid") else "user"
                self._diff_dir = Path(tempfile.gettempdir()) / f"graphcapture-diffs-{user}" / root
        return self._diff_dir

    def note_test(self, report: pytest.TestReport) -> None:
        """Remember which tests passed every phase (the controller also sees xdist workers' reports)."""
        if report.failed:
            self.test_passed[report.nodeid] = False
        elif report.when == "call":
            self.test_passed.setdefault(report.nodeid, report.passed)

    def finalize(self, interrupted: bool = False) -> None:
        """Controller only: find unused goldens (delete them under --update-golden), write reports.

        Only the folders of tests that passed every phase are looked at (see
        :func:`~pytest_graphcapture.golden.store.unused_goldens`); an interrupted
        session deletes nothing.
        """
        if self.finalized or self.is_worker:
            return
        self.finalized = True
        used = {(f.platform, f.path) for f in self.report.used}
        folders = [(f.platform, f.path, self.test_passed.get(f.nodeid, False)) for f in self.report.folders]
        delete = self.update == "all" and not interrupted
        for platform, path in unused_goldens(self.golden_dir, folders, used, self.selected()):
            self._unused(FileRecord(platform, self.rel(path)), path, delete=delete)
        if self.whole_suite():
            self._orphans(delete=delete)
        if self.report_md is not None and self.out_dir is not None and self.report.folders:
            self._write_picture(self.report_md, self.out_dir)
        for setting, target in ((s.REPORT_MD, self.report_md), (s.REPORT_JSON, self.report_json)):
            if target is None:
                continue
            try:
                if setting is s.REPORT_MD:  # added to what the file holds: a step summary keeps earlier steps
                    write_markdown(target, self.report.markdown())
                else:
                    write_atomic(target, self.report.to_json())
            except FileError as exc:
                self.report.errors.append(f"{setting.option} {self.display(target)}: not written: {exc.problem}")
            else:
                self.written.append(target)

    def selected(self) -> Optional[Callable[[CaptureKey], bool]]:
        """Whether a key is one this run's selection options let be captured; None when nothing narrows them.

        A golden of a key they left out is not unused, as the goldens of deselected tests are not.
        """
        sizes = self.batch_sizes
        return None if sizes is None else (lambda key: key.batch_size in sizes)

    def whole_suite(self) -> bool:
        """Whether this run collected the whole suite: no paths or node ids given, nothing selected out.

        Only then can a golden of no collected test be told to belong to a deleted
        or renamed test rather than to one this run left out.
        """
        from _pytest.config import Config

        option = self.config.option
        narrowed = any(
            getattr(option, name, None)
            for name in ("keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf", "stepwise", "collectonly")
        )
        return (
            self.config.args_source != Config.ArgsSource.ARGS
            and not narrowed
            and not self.deselected
            and bool(self.collected)
        )

    def _orphans(self, *, delete: bool) -> None:
        """Report (or, deleting, remove) the goldens of no collected test."""
        from ..golden.store import orphaned_goldens

        listed = {(f.platform, f.path) for f in self.report.unused + self.report.deleted}
        for platform, path in orphaned_goldens(self.golden_dir, self.collected, self.protected):
            if (platform, self.rel(path)) not in listed:
                self._unused(FileRecord(platform, self.rel(path), orphan=True), path, delete=delete)

    def _unused(self, entry: FileRecord, path: Path, *, delete: bool) -> None:
        """Delete an unused golden (listing it as deleted), or list it as unused when not deleting or that fails."""
        if delete:
            try:
                store.remove_golden(path, self.golden_dir)
                self.report.deleted.append(entry)
                return
            except GoldenError as exc:
                warnings.warn(pytest.PytestWarning(str(exc)), stacklevel=1)
        self.report.unused.append(entry)

    def _write_picture(self, report_md: Path, out_dir: Path) -> None:
        """The HTML kernel × batch-size picture the Markdown report links or names (see :func:`picture_place`)."""
        from ..tools.picture import session_picture

        target, link = picture_place(report_md, out_dir)
        try:
            page = session_picture(
                out_dir,
                self.golden_dir,
                sorted({f.path for f in self.report.folders}),
                level=self.level,
                source=f"obtained summaries in {self.display(out_dir)} "
                f"against goldens in {self.display(self.golden_dir)}",
            )
            write_atomic(target, page)
        except GraphCaptureError as exc:
            warnings.warn(pytest.PytestWarning(f"graph capture picture not written: {exc}"), stacklevel=1)
            return
        self.report.picture, self.report.picture_file = link, None if link else self.display(target)

    def terminal_lines(self) -> list[str]:
        lines = self.report.terminal_lines(verbose=self.config.getoption("verbose", 0) > 0)
        for target in self.written:
            lines.append(f"report written to {self.display(target)}")
        return lines
