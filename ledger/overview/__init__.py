"""The ledger as a whole, now: the summary behind the gauges and the overview page (effects by
tool and status, open and overdue review items, blocked branches), and `/metrics`, which serves
it with every process's counters."""
