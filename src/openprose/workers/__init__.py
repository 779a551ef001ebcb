"""A pool of workers on PostgreSQL: ``prose run --detach`` queues a run, ``prose worker``
processes on any machine drive queued runs with the engine, and a dead worker's runs are
taken over from the journal.

The queue is procrastinate's (jobs, claims, worker heartbeats, retries, aborts), kept in the
runs' own schema; what a run may do and how far it got stay in the state store. This package
needs the ``workers`` extra (``pip install 'openprose[workers]'``) and is imported only by
the commands that use it. See docs/scaling.md.
"""
