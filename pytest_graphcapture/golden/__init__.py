"""Golden files: the store on disk (:mod:`.store`), the one diff (:mod:`.diff`), the gate (:mod:`.gate`),
launch budgets (:mod:`.budget`) and the session report (:mod:`.report`).  No torch, no pytest."""
