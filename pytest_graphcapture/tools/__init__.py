"""The ``graphcapture`` command and what it draws: summaries, diffs, matrices, pictures, accepting goldens."""
