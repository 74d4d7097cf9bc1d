"""Who may use the pages: the role checks every view goes through (`checks`), signing in with
its lockout (`signin`, django-axes' handler) and the middleware that keeps a signed-in person's
responses out of every cache (`middleware`)."""
