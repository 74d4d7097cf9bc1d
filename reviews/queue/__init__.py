"""The review queue as people work through it: its pages, search and live fingerprint
(`pages`), its filters (`filters`), an operator's hold on an item (`holds`), notes on items and
the effect page's panel of them (`notes`), the effect page's live check (`live`), many items at
once (`bulk`), and an operator's saved filters (`saved`). Opening an item is the ledger's
(`ledger.rules.reviewqueue`)."""
