"""The tests run against a real compactd daemon, which the Go test
clients/clients_test.go starts (`go test ./clients`, part of `make test`):
it sets COMPACTD_SOCKET (a socket whose every answer is validated against
api/openapi.yaml on its way), COMPACTD_TEST_TCP and COMPACTD_TEST_TOKEN
(the daemon's TCP listener) and COMPACTD_TEST_FIXTURES.
"""

import json
import os
from pathlib import Path

import pytest


def _need(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        raise pytest.UsageError(
            f"${name} is not set: these tests need a daemon; run them with `go test ./clients` (or `make test`)"
        )
    return value


@pytest.fixture(scope="session")
def socket_path() -> str:
    return _need("COMPACTD_SOCKET")


@pytest.fixture(scope="session")
def tcp() -> str:
    return _need("COMPACTD_TEST_TCP")


@pytest.fixture(scope="session")
def token() -> str:
    return _need("COMPACTD_TEST_TOKEN")


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return Path(_need("COMPACTD_TEST_FIXTURES"))


@pytest.fixture(scope="session")
def tau(fixtures: Path) -> list:
    """A real tau-bench airline conversation (the longest in the fixture)."""
    convs = [json.loads(line) for line in (fixtures / "tau_bench_gpt4o_airline.jsonl").read_text().splitlines() if line.strip()]
    return max((c["messages"] for c in convs), key=len)


def chat(turns: int) -> list:
    msgs = [{"role": "system", "content": "You are terse."}]
    for i in range(turns):
        msgs += [{"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"answer {i}"}]
    return msgs + [{"role": "user", "content": "last question"}]
