"""The capture engine: runner → backend → profiler schedule → per-key results (imports torch, never pytest)."""
