#!/usr/bin/env bash
# Make sure bwrap (Debian's bubblewrap) is installed: the local driver runs every backend under
# it. Installs the package when missing and root; otherwise says what to do. Skipped when
# SVC_LOCAL_SANDBOX=off (backends then run unsandboxed, as the banner and health report).
set -euo pipefail

if [ "${SVC_LOCAL_SANDBOX:-bwrap}" = off ] || command -v bwrap >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-bwrap: bwrap is missing; install Debian's bubblewrap (apt-get install" \
         "bubblewrap) or set SVC_LOCAL_SANDBOX=off to run local backends unsandboxed" >&2
    exit 1
fi
echo "ensure-bwrap: installing Debian's bubblewrap" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
