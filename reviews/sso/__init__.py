"""Single sign-on with OpenID Connect (ADR 0013): its configuration (`config`), the provider's
endpoints and the ID token's checks (`provider`), accounts bound by (issuer, subject) and the
persons behind accounts (`people`), the sign-in backends (`backends`), the pages (`views`) and
the short, renewed sessions (`middleware`)."""
