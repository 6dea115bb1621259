"""The plugin's one state per pytest process (controller or xdist worker): options, capture device, golden report."""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Optional

import pytest

from .._io import write_atomic
from ..errors import CaptureError, FileError, GoldenError, GraphCaptureError, UsageError
from ..golden import store
from ..golden.change import cut_lines
from ..golden.gate import CheckOutcome
from ..golden.report import FileRecord, KeyRecord, SessionReport, picture_place, write_markdown
from ..golden.store import GoldenLock, ci_environment, reset_folder, reset_harvest
from ..keys import CaptureKey, safe_name
from ..naming import HARVEST_DIFF_NAME
from .settings import BATCH_SIZES, GOLDEN_OUT, REPORT_JSON, REPORT_MD, Options

_WORKER_OUTPUT_KEY = "graphcapture_golden_report"


class Session:
    """The options, capture device and golden report of one pytest process; a plugin hearing its test reports."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.options = options = Options.from_config(config)
        self.is_worker = hasattr(config, "workerinput")
        self._device: Any = None
        self._platform: Optional[str] = None
        self._check_paths()
        self._written: list[Path] = []  # report files written at session end (only those are announced)
        self._lock = GoldenLock(options.golden_dir)
        self.report = SessionReport(
            golden_dir=self.display(options.golden_dir),
            update_mode=options.update,
            obtained_dir=self.display(options.golden_out) if options.golden_out else None,
        )
        self._test_passed: dict[str, bool] = {}  # nodeid -> whether every phase passed
        self._collected: set[str] = set()  # node ids of every collected test (xdist: as workers report them)
        self._protected: set[str] = set()  # skipped or broken collectors: their goldens are never orphans
        self._deselected = False
        self._finalized = False
        self._diffs: Optional[Path] = None
        if options.update:
            ci_var = ci_environment()
            if ci_var is not None:
                raise UsageError(
                    f"--update-golden is refused on CI (environment variable {ci_var} is set): goldens are "
                    f"reviewed changes; harvest the obtained summaries with --golden-out DIR and commit them instead"
                )
            if not self.is_worker:  # xdist workers write on behalf of their controller, which holds the lock
                try:
                    self._lock.acquire()
                except GoldenError as exc:
                    raise UsageError(f"--update-golden: {exc}") from None

    # What conftest code reads through ``graph_capture_config`` (docs/adapting.md).
    out_dir = property(lambda self: self.options.out_dir)
    trace = property(lambda self: self.options.trace)
    batch_sizes = property(lambda self: self.options.batch_sizes)

    # ------------------------------------------------------------------ capture

    @property
    def device(self) -> Any:
        """The capture device: ``auto`` picks the GPU when torch sees one."""
        if self._device is None:
            import torch

            choice = self.options.device
            if choice == "cuda" and not torch.cuda.is_available():
                raise UsageError(
                    "--graph-capture-device=cuda, but torch.cuda.is_available() is False "
                    f"(torch {torch.__version__}); use auto or cpu on this machine"
                )
            gpu = choice == "cuda" or (choice == "auto" and torch.cuda.is_available())
            self._device = torch.device("cuda", torch.cuda.current_device()) if gpu else torch.device("cpu")
        return self._device

    @property
    def platform(self) -> str:
        """Platform key: the option, else the platform hook, else the detected device."""
        if self._platform is None:
            from ..engine.backend import detect_platform

            key = self.options.platform
            if not key:
                key = self.config.hook.pytest_graphcapture_platform(config=self.config, device=self.device)
            self._platform = key or detect_platform(self.device)
        return self._platform

    def capture_settings(
        self,
        *,
        trace: Optional[str] = None,
        summarize: bool = True,
        progress: Optional[Callable[[str], None]] = None,
        trace_group: Optional[str] = None,
    ) -> Any:
        """The engine's CaptureSettings for one capture; the session's batch sizes apply to every runner."""
        from ..engine.backend import environment_from_device
        from ..engine.capture import CaptureSettings

        options = self.options
        trace = trace or options.trace
        environment = dict(environment_from_device(self.device))
        # What the profiler actually recorded: stack/flops/memory only go into exported per-bs traces.
        environment["profiler_flags"] = ["record_shapes"] + (
            sorted(options.profiler_flags) if trace == "per-bs" else []
        )
        return CaptureSettings(
            trace=trace,
            summarize=summarize,
            out_dir=options.out_dir,
            platform=self.platform,
            level="exact",
            replay=options.replay,
            profiler_flags=options.profiler_flags,
            environment=environment,
            progress=progress,
            batch_sizes=tuple(options.batch_sizes) if options.batch_sizes else None,
            batch_sizes_origin=options.where(BATCH_SIZES),
            trace_group=trace_group,
        )

    # ------------------------------------------------------------------ hooks this session hears as a plugin

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember which tests passed every phase (the controller also hears xdist workers' reports)."""
        if report.failed:
            self._test_passed[report.nodeid] = False
        elif report.when == "call":
            self._test_passed.setdefault(report.nodeid, report.passed)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if not report.passed:  # a skipped or broken module: its goldens are not orphans
            self._protected.add(report.nodeid)

    def pytest_deselected(self, items: Any) -> None:
        self._deselected = True

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self._collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Any) -> None:
        self._collected.update(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: merge a finished worker's report."""
        data = getattr(node, "workeroutput", {}).get(_WORKER_OUTPUT_KEY)
        if data is not None:
            self.report.merge(data)

    # ------------------------------------------------------------------ the golden session

    def _check_paths(self) -> None:
        """Refuse, before any test runs, output paths that cannot be written as the options say."""
        options = self.options
        for setting, path, want_dir in (
            (GOLDEN_OUT, options.golden_out, True),
            (REPORT_MD, options.report_md, False),
            (REPORT_JSON, options.report_json, False),
        ):
            if path is None:
                continue
            where = options.where(setting)
            if want_dir and path.exists() and not path.is_dir():
                raise UsageError(f"{where} {self.display(path)}: is a file, expected a folder for the summaries")
            if not want_dir and path.is_dir():
                raise UsageError(f"{where} {self.display(path)}: is a folder, expected a file name for the report")
        if options.golden_out is not None:
            golden = options.golden_dir.resolve()
            if options.golden_out.resolve() == golden or options.golden_out.resolve() in golden.parents:
                raise UsageError(
                    f"{GOLDEN_OUT.option} {self.display(options.golden_out)}: holds the golden dir "
                    f"{self.display(options.golden_dir)}; the harvest goes to a folder of its own"
                )

    def start(self) -> None:
        """Controller only, before any test: empty the harvest folder (only one marked as ours) and the diff folder."""
        if self.is_worker:
            return
        out = self.options.golden_out
        if out is not None:
            reset_harvest(out, f"{self.options.where(GOLDEN_OUT)} {self.display(out)}")
        reset_folder(self._diff_dir())

    def finish(self, session: pytest.Session, exitstatus: int) -> None:
        """Session end: a worker hands its report to the controller; the controller finalizes it."""
        if self.is_worker:
            self.config.workeroutput[_WORKER_OUTPUT_KEY] = self.report.to_dict()  # type: ignore[attr-defined]
            return
        self._finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if self.report.errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked-for output is missing: not a success

    def release(self) -> None:
        """End of the session: let the next writer of the golden tree in."""
        if self.config.pluginmanager.is_registered(self):
            self.config.pluginmanager.unregister(self)
        self._lock.release()

    def display(self, path: Path) -> str:
        """``path`` relative to the invocation dir when below it, else absolute."""
        try:
            return Path(path).relative_to(self.config.invocation_params.dir).as_posix()
        except ValueError:
            return str(path)

    def _rerun_command(self, nodeid: str) -> str:
        """``pytest <test>`` running ``nodeid`` from the directory pytest was invoked in (node ids are rootdir-relative)."""
        module, sep, rest = nodeid.partition("::")
        path = Path(self.config.rootpath) / module
        try:
            target = os.path.relpath(path, self.config.invocation_params.dir)
        except ValueError:  # another drive (Windows): only the absolute path works
            target = str(path)
        return f"pytest {shlex.quote(Path(target).as_posix() + sep + rest)}"

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.options.golden_dir).as_posix()

    def _diff_dir(self) -> Path:
        """Where full diffs go without --golden-out: the pytest cache, else one temp folder per rootdir."""
        if self._diffs is None:
            cache = getattr(self.config, "cache", None)
            if cache is not None:
                self._diffs = Path(cache.mkdir("graphcapture-diffs"))
            else:
                root = hashlib.sha256(str(self.config.rootpath).encode()).hexdigest()[:12]
                user = str(os.getuid()) if hasattr(os, "getuid") else "user"
                self._diffs = Path(tempfile.gettempdir()) / f"graphcapture-diffs-{user}" / root
        return self._diffs

    def _finalize(self, interrupted: bool = False) -> None:
        """Controller only: list unused goldens (delete them under --update-golden=all), write the reports.

        Only folders of tests that passed every phase are looked at; an interrupted session deletes nothing.
        """
        if self._finalized or self.is_worker:
            return
        self._finalized = True
        options = self.options
        used = {(f.platform, f.path) for f in self.report.used}
        folders = [(f.platform, f.path, self._test_passed.get(f.nodeid, False)) for f in self.report.folders]
        delete = options.update == "all" and not interrupted
        for platform, path in store.unused_goldens(options.golden_dir, folders, used, self.selected()):
            self._unused(FileRecord(platform, self.rel(path)), path, delete=delete)
        if self._whole_suite():
            self._orphans(delete=delete)
        if options.report_md is not None and options.golden_out is not None and self.report.folders:
            self._write_picture(options.report_md, options.golden_out)
        for setting, target in ((REPORT_MD, options.report_md), (REPORT_JSON, options.report_json)):
            if target is None:
                continue
            try:
                if setting is REPORT_MD:  # added to what the file holds: a step summary keeps earlier steps
                    write_markdown(target, self.report.markdown())
                else:
                    write_atomic(target, self.report.to_json())
            except FileError as exc:
                self.report.errors.append(f"{setting.option} {self.display(target)}: not written: {exc.problem}")
            else:
                self._written.append(target)

    def selected(self) -> Optional[Callable[[CaptureKey], bool]]:
        """Whether the batch-size selection lets a key be captured; None when nothing narrows it."""
        sizes = self.options.batch_sizes
        return None if sizes is None else (lambda key: key.batch_size in sizes)

    def _whole_suite(self) -> bool:
        """Whether this run collected the whole suite, so a golden of no collected test is an orphan."""
        from _pytest.config import Config

        option = self.config.option
        narrowed = any(
            getattr(option, name, None)
            for name in ("keyword", "markexpr", "deselect", "ignore", "ignore_glob", "lf", "stepwise", "collectonly")
        )
        args_given = self.config.args_source == Config.ArgsSource.ARGS
        return not (args_given or narrowed or self._deselected) and bool(self._collected)

    def _orphans(self, *, delete: bool) -> None:
        """Report (or, deleting, remove) the goldens of no collected test."""
        from ..golden.store import orphaned_goldens

        listed = {(f.platform, f.path) for f in self.report.unused + self.report.deleted}
        for platform, path in orphaned_goldens(self.options.golden_dir, self._collected, self._protected):
            if (platform, self.rel(path)) not in listed:
                self._unused(FileRecord(platform, self.rel(path), orphan=True), path, delete=delete)

    def _unused(self, entry: FileRecord, path: Path, *, delete: bool) -> None:
        """Delete an unused golden (listing it as deleted), or list it as unused when not deleting or that fails."""
        if delete:
            try:
                store.remove_golden(path, self.options.golden_dir)
                self.report.deleted.append(entry)
                return
            except GoldenError as exc:
                warnings.warn(pytest.PytestWarning(str(exc)), stacklevel=1)
        self.report.unused.append(entry)

    def _write_picture(self, report_md: Path, out_dir: Path) -> None:
        """The HTML kernel × batch-size picture the Markdown report links or names."""
        from ..tools.picture import session_picture

        golden_dir = self.options.golden_dir
        target, link = picture_place(report_md, out_dir)
        try:
            page = session_picture(
                out_dir,
                golden_dir,
                sorted({f.path for f in self.report.folders}),
                level=self.options.level,
                source=f"obtained summaries in {self.display(out_dir)} against goldens in {self.display(golden_dir)}",
            )
            write_atomic(target, page)
        except GraphCaptureError as exc:
            warnings.warn(pytest.PytestWarning(f"graph capture picture not written: {exc}"), stacklevel=1)
            return
        self.report.picture, self.report.picture_file = link, None if link else self.display(target)

    def terminal_summary(self, reporter: Any, exitstatus: int) -> None:
        """The controller's golden summary at the end of the terminal output."""
        if self.is_worker:
            return
        self._finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
        if self.report.empty:
            return
        reporter.write_sep("=", "graph capture goldens")
        lines = self.report.terminal_lines(verbose=self.config.getoption("verbose", 0) > 0)
        for line in lines + [f"report written to {self.display(target)}" for target in self._written]:
            reporter.write_line(line)

    # ------------------------------------------------------------------ one check's outcome

    def record(self, nodeid: str, outcome: CheckOutcome, result: Any) -> None:
        """Add every key of ``outcome`` to the report; fail the test with the failure text when a key failed."""
        metrics = {kr.key: kr.metrics.to_dict() for kr in result if getattr(kr, "metrics", None) is not None}
        for message in outcome.warnings:  # output that could not be written: the run fails at its end
            self.report.errors.append(message)
            warnings.warn(pytest.PytestWarning(message), stacklevel=3)
        for key in outcome.keys:
            status = "failed" if key.outcome == "passed" and key.failed else key.outcome
            self.report.add_record(
                KeyRecord(
                    nodeid,
                    outcome.platform,
                    key.label,
                    self.rel(key.golden),
                    status,
                    key.incomplete,
                    metrics.get(key.key),
                )
            )
        if outcome.unchecked:  # a narrowed run: these goldens are neither checked nor unused, and it says so
            for path, _why in outcome.unchecked:
                self.report.mark_used(outcome.platform, self.rel(path))
            for why in dict.fromkeys(why for _, why in outcome.unchecked):
                paths = [p.name for p, w in outcome.unchecked if w == why]
                more = f", … +{len(paths) - 3} more" if len(paths) > 3 else ""
                self.report.notes.append(f"{nodeid}: {len(paths)} golden(s), {why}: {', '.join(paths[:3])}{more}")
        if not outcome.failed:
            return
        # The full per-batch-size diff goes beside the harvested goldens, else to the session's diff folder.
        diff_path: Optional[Path] = (
            outcome.out_folder / HARVEST_DIFF_NAME
            if outcome.out_folder is not None
            else self._diff_dir() / f"{safe_name(nodeid)}.txt"
        )

        def parts(where: Optional[Path]) -> tuple[str, list[str], list[str]]:
            return outcome.failure_parts(
                rerun=self._rerun_command(nodeid),
                display=lambda p: self.display(Path(p)),
                ci_var=ci_environment(),
                full_diff=self.display(where) if where is not None else None,
            )

        head, body, tail = parts(diff_path)
        per_key = outcome.per_key_lines()  # the full record: every batch size's own diff
        full = [head, *per_key, *tail]
        self.report.add_failure(nodeid, outcome.platform, "\n".join([head, *body, *tail]) + "\n")  # merged as shown
        shown = cut_lines(body, None)
        if shown != body or body != per_key:
            if not _write(diff_path, full):
                head, body, tail = parts(None)  # no file to point at
                diff_path = None
            shown = cut_lines(body, self.display(diff_path) if diff_path else None)
            if diff_path and shown == body:
                shown.append(f"per-batch-size diff in {self.display(diff_path)}")
        pytest.fail("\n".join([head, *shown, *tail]), pytrace=False)


