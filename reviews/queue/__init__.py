"""The review queue as people work through it: its pages, search and live fingerprint
(`pages`), its filters (`filters`), who holds an item (`holds`), notes on items and the effect
page's live check (`notes`), and many items at once (`bulk`). Opening an item is the ledger's
(`ledger.containment.reviewqueue`)."""
