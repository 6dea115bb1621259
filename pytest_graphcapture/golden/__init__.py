"""Golden files: the store, the one comparison, the gate (also over engine traces) and its report. No torch, no pytest."""
