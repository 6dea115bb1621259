"""The golden gate's session report: per platform counts, failures and unused goldens."""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable, Optional

from .._io import encode_utf8, format_bytes, write_atomic
from ..errors import FileError
from ..naming import HARVEST_PICTURE_NAME

_OUTCOMES = ("passed", "failed", "created", "updated")
COUNT_NAMES = ("checked", "passed", "failed", "created", "updated", "deleted", "unused", "incomplete")
_REPORT_FORMAT = 1


@dataclass(frozen=True)
class KeyRecord:
    """One checked capture key: which test, platform, golden file (relative) and outcome."""

    nodeid: str
    platform: str
    key: str
    golden: str
    outcome: str
    incomplete: Optional[str] = None
    #: What the graph cost (warmup/capture/replay seconds, graph memory bytes): reported, never compared.
    metrics: Optional[dict] = None

    def __post_init__(self) -> None:
        if self.outcome not in _OUTCOMES:
            raise ValueError(f"outcome must be one of {_OUTCOMES}, got {self.outcome!r}")


@dataclass(frozen=True)
class _FailureRecord:
    """The full rendered failure text of one failed check (for Markdown and JSON)."""

    nodeid: str
    platform: str
    text: str


@dataclass(frozen=True)
class FileRecord:
    """A golden file (path relative to the golden dir) on a platform."""

    platform: str
    path: str
    #: Set for a golden of no collected test (a deleted or renamed test), empty for an unused one.
    orphan: bool = False


@dataclass(frozen=True)
class _FolderRecord:
    """The golden folder (relative to the golden dir) a test checks on a platform."""

    platform: str
    path: str
    nodeid: str


#: Up to this many key labels are listed one by one; more are summarized as batch-size ranges.
LIST_LIMIT = 8
_LABEL = re.compile(r"^bs=(?P<bs>\d+)(?P<rest>[^(]*?)(?: \((?P<tag>[^)]*)\))?$")


def summarize_labels(labels: Iterable[str], limit: int = LIST_LIMIT) -> str:
    """Key labels for one line: listed when few, else ``bs=1…256 (256 sizes)`` per variant/rank/tag."""
    labels = list(labels)
    if len(labels) <= limit:
        return ", ".join(labels)
    groups: dict[tuple[str, str], list[int]] = {}
    others: list[str] = []
    for label in labels:
        match = _LABEL.match(label)
        if match is None:
            others.append(label)
            continue
        groups.setdefault((match["rest"], match["tag"] or ""), []).append(int(match["bs"]))
    parts = []
    for (rest, tag), sizes in groups.items():
        if len(sizes) == 1:
            parts.append(f"bs={sizes[0]}{rest}" + (f" ({tag})" if tag else ""))
            continue
        what = f"{len(sizes)} sizes" + (f", {tag}" if tag else "")
        parts.append(f"bs={min(sizes)}…{max(sizes)}{rest} ({what})")
    if len(others) > limit:
        others = others[:limit] + [f"… {len(others) - limit} more"]
    return ", ".join(parts + others)


