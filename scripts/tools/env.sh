# Sourced before the test run: puts the cached tools on PATH.
export PATH="${HOME}/.cache/tenure-tools/bin:${PATH}"
