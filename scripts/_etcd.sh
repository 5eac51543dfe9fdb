# Sourced by test.sh: make sure the etcd server binary is installed (the failover tests start real etcd
# processes). Missing: installed from Debian's etcd-server package when running as root, otherwise the
# command to run is printed and the tests go on without it.
cometmq_etcd_ready() {
  command -v etcd >/dev/null
}

if ! cometmq_etcd_ready; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "cometmq: installing etcd (Debian package etcd-server) for the failover tests" >&2
    # No questions asked: CI has no terminal.
    DEBIAN_FRONTEND=noninteractive apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y etcd-server
  else
    echo "cometmq: etcd is not installed; the failover tests need it:" >&2
    echo "cometmq:   sudo apt-get update && sudo apt-get install -y etcd-server" >&2
  fi
fi
