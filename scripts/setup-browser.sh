#!/usr/bin/env bash
# Chromium for the dashboard's browser test (tests/test_history.py drives it with Playwright; no browser
# download: Debian's package). Installs it when missing and this shell may (root with apt-get); otherwise says
# how, and the test is skipped with that reason.
set -euo pipefail
for browser in chromium chromium-browser google-chrome; do
    if command -v "$browser" >/dev/null; then
        exit 0
    fi
done
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >/dev/null 2>&1; } \
        || echo "setup-browser: apt-get could not install chromium; the dashboard's browser test will be skipped" >&2
else
    echo "setup-browser: no Chromium; install it (sudo apt-get install chromium) to run the dashboard's browser test" >&2
fi
