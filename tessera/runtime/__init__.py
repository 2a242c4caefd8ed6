"""The processes a job runs in: the world of ranks (``world``), the launcher that started
them (``launchers``), ``tessera run`` (``runner``), rank-prefixed output (``rank_output``),
the threads a CPU launch uses (``threads``) and waits on other ranks with a deadline
(``timed``)."""
