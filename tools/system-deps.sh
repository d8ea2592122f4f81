#!/usr/bin/env bash
# The system packages the test suite needs, installed when missing (`make test` runs this first).
#   chromium         headless browser that renders the funnel report (tests/test_report.py)
#   openssh-server   sshd on 127.0.0.1 for the Ray cluster-launcher test (tests/test_ray_launcher.py)
#   openssh-client   ssh and ssh-keygen for the same test
#   rsync            the cluster launcher copies files with it
# Costs nothing when every command is already there. Installs with apt-get as root or with
# passwordless sudo; otherwise fails with one line that names what to install.
set -euo pipefail

have() { command -v "$1" >/dev/null 2>&1; }

missing=()
have chromium || have chromium-browser || have google-chrome || missing+=(chromium)
have sshd || [ -x /usr/sbin/sshd ] || missing+=(openssh-server)
{ have ssh && have ssh-keygen; } || missing+=(openssh-client)
have rsync || missing+=(rsync)
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ] && have sudo && sudo -n true 2>/dev/null; then
  sudo="sudo -n"
fi
if have apt-get && { [ "$(id -u)" -eq 0 ] || [ -n "$sudo" ]; }; then
  echo "installing the system packages the tests need: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  exit 0
fi
echo "the tests need these system packages, which are missing and cannot be installed here" \
  "(no apt-get, or not root and no passwordless sudo): ${missing[*]};" \
  "install them, e.g. sudo apt-get install ${missing[*]}, then run make test again" >&2
exit 1
