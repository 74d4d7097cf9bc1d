"""Stripe for the crash test: its caller (`caller`) charges through the official SDK. Stripe's
fake is the payments sandbox's Stripe face (`devstack.sandbox.stripe_api`), not a process of
its own."""
