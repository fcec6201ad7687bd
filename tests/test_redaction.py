"""compaction_assets/redaction.py: the one place that masks secrets, used by every error message
(`CompactionError`, `errors.first_line`) with the environment's secrets that `settings` names."""

from __future__ import annotations

import pytest

from compaction_assets import redaction, settings
from compaction_assets.errors import StorageError, first_line

SECRET = "s3cr3t-Pq7Lm2"


@pytest.mark.parametrize(
    ("text", "masked"),
    [
        (
            "postgresql+psycopg2://compaction:pw-123456@db:5432/catalog",
            "postgresql+psycopg2://compaction:***@db:5432/catalog",
        ),
        ("sc://host:443/;use_ssl=true;token=abcdef123", "sc://host:443/;use_ssl=true;token=***"),
        ("https://h/x?X-Amz-Signature=0a1b2c3d&x=1", "https://h/x?X-Amz-Signature=***&x=1"),
        ("see 'mysql://root:hunter22@127.0.0.1/db' now", "see 'mysql://root:***@127.0.0.1/db' now"),
        ("http://127.0.0.1:9000/bucket", "http://127.0.0.1:9000/bucket"),  # a port is no password
        ("sqlite:////tmp/store/_tables/catalog.db", "sqlite:////tmp/store/_tables/catalog.db"),
        ("key=value plain words", "key=value plain words"),  # a parameter only inside a URI or a connection string
    ],
)
def test_credentials_inside_uris_are_masked_without_knowing_them(text, masked):
    assert redaction.redact_uri(text) == masked


def test_the_environments_secrets_are_masked_in_every_error(monkeypatch):
    monkeypatch.setenv(settings.AWS_SECRET_ACCESS_KEY, SECRET)
    monkeypatch.setenv("PYICEBERG_CATALOG__COMPACTION__CREDENTIAL", "client:rest-cred-9x8y7z")
    monkeypatch.setenv("DAGSTER_PG_URL", "postgresql://dagster:pg-pass-4455@127.0.0.1/dagster")
    monkeypatch.setenv("COMPACTION_SHORT_TOKEN", "abc")  # too short to mask: it would garble words
    error = StorageError(f"store s3://b: rejected {SECRET}, client:rest-cred-9x8y7z and pg-pass-4455 (abc)")
    assert str(error) == "store s3://b: rejected ***, *** and *** (abc)"
    # a library's error, quoted through first_line, cut after masking (a cut never keeps part of a secret)
    assert first_line(ValueError(f"{'x' * 10} {SECRET}\nsecond line"), limit=15) == "xxxxxxxxxx ***"
    assert SECRET not in first_line(ValueError("a" * 295 + SECRET))


def test_a_secret_bound_in_code_is_masked_when_given():
    assert redaction.redact("token tok-bound-1234 sent", extra=("tok-bound-1234", None)) == "token *** sent"
