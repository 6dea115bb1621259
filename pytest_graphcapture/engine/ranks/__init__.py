"""Capture on several ranks: a supervisor for spawned rank processes, and the capture run on each."""
