#!/usr/bin/env bash
# An alias of terminal_qwen3_8b_rl.sh (the seed's name; this one is kept for existing users and upstream's
# newer name): the same script, the same settings from the environment.
set -euo pipefail
exec "${BASH:-bash}" "$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" &>/dev/null && pwd)/terminal_qwen3_8b_rl.sh" "$@"
