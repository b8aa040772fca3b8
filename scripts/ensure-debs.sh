#!/usr/bin/env bash
# Install the Debian packages behind the tools named on the command line that are missing,
# with a single `apt-get update` for all of them (as root; otherwise says what to do):
#   bwrap  Debian's bubblewrap: the local driver runs every backend under it (skipped when
#          SVC_LOCAL_SANDBOX=off: backends then run unsandboxed, as the banner and health say)
#   pg15   Debian's postgresql-15: the second test pass (scripts/with-pg15.sh)
#   pasta  Debian's passt: the sandboxed backend's own network namespace (DESIGN 13; skipped
#          when SVC_LOCAL_SANDBOX=off)
#   node   Debian's nodejs and npm: `make codex` installs the Codex CLI the tests run
set -euo pipefail

missing=()
for tool in "$@"; do
    case "$tool" in
        bwrap) [ "${SVC_LOCAL_SANDBOX:-bwrap}" = off ] || command -v bwrap >/dev/null 2>&1 \
                   || missing+=(bubblewrap) ;;
        pg15)  [ -x /usr/lib/postgresql/15/bin/postgres ] || missing+=(postgresql-15) ;;
        pasta) [ "${SVC_LOCAL_SANDBOX:-bwrap}" = off ] || command -v pasta >/dev/null 2>&1 \
                   || missing+=(passt) ;;
        node)  { command -v node && command -v npm; } >/dev/null 2>&1 \
                   || missing+=(nodejs npm) ;;
        *)     echo "ensure-debs: unknown tool $tool" >&2; exit 2 ;;
    esac
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-debs: missing ${missing[*]}; install with apt-get install ${missing[*]}" \
         "(for bubblewrap or passt, or set SVC_LOCAL_SANDBOX=off to run local backends" \
         "unsandboxed)" >&2
    exit 1
fi
echo "ensure-debs: installing Debian's ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
