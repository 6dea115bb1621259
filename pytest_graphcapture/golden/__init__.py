"""Golden files: the store on disk (:mod:`.store`), the one diff (:mod:`.diff`, with :mod:`.graphs` for keys
of several graphs), the gate (:mod:`.gate`), the gate over engine-written traces (:mod:`.traces`), launch
budgets (:mod:`.budget`), the write lock (:mod:`.lock`), the harvest folder (:mod:`.harvest`) and the session
report (:mod:`.report`).  No torch, no pytest."""
