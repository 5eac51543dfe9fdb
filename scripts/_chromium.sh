# Sourced by test.sh: make sure a headless Chromium and its WebDriver are installed (the dashboard's
# tests drive a real browser). Missing: installed from Debian's chromium and chromium-driver packages
# when running as root, otherwise the command to run is printed and those tests are skipped.
cometmq_chromium_ready() {
  command -v chromium >/dev/null && command -v chromedriver >/dev/null
}

if ! cometmq_chromium_ready; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "cometmq: installing Chromium (Debian packages chromium, chromium-driver) for the dashboard tests" >&2
    DEBIAN_FRONTEND=noninteractive apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y chromium chromium-driver
  else
    echo "cometmq: Chromium is not installed; the dashboard tests need it:" >&2
    echo "cometmq:   sudo apt-get update && sudo apt-get install -y chromium chromium-driver" >&2
  fi
fi
