#!/usr/bin/env bash
# Bring a checkout to the point where `make demo` and `make test` run; safe to run every time.
#
#   1. .venv       created with python3 -m venv if missing
#   2. packages    pip install -e '.[test,spark]', only when pyproject.toml changed since the
#                  last successful install (its hash is kept in .venv/.bootstrap-stamp)
#   3. ZooKeeper   apt-get install zookeeper default-jre-headless, only when
#                  /usr/share/java/zookeeper.jar is missing and we are root; a failure is
#                  reported and skipped (only the ZooKeeper tests need it). Never zookeeperd,
#                  which would start a system service on port 2181.
#   4. Chromium    apt-get install chromium chromium-driver, only when /usr/bin/chromium is
#                  missing and we are root (the status page tests drive a real headless
#                  browser, docs/operations.md §12); a failure is reported and skipped.
#
# Environment: PYTHON (default python3), HANAMENODE_EXTRAS (default test,spark),
# HANAMENODE_SKIP_APT=1 to leave system packages alone.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PYTHON=${PYTHON:-python3}
EXTRAS=${HANAMENODE_EXTRAS:-test,spark}
VENV=.venv
STAMP=$VENV/.bootstrap-stamp
ZK_JAR=/usr/share/java/zookeeper.jar

say() { echo "bootstrap: $*"; }

if [[ ! -x $VENV/bin/python ]]; then
    say "creating $VENV with $("$PYTHON" --version 2>&1)"
    "$PYTHON" -m venv "$VENV"
fi

want="$(sha256sum pyproject.toml | cut -d' ' -f1) extras=$EXTRAS"
if [[ ! -f $STAMP || "$(cat "$STAMP")" != "$want" ]]; then
    say "installing the project and its [$EXTRAS] dependencies into $VENV (pyproject.toml changed)"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q -e ".[$EXTRAS]"
    echo "$want" >"$STAMP"
else
    say "$VENV is up to date with pyproject.toml"
fi

if [[ -f $ZK_JAR ]]; then
    say "ZooKeeper found at $ZK_JAR"
elif [[ ${HANAMENODE_SKIP_APT:-0} == 1 ]]; then
    say "ZooKeeper missing; HANAMENODE_SKIP_APT=1, not installing (ZooKeeper tests will skip or fail)"
elif [[ $(id -u) -ne 0 ]]; then
    say "ZooKeeper missing and not root: run 'apt-get install -y zookeeper default-jre-headless' as root"
else
    say "ZooKeeper missing: apt-get update && apt-get install -y zookeeper default-jre-headless"
    if DEBIAN_FRONTEND=noninteractive apt-get update -q \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            zookeeper default-jre-headless; then
        say "ZooKeeper installed ($ZK_JAR)"
    else
        say "WARNING: installing ZooKeeper failed; continuing (only the ZooKeeper tests need it)"
    fi
fi

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    say "Chromium found at $(command -v chromium)"
elif [[ ${HANAMENODE_SKIP_APT:-0} == 1 ]]; then
    say "Chromium missing; HANAMENODE_SKIP_APT=1, not installing (the status page tests will skip)"
elif [[ $(id -u) -ne 0 ]]; then
    say "Chromium missing and not root: run 'apt-get install -y chromium chromium-driver' as root"
else
    say "Chromium missing: apt-get install -y chromium chromium-driver"
    if DEBIAN_FRONTEND=noninteractive apt-get update -q \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            chromium chromium-driver; then
        say "Chromium installed"
    else
        say "WARNING: installing Chromium failed; continuing (only the status page tests need it)"
    fi
fi
