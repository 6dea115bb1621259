"""The pytest side of the golden gate: options, the ``golden`` fixture, updating and the session report.

Loaded by :mod:`pytest_graphcapture.plugin` (``pytest_plugins``); it can also be
loaded alone with ``-p pytest_graphcapture.golden_plugin``.

Settings (command line > environment variable > ini key > default):

``--golden-dir DIR`` (``GRAPH_CAPTURE_GOLDEN_DIR``, ini ``golden_dir``)
    Where goldens live.  Default ``goldens`` relative to the **rootdir**.  A
    relative value is taken relative to the invocation directory when it comes
    from the command line or the environment, and relative to the ini file's
    directory (the rootdir when there is none) when it comes from the ini file.
``--update-golden[=all|new]`` (``GRAPH_CAPTURE_UPDATE_GOLDEN``)
    ``all`` (the bare flag): write every golden the run checks (only when its
    content changed), delete goldens of keys no longer captured in the folders of
    tests that ran.  ``new``: only create missing goldens.  Refused on CI.  Put
    test paths *before* the bare flag (``pytest tests/x.py --update-golden``).
``--golden-out DIR`` (``GRAPH_CAPTURE_GOLDEN_OUT``)
    Also write the obtained summaries under DIR in the golden layout, without
    touching the goldens (allowed on CI: harvest goldens for other hardware).
``--golden-level exact|name|family`` (``GRAPH_CAPTURE_GOLDEN_LEVEL``, default ``name``)
    Kernel-name normalization level of checks that do not pass ``level=``.
``--graph-capture-report FILE.md`` / ``--graph-capture-json FILE``
    Session report as Markdown (with the diffs, for CI job summaries) / JSON.  With
    ``--golden-out`` too, ``FILE.html`` (the kernel × batch-size picture against the
    goldens, :mod:`pytest_graphcapture.picture`) is written beside it and linked.
``--graph-capture-xdist-gpu`` (``GRAPH_CAPTURE_XDIST_GPU=on``)
    Under pytest-xdist, worker ``gwN`` uses visible device ``N mod count``.

Long failure diffs are cut at :data:`golden.MAX_DIFF_LINES` lines; the full diff
is written next to the obtained files when ``--golden-out`` is given, otherwise
under ``<rootdir>/.pytest_cache/d/graphcapture-diffs/`` (a temp dir when the
cache plugin is disabled).
"""

from __future__ import annotations

import os
import re
import shlex
import tempfile
import warnings
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

import pytest

from . import golden as store
from .config import Setting, add_setting, ci_environment, declare, resolve, resolve_with_source
from .errors import GoldenError, GraphCaptureError, UsageError
from .keys import safe_name
from .report import FileRecord, KeyRecord, SessionReport

GOLDEN_DIR = declare(Setting(
    "--golden-dir", "GRAPH_CAPTURE_GOLDEN_DIR",
    "directory of golden files (relative: to the rootdir by default and for the ini key, "
    "to the invocation dir on the command line / in the environment)", default="goldens", metavar="DIR"))
UPDATE_GOLDEN = declare(Setting(
    "--update-golden", "GRAPH_CAPTURE_UPDATE_GOLDEN",
    "write goldens: all (bare flag: create, rewrite changed, delete unused ones) or new (only create missing); "
    "refused on CI", choices=("all", "new"), const="all", metavar="MODE"))
GOLDEN_OUT = declare(Setting(
    "--golden-out", "GRAPH_CAPTURE_GOLDEN_OUT",
    "also write the obtained summaries under DIR in the golden layout, goldens untouched (allowed on CI)",
    metavar="DIR"))
GOLDEN_LEVEL = declare(Setting(
    "--golden-level", "GRAPH_CAPTURE_GOLDEN_LEVEL",
    "kernel-name normalization level of golden checks", default="name",
    choices=("exact", "name", "family"), metavar="LEVEL"))
REPORT_MD = declare(Setting(
    "--graph-capture-report", "GRAPH_CAPTURE_REPORT",
    "write the golden session report as Markdown (with the diffs) to FILE, e.g. for CI job summaries",
    metavar="FILE"))
