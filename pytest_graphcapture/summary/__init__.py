"""Summaries of captured graphs, built from live profiles, trace files or graph dumps; no torch, no pytest."""

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
