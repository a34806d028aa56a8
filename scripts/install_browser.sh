#!/usr/bin/env bash
# Install the browser the GUI setting drives: Debian's chromium, from the distribution's own packages (no
# browser download from elsewhere, ever). Does nothing when a Chromium is already on PATH.
#
#   bash scripts/install_browser.sh        (`make browser` runs it; `make test` too)
#
# Without apt-get, or without root and sudo, it says how to install one and exits 0, so the rest of the suite
# still runs (the GUI tests then skip, naming why); with OPENCLAW_RL_REQUIRE_BROWSER=1 (CI) it exits 1 instead.
set -euo pipefail

for b in chromium chromium-browser google-chrome google-chrome-stable chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    exit 0
  fi
done

give_up() {
  echo "install_browser: $1; the GUI setting needs Chromium (Debian/Ubuntu: sudo apt-get install chromium)" >&2
  [[ "${OPENCLAW_RL_REQUIRE_BROWSER:-0}" == 1 ]] && exit 1
  exit 0
}

command -v apt-get >/dev/null 2>&1 || give_up "no apt-get on this machine"
if [[ $(id -u) -eq 0 ]]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  give_up "not root and no password-less sudo"
fi
echo "install_browser: installing Debian's chromium (apt-get; a minute or two)" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq >/dev/null || give_up "apt-get update failed"
"${sudo[@]}" apt-get install -y -qq --no-install-recommends chromium >/dev/null || give_up "apt-get install chromium failed"
command -v chromium >/dev/null 2>&1 || give_up "chromium is still not on PATH after apt-get install"
echo "install_browser: $(chromium --version 2>/dev/null | head -1)" >&2
