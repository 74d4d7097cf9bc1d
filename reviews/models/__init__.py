"""The operator pages' own tables: notes on review items, saved filters and bulk jobs, and
people with their accounts and identities at the provider (`people`), Slack users linked to
accounts and the signed links used once (`remote`), operators' personal API tokens and their
uses (`tokens`). The review queue itself (`ReviewItem`) is the ledger's
(`ledger.models.review`)."""

from reviews.models.notes import *  # noqa: F403
from reviews.models.operator import *  # noqa: F403
from reviews.models.people import *  # noqa: F403
from reviews.models.remote import *  # noqa: F403
from reviews.models.tokens import *  # noqa: F403