REPORT_JSON = declare(Setting(
    "--graph-capture-json", "GRAPH_CAPTURE_JSON",
    "write the golden session report as JSON to FILE", metavar="FILE"))
XDIST_GPU = declare(Setting(
    "--graph-capture-xdist-gpu", "GRAPH_CAPTURE_XDIST_GPU",
    "under pytest-xdist, pin worker gwN to visible GPU N mod count", default="off",
    choices=("on", "off"), const="on", metavar="on|off"))

GOLDEN_SETTINGS = (GOLDEN_DIR, UPDATE_GOLDEN, GOLDEN_OUT, GOLDEN_LEVEL, REPORT_MD, REPORT_JSON, XDIST_GPU)
WORKER_OUTPUT_KEY = "graphcapture_golden_report"
_SESSION = pytest.StashKey["GoldenSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("graphcapture", "CUDA-graph capture regression gate (pytest-graphcapture)")
    for setting in GOLDEN_SETTINGS:
        add_setting(group, parser, setting)


# --------------------------------------------------------------------------- session state


def _resolve_path(config: pytest.Config, setting: Setting) -> Optional[Path]:
    value, source = resolve_with_source(config, setting)
    if value is None:
        return None
    path = Path(os.path.expanduser(value))
    if path.is_absolute():
        return Path(os.path.abspath(path))
    if source == "default":
        base = Path(config.rootpath)
    elif source.startswith("ini"):
        base = Path(config.inipath).parent if config.inipath else Path(config.rootpath)
    else:
        base = Path(config.invocation_params.dir)
    return Path(os.path.abspath(base / path))


class GoldenSession:
    """Resolved settings and the report of one pytest process (controller or xdist worker)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.golden_dir: Path = _resolve_path(config, GOLDEN_DIR)  # type: ignore[assignment]
        self.update: Optional[str] = resolve(config, UPDATE_GOLDEN)
        self.out_dir = _resolve_path(config, GOLDEN_OUT)
        self.level: str = resolve(config, GOLDEN_LEVEL) or "name"
        self.report_md = _resolve_path(config, REPORT_MD)
        self.report_json = _resolve_path(config, REPORT_JSON)
        self.is_worker = hasattr(config, "workerinput")
        self.report = SessionReport(golden_dir=self.display(self.golden_dir), update_mode=self.update,
                                    obtained_dir=self.display(self.out_dir) if self.out_dir else None)
        #: nodeid -> True when every phase of the test passed, False when any failed.
        self.test_passed: dict[str, bool] = {}
        self.finalized = False
        self._diff_dir: Optional[Path] = None

    def display(self, path: Path) -> str:
        """``path`` relative to the invocation dir when below it, else absolute."""
        try:
            return Path(path).relative_to(self.config.invocation_params.dir).as_posix()
        except ValueError:
            return str(path)

    def rel(self, path: Path) -> str:
        return Path(path).relative_to(self.golden_dir).as_posix()

    def diff_dir(self) -> Path:
        """Where full diffs go when no --golden-out dir is given (see module docs)."""
        if self._diff_dir is None:
            cache = getattr(self.config, "cache", None)
            if cache is not None:
                self._diff_dir = Path(cache.mkdir("graphcapture-diffs"))
            else:
                self._diff_dir = Path(tempfile.mkdtemp(prefix="graphcapture-diffs-"))
        return self._diff_dir

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Remember which tests passed every phase (the controller also sees xdist workers' reports)."""
        if report.failed:
            self.test_passed[report.nodeid] = False
        elif report.when == "call":
            self.test_passed.setdefault(report.nodeid, report.passed)

    # ----------------------------------------------------------------- end of session

    def finalize(self, interrupted: bool = False) -> None:
        """Controller only: find unused goldens (delete them under --update-golden), write reports.

        Only the folders of tests that passed every phase are looked at: a test that
        failed, errored or never finished may not have checked all of its keys, so its
        goldens are neither unused nor deleted.  An interrupted session deletes nothing.
        """
        if self.finalized or self.is_worker:
            return
        self.finalized = True
        used = {(f.platform, f.path) for f in self.report.used}
        settled: dict[tuple[str, str], bool] = {}
        for folder in self.report.folders:
            place = (folder.platform, folder.path)
            settled[place] = settled.get(place, True) and self.test_passed.get(folder.nodeid, False)
        for (platform, folder_path), passed in sorted(settled.items()):
            if not passed:
                continue
            for path in store.golden_files(self.golden_dir / folder_path):
                rel = self.rel(path)
                if (platform, rel) in used:
                    continue
                entry = FileRecord(platform, rel)
                if self.update == "all" and not interrupted:
                    try:
                        store.remove_golden(path, self.golden_dir)
                        self.report.deleted.append(entry)
                        continue
                    except GoldenError as exc:
                        warnings.warn(pytest.PytestWarning(str(exc)))
                self.report.unused.append(entry)
        if self.report_md is not None and self.out_dir is not None and self.report.folders:
            self._write_picture(self.report_md, self.out_dir)
        for target, text in ((self.report_md, self.report.markdown()), (self.report_json, self.report.to_json())):
            if target is not None:
                try:
                    store.write_atomic(target, text)
                except GoldenError as exc:
                    warnings.warn(pytest.PytestWarning(f"graph capture report not written: {exc}"))


    def _write_picture(self, report_md: Path, out_dir: Path) -> None:
        """The HTML kernel × batch-size picture beside the Markdown report, which links it."""
        from .picture import session_picture

        target = report_md.with_suffix(".html")
        try:
            page = session_picture(out_dir, self.golden_dir, sorted({f.path for f in self.report.folders}),
                                   level=self.level, source=f"obtained summaries in {self.display(out_dir)} "
                                                           f"against goldens in {self.display(self.golden_dir)}")
            store.write_atomic(target, page)
        except GraphCaptureError as exc:
            warnings.warn(pytest.PytestWarning(f"graph capture picture not written: {exc}"))
            return
        self.report.picture = os.path.relpath(target, report_md.parent).replace(os.sep, "/")


def _session(config: pytest.Config) -> GoldenSession:
    session = config.stash.get(_SESSION, None)
    if session is None:
        raise pytest.UsageError("pytest_graphcapture.golden_plugin is not configured")
    return session


# --------------------------------------------------------------------------- GPU pinning


def pin_worker_gpu(worker_id: str, environ: Optional[dict] = None) -> Optional[str]:
    """Pin xdist worker ``gwN`` to visible device ``N mod count``; returns what was done.

    When ``CUDA_VISIBLE_DEVICES`` (or ``HIP_VISIBLE_DEVICES`` / ``ROCR_VISIBLE_DEVICES``)
    lists devices, it is narrowed to the chosen one.  Otherwise the devices are counted
    with torch (NVML, without creating a CUDA context where torch allows it) and
    ``CUDA_VISIBLE_DEVICES`` is set — or, when CUDA is already initialized,
    ``torch.cuda.set_device`` is called.
    """
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    if match is None:
        return None
    n = int(match.group(1))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        value = environ.get(var)
        if value is not None and value.strip():
            devices = [d.strip() for d in value.split(",") if d.strip()]
            chosen = devices[n % len(devices)]
            environ[var] = chosen
            return f"{var}={chosen}"
    import torch

    count_nvml = getattr(torch.cuda, "_device_count_amdsmi" if torch.version.hip else "_device_count_nvml", None)
    count = count_nvml() if callable(count_nvml) else -1
    via_runtime = count < 0
    if via_runtime:
        count = torch.cuda.device_count()
    if count <= 0:
        return None
    index = n % count
    if via_runtime or torch.cuda.is_initialized():
        # The CUDA runtime has read the environment already: select the device instead.
        torch.cuda.set_device(index)
        return f"torch.cuda.set_device({index})"
    environ["CUDA_VISIBLE_DEVICES"] = str(index)
    return f"CUDA_VISIBLE_DEVICES={index}"


# --------------------------------------------------------------------------- configure / finish


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        session = GoldenSession(config)
        pin = resolve(config, XDIST_GPU) == "on"
    except UsageError as exc:
        raise pytest.UsageError(str(exc)) from None
    if session.update:
        ci_var = ci_environment()
        if ci_var is not None:
            raise pytest.UsageError(
                f"--update-golden is refused on CI (environment variable {ci_var} is set): goldens are "
                f"reviewed changes; harvest the obtained summaries with --golden-out DIR and commit them instead")
    if pin and session.is_worker:
        done = pin_worker_gpu(config.workerinput.get("workerid", ""))  # type: ignore[attr-defined]
        if done is None:
            warnings.warn(pytest.PytestWarning(
                "--graph-capture-xdist-gpu: no visible GPU devices, worker not pinned"))
    config.stash[_SESSION] = session
    # Registered per config (not module-level state) so nested in-process runs stay separate.
    config.pluginmanager.register(session, "graphcapture-golden-session")


def pytest_unconfigure(config: pytest.Config) -> None:
    session = config.stash.get(_SESSION, None)
    if session is not None and config.pluginmanager.is_registered(session):
        config.pluginmanager.unregister(session)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    golden_session = session.config.stash.get(_SESSION, None)
    if golden_session is None:
        return
    if golden_session.is_worker:
        session.config.workeroutput[WORKER_OUTPUT_KEY] = golden_session.report.to_dict()  # type: ignore[attr-defined]
        return
    golden_session.finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """xdist controller: merge a finished worker's report."""
    data = getattr(node, "workeroutput", {}).get(WORKER_OUTPUT_KEY)
    if data is not None:
        _session(node.config).report.merge(data)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    golden_session = config.stash.get(_SESSION, None)
    if golden_session is None or golden_session.is_worker:
        return
    golden_session.finalize(interrupted=exitstatus == pytest.ExitCode.INTERRUPTED)
    if golden_session.report.empty:
        return
    terminalreporter.write_sep("=", "graph capture goldens")
    for line in golden_session.report.terminal_lines(verbose=config.getoption("verbose", 0) > 0):
        terminalreporter.write_line(line)
    for target in (golden_session.report_md, golden_session.report_json):
        if target is not None:
            terminalreporter.write_line(f"report written to {golden_session.display(target)}")


# --------------------------------------------------------------------------- the fixture


class GoldenChecker:
    """What the ``golden`` fixture returns; :meth:`check` compares a capture result with its goldens."""

    def __init__(self, session: GoldenSession, nodeid: str) -> None:
        self._session = session
        self._nodeid = nodeid
        self._explicit_rank = False

    def _postprocess(self, summary: Any, label: str) -> Any:
        """Run ``pytest_graphcapture_postprocess_summary`` on the summary dict, re-validate it."""
        hook = getattr(self._session.config.hook, "pytest_graphcapture_postprocess_summary", None)
        if hook is None or not hook.get_hookimpls():
            return summary  # nobody post-processes: skip the dict round trip
        data = summary.to_dict()
        hook(config=self._session.config, summary=data)
        return store.summary_from_dict(data, f"summary of {label} after pytest_graphcapture_postprocess_summary")

    def check(self, result: Any, *, level: Optional[str] = None, ignore_kernels: Sequence[str] = (),
              share_ranks: bool = False,
              ignore_ops: Sequence[str] = (), sections: Optional[Sequence[str]] = None,
              max_launches: Union[int, Mapping[int, int], None] = None) -> None:
        """Compare every key of ``result`` (a CaptureResult) with its golden; fail once listing all mismatches.

        ``level`` defaults to ``--golden-level``; ``ignore_kernels`` / ``ignore_ops``
        are regexes (``re.search``) of names left out on both sides; ``sections``
        is a subset of ``("kernels", "ops", "launches")`` (default: all three).

        Multi-rank results (``world_size > 1``) use per-rank goldens
        ``…_bs_<bs>_rank<r>.json`` (rank 0 included).  ``share_ranks=True`` uses one
        golden without rank suffix for all ranks when their summaries are identical
        (tensor-parallel ranks usually are) and fails naming the ranks that differ.
        ``max_launches`` is a launch budget — one int for every key or
        ``{batch_size: int}`` — checked like a golden's ``launch_budget`` field:
        a capture recording more launches fails with the numbers.
        """
        s = self._session
        level = level or s.level
        try:
            sections_t = store._check_sections(store.SECTIONS if sections is None else sections)
            levels = tuple(store._summary_module().LEVELS)
            if level not in levels:
                raise UsageError(f"golden.check(level={level!r}): expected one of {', '.join(levels)}")
            platform = str(result.platform)
            folder = store.golden_folder(s.golden_dir, platform, self._nodeid)
            # Registered first: whatever fails below, the folder is known to belong to this test.
            s.report.add_folder(platform, s.rel(folder), self._nodeid)
            option_budgets = {kr.key: store.budget_from_option(max_launches, kr.key) for kr in result}
        except GraphCaptureError as exc:
            pytest.fail(str(exc), pytrace=False)
        items = sorted(result, key=lambda kr: (kr.key.runner, kr.key.variant or "", kr.key.rank, kr.key.batch_size))
        self._explicit_rank = int(getattr(result, "world_size", 1) or 1) > 1 and not share_ranks
        if not items:
            pytest.fail(f"golden.check: the capture result of {getattr(result, 'runner_name', '?')} has no "
                        f"captured keys, nothing to compare", pytrace=False)
        if getattr(result, "mode", None) == "single" and all(kr.summary is None for kr in items):
            pytest.fail("golden.check: this capture ran with --graph-capture-trace=single, which records one trace "
                        "for the whole capture phase and no per-batch-size summaries to compare; golden checks "
                        "need the per-bs mode (the default, or --graph-capture-trace=per-bs)", pytrace=False)
        share_failures: list[tuple[str, list[str]]] = []
        if share_ranks:
            items, share_failures = self._share_ranks(items, level, ignore_kernels, ignore_ops, sections_t)
        out_folder = store.golden_folder(s.out_dir, platform, self._nodeid) if s.out_dir else None
        blocks: list[list[str]] = []
        failed: list[str] = []
        missing: list[str] = []
        over_budget: list[str] = []
        budget_only: list[str] = []
        for item in items:
            budget_lines: list[str] = []
            outcome, lines, is_missing = self._check_key(item, platform, folder, out_folder, level,
                                                         ignore_kernels, ignore_ops, sections_t,
                                                         option_budgets.get(item.key), budget_lines)
            if budget_lines:
                over_budget.append(self._label(item.key))
                if outcome != "failed":
                    budget_only.append(self._label(item.key))
                lines = (lines if outcome == "failed" else []) + budget_lines
                outcome = "failed"
            if outcome == "failed":
                failed.append(self._label(item.key))
                blocks.append(lines)
                if is_missing:
                    missing.append(self._label(item.key))
        for label, lines in share_failures:
            failed.append(label)
            blocks.append(lines)
        if failed:
            self._fail(result, platform, level, folder, out_folder, failed, missing, blocks, over_budget,
                       budget_only)

    def _label(self, key: Any) -> str:
        return store.key_label(key, explicit_rank=self._explicit_rank)

    def _name(self, key: Any) -> str:
        return store.golden_file_name(key, explicit_rank=self._explicit_rank)

    def _share_ranks(self, items: list, level: str, ignore_kernels: Sequence[str], ignore_ops: Sequence[str],
                     sections: tuple[str, ...]) -> tuple[list, list[tuple[str, list[str]]]]:
        """``share_ranks=True``: rank 0's items where all ranks agree, a failure block per key where not."""
        groups: dict[tuple, list] = {}
        for item in items:
            groups.setdefault((item.key.runner, item.key.variant or "", item.key.batch_size), []).append(item)
        kept: list = []
        failures: list[tuple[str, list[str]]] = []
        for members in groups.values():
            members.sort(key=lambda kr: kr.key.rank)
            first = members[0]
            if len(members) == 1 or any(m.summary is None for m in members):
                kept.append(first)
                continue
            try:
                views = [self._postprocess(m.summary, str(m.key)).normalized(
                    level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops)).to_dict()
                    for m in members]
            except GraphCaptureError:
                kept.append(first)  # the regular check reports the bad summary
                continue
            lines: list[str] = []
            differ: list[int] = []
            for member, view in zip(members[1:], views[1:]):
                diff = store.compare_dicts(views[0], view, member.key, sections=sections,
                                           golden=f"compared with rank {first.key.rank}")
                if not diff.ok:
                    differ.append(member.key.rank)
                    lines.extend(diff.render())
            if not differ:
                kept.append(first)
                continue
            label = store.key_label(first.key)
            head = (f"{label}: share_ranks=True, but rank{'s' if len(differ) > 1 else ''} "
                    f"{', '.join(map(str, differ))} differ{'' if len(differ) > 1 else 's'} from rank "
                    f"{first.key.rank}, so they cannot share one golden (use per-rank goldens: "
                    f"golden.check(result) without share_ranks):")
            failures.append((label, [head, *("  " + line for line in lines)]))
        return kept, failures

    def _check_key(self, item: Any, platform: str, folder: Path, out_folder: Optional[Path], level: str,
                   ignore_kernels: Sequence[str], ignore_ops: Sequence[str],
                   sections: tuple[str, ...], option_budget: Optional[int] = None,
                   budget_lines: Optional[list[str]] = None) -> tuple[str, list[str], bool]:
        """Check one key; launch-budget violations go to ``budget_lines`` (the key is then recorded failed)."""
        s = self._session
        key = item.key
        path = folder / self._name(key)
        if path.is_symlink():  # the folder is checked and the name is safe: only a link can lead elsewhere
            store.ensure_inside(s.golden_dir, path)
        shown = s.display(path)
        label = self._label(key)
        incomplete: Optional[str] = None

        budget_lines = budget_lines if budget_lines is not None else []

        def record(outcome: str) -> None:
            outcome = "failed" if budget_lines else outcome
            s.report.add_record(KeyRecord(self._nodeid, platform, label, s.rel(path), outcome, incomplete))

        if item.summary is None:
            record("failed")
            return "failed", [f"{label} ({shown}):", "  not profiled: the capture returned no summary for this "
                              "key, so there is nothing to compare (capture with summaries enabled)"], False
        try:
            actual = self._postprocess(item.summary, str(key))
            store._check_level(level, actual, "the captured summary", f"summary of {key}")
            actual = actual.normalized(level, ignore_kernels=tuple(ignore_kernels), ignore_ops=tuple(ignore_ops))
        except GraphCaptureError as exc:
            record("failed")
            return "failed", [f"{label} ({shown}):", f"  {exc}"], False
        if not actual.complete:
            incomplete = actual.incomplete_reason or "no reason given"
        data = actual.to_dict()
        # The golden is read once: its budget, the fast path and the diff all use this dict.
        old: Optional[dict] = None
        old_error: Optional[GoldenError] = None
        identical = False
        if path.exists():
            try:
                old = store.parse_golden_file(path)
                # Same content as a valid summary dict: valid by construction, skip the type check.
                identical = store.same_content(old, data)
                if not identical:
                    old = store.checked_golden_dict(old, path)
            except GoldenError as exc:
                old, old_error = None, exc
        golden_budget = store.launch_budget_of(old)
        if golden_budget is not None:
            data[store.BUDGET_FIELD] = golden_budget  # kept by --update-golden and in --golden-out files
        budget_lines.extend(store.launch_budget_violations(
            key, int(actual.launches.get("total", 0)),
            [(golden_budget, f"{store.BUDGET_FIELD} in {shown}"), (option_budget, "golden.check(max_launches=...)")]))
        if out_folder is not None:
            try:
                store.write_golden(out_folder / self._name(key), data)
            except GoldenError as exc:
                warnings.warn(pytest.PytestWarning(f"--golden-out: {exc}"))

        if not path.exists():
            if s.update:
                return self._write(path, data, "created", record, label, shown)
            record("failed")
            return "failed", [f"{label}: missing golden {shown}"], True

        if identical or (old is not None and golden_budget is not None and store.same_content(old, data)):
            record("passed")  # identical to the golden: nothing to diff, nothing to rewrite
            return "passed", [], False
        try:
            if old_error is not None:
                raise old_error
            expected = store.summary_from_dict(old, path)
            diff = store.compare(expected, actual, level=level, ignore_kernels=ignore_kernels,
                                 ignore_ops=ignore_ops, sections=sections, golden=shown)
        except GoldenError as exc:
            if s.update == "all" and "newer than this pytest-graphcapture" not in exc.problem:
                return self._write(path, data, "updated", record, label, shown)
            record("failed")
            return "failed", [f"{label}: {exc}"], False
        if s.update == "all":
            if incomplete is not None and store._complete(old)[0]:
                # Never replace complete kernel evidence with an incomplete capture.
                if diff.ok:
                    record("passed")
                    return "passed", [], False
                record("failed")
                return "failed", diff.render() + [f"  note: not updated: the capture is incomplete and the "
                                                  f"golden is complete"], False
            if not store.same_content(old, data):
                return self._write(path, data, "updated", record, label, shown)
            record("passed")
            return "passed", [], False
        if diff.ok:
            record("passed")
            return "passed", [], False
        record("failed")
        return "failed", diff.render(), False

    def _write(self, path: Path, data: dict, outcome: str, record: Any, label: str,
               shown: str) -> tuple[str, list[str], bool]:
        try:
            done = store.write_golden(path, data)
        except GoldenError as exc:
            record("failed")
            return "failed", [f"{label}: {exc}"], False
        record("passed" if done == "unchanged" else outcome)
        return "passed", [], False

    def _fail(self, result: Any, platform: str, level: str, folder: Path, out_folder: Optional[Path],
              failed: list[str], missing: list[str], blocks: list[list[str]],
              over_budget: Sequence[str] = (), budget_only: Sequence[str] = ()) -> None:
        s = self._session
        runner = getattr(result, "runner_name", "") or "capture"
        nodeid_arg = shlex.quote(self._nodeid)
        if len(missing) == len(failed):
            what = f"has no golden for {', '.join(failed)}"
        else:
            labels = [f"{label} (missing)" if label in missing else
                      f"{label} (over launch budget)" if label in over_budget else label for label in failed]
            what = f"does not match its goldens for {', '.join(labels)}"
        head = f"graph capture of {runner} {what} (platform {platform}, level {level}, {len(failed)} of {len(result)} keys)"
        body = [line for block in blocks for line in block]
        tail = [f"goldens: {s.display(folder)}/"]
        if out_folder is not None:
            tail.append(f"obtained summaries written to {s.display(out_folder)}/; accept them with:")
            tail.append(f"  {store.copy_command(Path(s.display(out_folder)), Path(s.display(folder)))}")
        ci_var = ci_environment()
        if over_budget:
            tail.append(f"launch budget exceeded for {', '.join(over_budget)}: cut the launches, or raise the "
                        f"budget ({store.BUDGET_FIELD} in the golden file, kept by --update-golden, or "
                        f"golden.check(max_launches=...))")
        verb = "create" if len(missing) == len(failed) else "accept"
        command = f"pytest {nodeid_arg} --update-golden"
        if missing and len(missing) < len(failed):
            command_new = f"pytest {nodeid_arg} --update-golden=new"
            tail.append(f"create only the missing ones with: {command_new}")
        where = f" (locally: updating is refused on CI, {ci_var} is set)" if ci_var else ""
        if len(budget_only) < len(failed):  # --update-golden cannot fix a budget-only failure
            tail.append(f"{verb} them with: {command}{where}")
        full = [head, *body, *tail]
        s.report.add_failure(self._nodeid, platform, "\n".join(full) + "\n")
        if len(body) > store.MAX_DIFF_LINES:
            diff_path = self._write_full_diff(out_folder, full)
            body = store.cut_lines(body, s.display(diff_path) if diff_path else None)
        pytest.fail("\n".join([head, *body, *tail]), pytrace=False)

    def _write_full_diff(self, out_folder: Optional[Path], lines: list[str]) -> Optional[Path]:
        s = self._session
        if out_folder is not None:
            path = out_folder / "diff.txt"
        else:
            path = s.diff_dir() / f"{safe_name(self._nodeid)}.txt"
        try:
            store.write_atomic(path, "\n".join(lines) + "\n")
        except GoldenError:
            return None
        return path


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> GoldenChecker:
    """Compare a graph capture result with its golden files: ``golden.check(result)``."""
    return GoldenChecker(_session(request.config), request.node.nodeid)
