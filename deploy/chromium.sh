#!/usr/bin/env bash
# Make sure Debian's headless Chromium and a CJK font are installed, and print the
# browser's path (for Playwright's executable_path). Idempotent; ~15 s the first time.
#   deploy/chromium.sh            -> /usr/bin/chromium
# Facts used: ../shared/reference/real-backends.md — never `playwright install` (it
# downloads a browser and fails here); fonts-noto-cjk so Chinese labels render in screenshots.
set -euo pipefail

BROWSER="${HETPOOL_CHROMIUM:-/usr/bin/chromium}"
need=()
[ -x "$BROWSER" ] || need+=(chromium)
fc-list 2>/dev/null | grep -qi "Noto Sans CJK" || need+=(fonts-noto-cjk)
fc-list 2>/dev/null | grep -qi "Liberation Sans" || need+=(fonts-liberation)
if [ "${#need[@]}" -gt 0 ]; then
  echo "chromium: installing ${need[*]} from Debian" >&2
  export DEBIAN_FRONTEND=noninteractive
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq >&2 && $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi
[ -x "$BROWSER" ] || { echo "chromium: $BROWSER is missing after the install" >&2; exit 1; }
echo "$BROWSER"
