"""The soak (issue 58): the whole deployment under faults while connector files keep landing.

`python -m tests.soak --minutes M --seed S` runs it at any length and prints its figures;
`tests/e2e/test_soak.py` runs a few minutes of it in CI's real-system suite. The parts:

- `services.py`: the real servers (SeaweedFS for the store, landing area and tables; PostgreSQL for the
  Dagster instance; one Spark Connect server) and `dagster-daemon`, each killable and restartable;
- `producer.py`: lands Aiven S3 sink files (JSON Lines, tombstones included) and keeps a ledger of every
  record it landed;
- `faults.py`: SIGKILLs run workers, the daemon, the Connect server, the S3 server and PostgreSQL at
  random moments, and restarts them;
- `checks.py`: once faults and files stop, waits for the deployment to settle, then checks the logs,
  latest states, tables, marks, runs and leftover objects against the ledger;
- `run.py`: puts them together and returns the figures.
"""
