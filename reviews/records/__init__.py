"""What the pages read of the ledger's records, as plain data the templates show.

One effect with what surrounds it, and its comparison with the provider's own record (`effect`);
what recovery would do for a run (`runs`); the halts (`halts`); the declared limits and how much
of them is used (`limits`); the incidents (`incidents`) and the imported statements
(`statements`); where the ledger stands (`overview`). Each function reads once what its page
shows, narrowed to the person's teams (ADR 0014), and returns lists, dataclasses or model rows
already fetched: the views (`reviews.views`) parse the request, call one of these or a service,
and render, with no query of their own. The queue reads through `reviews.queue`, and what waits
for a second operator through `reviews.decisions.waiting`.
"""
