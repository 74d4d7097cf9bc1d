"""The top-level fields of the example objects Stripe publishes for its API (`openapi/
fixtures3.json` in the public stripe/openapi repository, as of commit f6c2a48 of 2026-08-21):
the field names only, against which the payments sandbox's Stripe face is checked, so that
what the adapter reads there is shaped as Stripe shapes it."""

from __future__ import annotations

PAYMENT_INTENT = frozenset(
    {
        "amount",
        "amount_capturable",
        "amount_details",
        "amount_received",
        "application",
        "application_fee_amount",
        "automatic_payment_methods",
        "canceled_at",
        "cancellation_reason",
        "capture_method",
        "client_secret",
        "confirmation_method",
        "created",
        "currency",
        "customer",
        "customer_account",
        "description",
        "excluded_payment_method_types",
        "id",
        "last_payment_error",
        "latest_charge",
        "livemode",
        "managed_payments",
        "metadata",
        "next_action",
        "object",
        "on_behalf_of",
        "payment_method",
        "payment_method_configuration_details",
        "payment_method_options",
        "payment_method_types",
        "processing",
        "receipt_email",
        "review",
        "setup_future_usage",
        "shipping",
        "source",
        "statement_descriptor",
        "statement_descriptor_suffix",
        "status",
        "transfer_data",
        "transfer_group",
    }
)


REFUND = frozenset(
    {
        "amount",
        "balance_transaction",
        "charge",
        "created",
        "currency",
        "customer",
        "customer_account",
        "destination_details",
        "id",
        "metadata",
        "object",
        "payment_intent",
        "payment_method",
        "reason",
        "receipt_number",
        "source_transfer_reversal",
        "status",
        "transfer_reversal",
    }
)


EVENT = frozenset(
    {
        "api_version",
        "created",
        "data",
        "id",
        "livemode",
        "object",
        "pending_webhooks",
        "request",
        "type",
    }
)


REPORT_RUN = frozenset(
    {
        "created",
        "error",
        "id",
        "livemode",
        "object",
        "parameters",
        "report_type",
        "result",
        "status",
        "succeeded_at",
    }
)


FILE = frozenset(
    {
        "created",
        "expires_at",
        "filename",
        "id",
        "links",
        "object",
        "purpose",
        "size",
        "title",
        "type",
        "url",
    }
)
