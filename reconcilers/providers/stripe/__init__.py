"""Stripe: payments (PaymentIntents) and refunds, through Stripe's official SDK (`stripe`).

The adapter (`adapter`) finds an effect again by the metadata it carried to Stripe: a
PaymentIntent first through Stripe's Search API (`search`), which can find but never prove
absence, then in Stripe's strongly consistent list endpoints over the effect's dispatch, which
can; it lists windows for restore mode, sends the
refunds the ledger originates (`sending`), verifies Stripe's signed webhooks (`callbacks`),
and reads (`report`) and fetches (`reporting`) Stripe's itemized balance change report.
"""

from reconcilers.providers.stripe.adapter import StripeAdapter

ADAPTER = StripeAdapter