def _natural(text: str) -> tuple:
    """Sort key that orders embedded numbers by value (``bs_2`` before ``bs_12``)."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text))


@dataclass
class SessionReport:
    """Everything the golden gate did in one session (or one xdist worker)."""

    golden_dir: str = ""
    records: list[KeyRecord] = field(default_factory=list)
    failures: list[_FailureRecord] = field(default_factory=list)
    #: Folders (relative to the golden dir) of tests that ran a check, per platform and test.
    folders: set[_FolderRecord] = field(default_factory=set)
    #: Golden files (relative) a check looked at, whatever its outcome.
    used: set[FileRecord] = field(default_factory=set)
    deleted: list[FileRecord] = field(default_factory=list)
    unused: list[FileRecord] = field(default_factory=list)
    obtained_dir: Optional[str] = None
    update_mode: Optional[str] = None
    #: The HTML picture (kernel × batch-size matrix) written beside the Markdown report, relative to it.
    picture: Optional[str] = None
    #: The picture written into the harvest instead, as shown to the user: a report that cannot link it names it.
    picture_file: Optional[str] = None
    #: Output the session was asked for and could not write, each starting with the option; they fail the run.
    errors: list[str] = field(default_factory=list)
    #: What a narrowed run left unchecked (goldens its selection or named traces left out), told, never failing.
    notes: list[str] = field(default_factory=list)

    def add_record(self, record: KeyRecord) -> None:
        self.records.append(record)
        self.used.add(FileRecord(record.platform, record.golden))

    def add_failure(self, nodeid: str, platform: str, text: str) -> None:
        self.failures.append(_FailureRecord(nodeid, platform, text))

    def add_folder(self, platform: str, folder: str, nodeid: str) -> None:
        self.folders.add(_FolderRecord(platform, folder, nodeid))

    def mark_used(self, platform: str, path: str) -> None:
        self.used.add(FileRecord(platform, path))

    def to_dict(self) -> dict:
        """Plain JSON-ready dict (what a worker sends through ``workeroutput``)."""

        def files(items: Iterable[FileRecord]) -> list[dict]:
            # ``orphan`` only where set: the entries of unused files in tests' folders keep their shape.
            return [
                {k: v for k, v in asdict(f).items() if k != "orphan" or v}
                for f in sorted(items, key=lambda f: (f.platform, f.path))
            ]

        return {
            "format": _REPORT_FORMAT,
            "golden_dir": self.golden_dir,
            "update_mode": self.update_mode,
            "obtained_dir": self.obtained_dir,
            "records": [asdict(r) for r in self._sorted_records()],
            "failures": [asdict(f) for f in sorted(self.failures, key=lambda f: (f.platform, f.nodeid))],
            "folders": [asdict(f) for f in sorted(self.folders, key=lambda f: (f.platform, f.path, f.nodeid))],
            "used": files(self.used),
            "deleted": files(self.deleted),
            "unused": files(self.unused),
            "picture": self.picture,
            **({"picture_file": self.picture_file} if self.picture_file else {}),
            "errors": list(self.errors),
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "SessionReport":
        """Inverse of :meth:`to_dict`."""
        if not isinstance(data, dict) or data.get("format") != _REPORT_FORMAT:
            raise ValueError(f"not a graph capture session report (format {_REPORT_FORMAT}): {str(data)[:80]!r}")
        return cls(
            golden_dir=data.get("golden_dir", ""),
            update_mode=data.get("update_mode"),
            obtained_dir=data.get("obtained_dir"),
            records=[KeyRecord(**r) for r in data.get("records", [])],
            failures=[_FailureRecord(**f) for f in data.get("failures", [])],
            folders={_FolderRecord(**f) for f in data.get("folders", [])},
            used={FileRecord(**f) for f in data.get("used", [])},
            deleted=[FileRecord(**f) for f in data.get("deleted", [])],
            unused=[FileRecord(**f) for f in data.get("unused", [])],
            picture=data.get("picture"),
            picture_file=data.get("picture_file"),
            errors=list(data.get("errors", [])),
            notes=list(data.get("notes", [])),
        )

    def merge(self, other: "SessionReport | dict") -> None:
        """Add another report (e.g. an xdist worker's) to this one."""
        if isinstance(other, dict):
            other = SessionReport.from_dict(other)
        self.golden_dir = self.golden_dir or other.golden_dir
        self.obtained_dir = self.obtained_dir or other.obtained_dir
        self.update_mode = self.update_mode or other.update_mode
        self.picture = self.picture or other.picture
        self.picture_file = self.picture_file or other.picture_file
        self.records.extend(other.records)
        self.failures.extend(other.failures)
        self.folders |= other.folders
        self.used |= other.used
        self.deleted.extend(f for f in other.deleted if f not in self.deleted)
        self.unused.extend(f for f in other.unused if f not in self.unused)
        self.errors.extend(e for e in other.errors if e not in self.errors)
        self.notes.extend(n for n in other.notes if n not in self.notes)

    def _sorted_records(self) -> list[KeyRecord]:
        # Natural order, so bs=2 comes before bs=12 in every listing.
        return sorted(self.records, key=lambda r: (r.platform, r.nodeid, _natural(r.golden)))

    @property
    def platforms(self) -> list[str]:
        names = (
            {r.platform for r in self.records} | {f.platform for f in self.deleted} | {f.platform for f in self.unused}
        )
        return sorted(names)

    def counts(self) -> dict[str, dict[str, int]]:
        """``{platform: {count name: n}}`` for every platform seen, in :data:`COUNT_NAMES` order."""
        out: dict[str, dict[str, int]] = {}
        for platform in self.platforms:
            records = [r for r in self.records if r.platform == platform]
            row = {name: 0 for name in COUNT_NAMES}
            row["checked"] = len(records)
            for r in records:
                row[r.outcome] += 1
                row["incomplete"] += r.incomplete is not None
            row["deleted"] = sum(f.platform == platform for f in self.deleted)
            row["unused"] = sum(f.platform == platform for f in self.unused)
            out[platform] = row
        return out

    def totals(self) -> dict[str, int]:
        totals = {name: 0 for name in COUNT_NAMES}
        for row in self.counts().values():
            for name, n in row.items():
                totals[name] += n
        return totals

    @property
    def empty(self) -> bool:
        return not self.records and not self.unused and not self.deleted and not self.errors and not self.notes

    @staticmethod
    def _count_line(row: dict[str, int]) -> str:
        return ", ".join(f"{row[name]} {name}" for name in COUNT_NAMES)

    def _golden_path(self, path: str) -> str:
        return f"{self.golden_dir.rstrip('/')}/{path}" if self.golden_dir else path

    def terminal_lines(self, *, verbose: bool = False) -> list[str]:
        """Lines of the terminal summary section (syrupy-style end-of-session report)."""
        lines: list[str] = []
        counts = self.counts()
        for platform, row in counts.items():
            lines.append(f"{platform}: {self._count_line(row)}")
        failed: dict[str, list[str]] = {}
        for r in self._sorted_records():
            if r.outcome == "failed":
                failed.setdefault(r.nodeid, []).append(r.key)
        for nodeid, keys in failed.items():
            lines.append(f"failed: {nodeid} ({summarize_labels(keys)})")
        for r in self._sorted_records():
            if r.incomplete is not None:
                lines.append(f"incomplete: {r.nodeid} {r.key}: {r.incomplete}")
        if verbose:
            for r in self._sorted_records():
                if r.outcome in ("created", "updated"):
                    lines.append(f"{r.outcome}: {self._golden_path(r.golden)}")
        for f in sorted(self.deleted, key=lambda f: f.path):
            lines.append(f"deleted: {self._golden_path(f.path)}")
        for f in sorted(self.unused, key=lambda f: f.path):
            why = "belongs to no collected test; " if f.orphan else ""
            lines.append(f"unused: {self._golden_path(f.path)} ({why}remove with --update-golden)")
        lines += [f"not checked: {n}" for n in self.notes]
        lines += [f"error: {e}" for e in self.errors]
        if self.obtained_dir and self.records and not self.harvest_failed:
            lines.append(f"obtained summaries written under {self.obtained_dir}")
        return lines

    @property
    def harvest_failed(self) -> bool:
        """Some obtained summary could not be written under ``--golden-out``."""
        return any(e.startswith("--golden-out") for e in self.errors)

    def markdown(self) -> str:
        """The report as GitHub-flavoured Markdown (counts table, failures with diffs, unused files)."""
        out = ["## Graph capture goldens", ""]
        if self.empty:
            out += ["No golden checks ran.", ""]
            return "\n".join(out)
        out.append("| platform | " + " | ".join(COUNT_NAMES) + " |")
        out.append("|---|" + "---:|" * len(COUNT_NAMES))
        for platform, row in self.counts().items():
            out.append(f"| `{platform}` | " + " | ".join(str(row[n]) for n in COUNT_NAMES) + " |")
        out.append("")
        if self.picture:
            out += [
                f"Kernel × batch-size picture, added/removed kernels highlighted: [{_html(self.picture)}]"
                f"(<{self.picture}>) (a self-contained HTML file beside this report; in CI, open it from "
                f"the job's artifacts).",
                "",
            ]
        elif self.picture_file:
            out += [
                f"Kernel × batch-size picture, added/removed kernels highlighted: `{self.picture_file}` "
                f"(a self-contained HTML file in the harvest; in CI, open it from the job's artifacts).",
                "",
            ]
        if self.failures:
            out += ["### Failures", ""]
            for f in sorted(self.failures, key=lambda f: (f.platform, f.nodeid)):
                fence = "````" if "```" in f.text else "```"
                out += [
                    f"<details><summary><code>{_html(f.nodeid)}</code> ({_html(f.platform)})</summary>",
                    "",
                    f"{fence}text",
                    f.text.rstrip("\n"),
                    fence,
                    "",
                    "</details>",
                    "",
                ]
        out += _metrics_table(self._sorted_records())
        incomplete = [r for r in self._sorted_records() if r.incomplete is not None]
        if incomplete:
            out += ["### Incomplete captures", ""]
            out += [f"- `{r.nodeid}` {r.key}: {r.incomplete}" for r in incomplete]
            out.append("")
        for title, files in (("Deleted goldens", self.deleted), ("Unused goldens", self.unused)):
            if files:
                out += [f"### {title}", ""]
                out += [
                    f"- `{self._golden_path(f.path)}`" + (" (belongs to no collected test)" if f.orphan else "")
                    for f in sorted(files, key=lambda f: f.path)
                ]
                out.append("")
        if self.notes:
            out += ["### Not checked (narrowed run)", ""] + [f"- {_html(n)}" for n in self.notes] + [""]
        if self.errors:
            out += ["### Errors", ""] + [f"- {_html(e)}" for e in self.errors] + [""]
        if self.obtained_dir and self.records and not self.harvest_failed:
            out += [f"Obtained summaries were written under `{self.obtained_dir}`.", ""]
        return "\n".join(out)

    def to_json(self) -> str:
        """Machine-readable report: counts per platform, totals and the full record lists."""
        data = self.to_dict()
        data["counts"] = self.counts()
        data["totals"] = self.totals()
        return json.dumps(data, indent=2, sort_keys=True) + "\n"


def _is_step_summary(path: Path) -> bool:
    """Whether ``path`` is the GitHub job's step summary: shown on the run's page, where no file link leads."""
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    return bool(summary) and Path(summary).resolve() == Path(path).resolve()


def picture_place(report_md: Path, harvest: Path) -> tuple[Path, Optional[str]]:
    """Where the picture of a report goes and the link the report gives it (None: named, not linked)."""
    if _is_step_summary(report_md):
        return harvest / HARVEST_PICTURE_NAME, None
    target = report_md.with_suffix(".html")
    return target, os.path.relpath(target, report_md.parent).replace(os.sep, "/")


def write_markdown(path: Path, text: str) -> None:
    """Write the Markdown report to ``path``, after what it already holds (a step summary's earlier steps)."""
    path = Path(path)
    try:
        earlier = path.is_file() and path.stat().st_size > 0
        if earlier:
            raw = encode_utf8("\n" + text, path)  # what cannot be encoded is refused before the file is touched
            with open(path, "ab") as handle:
                handle.write(raw)
            return
    except OSError as exc:
        raise FileError(path, f"cannot append: {exc.strerror or exc}") from None
    write_atomic(path, text)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _metrics_table(records: list[KeyRecord]) -> list[str]:
    """The "Capture costs" section: per checked key, its warmup/capture/replay time and graph memory."""
    rows = [r for r in records if r.metrics]
    if not rows:
        return []

    def seconds(value: Optional[float], scale: float = 1.0, unit: str = "s") -> str:
        return "–" if value is None else f"{value * scale:.3f} {unit}"

    def memory(value: Optional[int]) -> str:
        return "–" if value is None else format_bytes(value)

    out = [
        "### Capture costs",
        "",
        "| test | key | warmups | capture | replay | graph memory reserved | allocated |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m = r.metrics or {}
        out.append(
            f"| `{r.nodeid}` | {r.key} | {seconds(m.get('warmup_seconds'))} | {seconds(m.get('capture_seconds'))} "
            f"| {seconds(m.get('replay_seconds'), 1e3, 'ms')} | {memory(m.get('memory_reserved'))} "
            f"| {memory(m.get('memory_allocated'))} |"
        )
    return out + [""]
