"""A fake SendGrid (`fake`: v3 Mail Send, the Email Activity API, the Signed Event Webhook) and
what the crash test sends through the official `sendgrid` library (`caller`)."""
