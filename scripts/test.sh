#!/usr/bin/env bash
# Run the tests: install what they need (scripts/test-setup.sh), then pytest (arguments are
# passed through), ruff and mypy. Every check runs; the script fails if any of them fails.
# Tests start their own registry, Docker API socket and image builds (root required); with
# CI=true a missing tool is a failure, not a skip.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/test-setup.sh

failed=()
if ! .venv/bin/python -m pytest "$@"; then failed+=(pytest); fi
if ! .venv/bin/ruff check src tests scripts benchmarks examples; then failed+=(ruff); fi
if ! .venv/bin/ruff format --check src tests scripts benchmarks examples; then failed+=(ruff-format); fi
if ! .venv/bin/mypy; then failed+=(mypy); fi

if [ "${#failed[@]}" -gt 0 ]; then
  echo "test.sh: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "test.sh: all checks passed" >&2
