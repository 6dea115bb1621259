"""Summaries of captured graphs: built from live profiles or trace files; no torch, no pytest.

The names most callers need are re-exported here; each module's docstring says
what it does: :mod:`.model` (the Summary), :mod:`.validate` (its one validator),
:mod:`.graphs` (keys of several graphs), :mod:`.views` (kernel labels and counts
every comparison uses), :mod:`.collect` (events → compact records, with
:mod:`.apis` naming the runtime calls and :mod:`.checks` checking event fields),
:mod:`.scan` (records → summary), :mod:`.split` (a trace split into the keys its
engine's markers name), :mod:`.live` (live profiles), :mod:`.replay` (replay kernels
and the data-loss check), :mod:`.files` (trace, dump and summary files), :mod:`.graph`
(a graph's own nodes) and :mod:`.dot` with :mod:`.dot_syntax` and :mod:`.dot_labels`
(reading them from a graph dump), :mod:`.stream` (a trace file's events in slices,
bounded memory, with :mod:`.records` for the fast parser's typed records),
:mod:`.tracefile` (reading trace bytes, the whole-file reader), :mod:`.normalize` and
:mod:`.demangle` (kernel-name levels), :mod:`.platform` (platform keys and
environment from a trace).
"""

from .dot import summarize_dot_file
from .files import load_summary_file, summarize_trace_file, summarize_trace_keys
from .live import replay_kernels_from_profile, summarize_profile
from .model import KINDS, SCHEMA_VERSION, Summary
from .normalize import LEVELS, normalize_kernel_name
from .replay import KernelEvidenceWarning, with_graph, with_replay
from .scan import replay_kernels_from_events, summarize_events

__all__ = [
    "KINDS",
    "LEVELS",
    "SCHEMA_VERSION",
    "KernelEvidenceWarning",
    "Summary",
    "load_summary_file",
    "normalize_kernel_name",
    "replay_kernels_from_events",
    "replay_kernels_from_profile",
    "summarize_dot_file",
    "summarize_events",
    "summarize_profile",
    "summarize_trace_file",
    "summarize_trace_keys",
    "with_graph",
    "with_replay",
]
