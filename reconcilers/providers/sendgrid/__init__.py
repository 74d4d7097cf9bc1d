"""SendGrid (v3 Mail Send): emails found again by the custom arguments they carried, in the
Email Activity API, and settled by the Signed Event Webhook. It keeps no idempotency keys and
cannot prove that a message was not sent (docs/providers/sendgrid.md)."""

from reconcilers.providers.sendgrid.adapter import SendGrid

ADAPTER = SendGrid
