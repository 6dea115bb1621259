"""Tools on top of the engine and the goldens: the ``graphcapture`` CLI, the kernel × batch-size matrix,
the HTML picture and the merging of per-rank traces."""
