"""The sandbox card-payments provider's JSON API: its adapter and its statement fetch."""

from reconcilers.providers.sandbox_payments.adapter import SandboxPayments

ADAPTER = SandboxPayments
