"""Fleets: every image a team ships, audited by Celery workers with a shared layer cache.

``records.py`` (what one image's audit leaves in the result store, and the store),
``task.py`` (the task itself: one reference and options in, a record out, idempotent),
``app.py`` (the Celery app and its settings: late acks, prefetch 1, the visibility timeout),
``summary.py`` (a fleet of records as a matrix of images x packages), ``webhook.py`` (the
registry notifications receiver that enqueues audits on push), ``intake.py`` (its enqueue:
coalesced by ``claims.py``, one audit per image while one is queued or running, and
answered within a deadline whatever the broker does), ``patience.py`` (a worker riding out
a lost broker to store a result and acknowledge a task). Nothing here prints.
"""