def _write(path: Optional[Path], lines: list[str]) -> bool:
    if path is None:
        return False
    try:
        write_atomic(path, "\n".join(lines) + "\n")
    except FileError:
        return False
    return True


def short_error(excinfo: Optional[pytest.ExceptionInfo]) -> Optional[str]:
    """A plugin error as one line; a CaptureError (the user's forward failed) adds the user's own frames."""
    if excinfo is None or not excinfo.errisinstance(GraphCaptureError):
        return None
    text = f"{excinfo.typename}: {excinfo.value}"
    if excinfo.errisinstance(CaptureError):
        text += "".join(_user_frames(excinfo.value.cause))
    return text


def _user_frames(error: BaseException, *, limit: int = 5) -> list[str]:
    """The innermost traceback frames of ``error`` outside this plugin, torch and pytest, formatted."""
    import traceback

    import _pytest
    import pluggy

    libraries = [sys.modules[__name__.partition(".")[0]], _pytest, pluggy, sys.modules.get("torch")]
    skip = tuple(str(Path(m.__file__).parent) + os.sep for m in libraries if m is not None)
    frames = [f for f in traceback.extract_tb(error.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return []
    return ["\nin your code (innermost last):\n", *traceback.format_list(frames[-limit:])]


SESSION = pytest.StashKey[Session]()
