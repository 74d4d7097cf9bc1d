"""A fake GitHub (issues, pages, rate limits, signed webhooks) and the crash test's caller, which
opens issues through PyGithub."""
