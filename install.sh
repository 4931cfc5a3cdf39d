#!/usr/bin/env bash
# Kitten-MQ installer: the broker as one executable, run by systemd as the kitten-mq user.
#
#   curl -fsSL https://github.com/kitten-mq/kitten-mq/releases/latest/download/install.sh | sudo bash
#   curl -fsSL …/install.sh | sudo bash -s -- --version 1.0.0-beta.1     # a given release
#   sudo bash install.sh --binary ./kitten-mq                      # a local binary (offline hosts)
#   sudo bash install.sh --uninstall                               # keeps /var/www/kitten-mq
#   bash install.sh --prefix /tmp/root --binary dist/kitten-mq     # under a fake root (tests)
#   sudo bash install.sh --instances 4 --etcd http://10.0.0.1:2379 --peers a,b,c   # every core
#
# What it does (again on every run; an upgrade keeps the config, keys and data):
#   1. downloads kitten-mq-<os>-<arch> of the release and checks it against the release's SHA256SUMS
#      (or takes --binary PATH), and runs `--version` on it;
#   2. creates the kitten-mq system user and group (no login shell, no home);
#   3. creates /var/www/kitten-mq (root:kitten-mq, 750), the default config (`kitten-mq init-conf`,
#      only when missing) and the data, clients and keys folders the config names (no logs folder:
#      the broker logs to stdout and stderr, which journald keeps and rotates);
#   4. installs the binary as /var/www/kitten-mq/kitten-mq (0755) with /usr/local/bin/kitten-mq;
#   5. installs /etc/systemd/system/kitten-mq.service, then daemon-reload + enable (+ restart when
#      it was running).
#
# With --instances N (several brokers on one host, one per core; docs/cluster.md "Every core"),
# steps 3 and 5 are instead: for i in 1..N, /var/www/kitten-mq/instances/<i>/ with its own config
# (written only when missing: serviceId <host>-<i>, client port base+i-1, admin port
# admin-base+i-1, cluster.group g<i>, cluster.etcd and cluster.peers from --etcd and --peers) and
# its own data, clients and keys folders; the template unit
# /etc/systemd/system/kitten-mq@.service; then enable kitten-mq@1 ... kitten-mq@N (+ restart of
# those that were running). Under --prefix, "enable" is the symlink systemctl would make.
#
# Environment: KITTEN_MQ_BINARY (as --binary), KITTEN_MQ_VERSION (as --version),
# KITTEN_MQ_RELEASES (the releases URL; default below), KITTEN_MQ_TARGET (force an asset:
# linux-x64, linux-x64-baseline, linux-arm64, darwin-arm64), KITTEN_MQ_HOSTNAME (the name of this
# host in instance serviceIds and in --peers; default: `hostname`).
set -Eeuo pipefail

# The release this script belongs to (scripts/compile.ts checks it equals package.json "version").
DEFAULT_VERSION="1.0.0-beta.1"
RELEASES_URL="${KITTEN_MQ_RELEASES:-https://github.com/kitten-mq/kitten-mq/releases}"

SERVICE_USER="kitten-mq"
APP_DIR="/var/www/kitten-mq"
BIN_PATH="${APP_DIR}/kitten-mq"
CONFIG_PATH="${APP_DIR}/kitten-mq.config.json"
LINK_PATH="/usr/local/bin/kitten-mq"
UNIT_PATH="/etc/systemd/system/kitten-mq.service"
# --instances: one folder and one kitten-mq@<i> unit per broker process.
INSTANCES_DIR="${APP_DIR}/instances"
TEMPLATE_PATH="/etc/systemd/system/kitten-mq@.service"
WANTS_DIR="/etc/systemd/system/multi-user.target.wants"
MAX_INSTANCES=256
DEFAULT_CLIENT_PORT=1234 # socketServer.port of `kitten-mq init-conf`
DEFAULT_ADMIN_PORT=8080  # httpServerPort of `kitten-mq init-conf`

ROOT=""          # the fake root of --prefix ("" for a real install)
PREFIXED=0
WORK_DIR=""
ASSET=""         # set by detect_asset
INSTANCES=0      # --instances N (0: the single kitten-mq.service)
ETCD_JSON=""     # --etcd, as JSON strings: "http://a:2379", "http://b:2379"
PEER_HOSTS=()    # --peers, as given
CLIENT_BASE=$DEFAULT_CLIENT_PORT
ADMIN_BASE=$DEFAULT_ADMIN_PORT
HOST_NAME=""     # this host's name in serviceIds (--instances)

say() { printf 'kitten-mq install: %s\n' "$*"; }
warn() { printf 'kitten-mq install: warning: %s\n' "$*" >&2; }
die() {
  printf 'kitten-mq install: error: %s\n' "$*" >&2
  exit 1
}
on_error() {
  local code=$? line=$1 command=$2
  printf 'kitten-mq install: error: "%s" failed (exit %s, install.sh line %s); nothing else was changed after it\n' \
    "$command" "$code" "$line" >&2
  exit "$code"
}
trap 'on_error "$LINENO" "$BASH_COMMAND"' ERR
cleanup() { if [ -n "$WORK_DIR" ]; then rm -rf "$WORK_DIR"; fi; }
trap cleanup EXIT

usage() {
  cat <<EOF
Kitten-MQ installer (release ${DEFAULT_VERSION})

Usage: install.sh [--version X.Y.Z|latest] [--binary PATH] [--prefix DIR]
       install.sh --instances N [--etcd URL[,URL...]] [--peers HOST,HOST...]
                  [--base-port P] [--admin-base-port A] [--version ...] [--binary ...] [--prefix DIR]
       install.sh --uninstall [--prefix DIR]

  --version X.Y.Z  install that release (default ${DEFAULT_VERSION}; env KITTEN_MQ_VERSION)
  --binary PATH    install this kitten-mq executable instead of downloading one (env KITTEN_MQ_BINARY)
  --prefix DIR     install under DIR as a fake root: no user, no systemctl, no root needed
  --uninstall      stop and remove the service(s), binary and symlink; keeps ${APP_DIR}
  -h, --help       this help

Several brokers on this host (one per core: --instances "\$(nproc)"), units kitten-mq@1..N:
  --instances N        1 to ${MAX_INSTANCES}; instance i gets ${INSTANCES_DIR}/<i>/kitten-mq.config.json
                       (written only when missing), serviceId <host>-<i> and cluster.group g<i>
  --etcd URL,...       etcd client URLs (cluster.etcd.endpoints); required when N > 1, since
                       groups other than "default" elect their master through etcd
  --peers HOST,...     the other hosts running the same instances (this host may be listed too):
                       instance i lists instance i of each as HOST:port@HOST-<i>; every HOST must be
                       the name that host's install used (its \`hostname\`, or KITTEN_MQ_HOSTNAME)
  --base-port P        client port of instance 1 (default ${DEFAULT_CLIENT_PORT}); instance i uses P+i-1
  --admin-base-port A  admin port of instance 1 (default ${DEFAULT_ADMIN_PORT}); instance i uses A+i-1

Downloads come from \${KITTEN_MQ_RELEASES:-https://github.com/kitten-mq/kitten-mq/releases}
/download/v<version>/kitten-mq-<os>-<arch>, checked against the release's SHA256SUMS.
EOF
}

# ---------------------------------------------------------------------------------------------
# Helpers

has() { command -v "$1" >/dev/null 2>&1; }

# Is systemd the running service manager (and may we drive it)?
use_systemd() { [ "$PREFIXED" -eq 0 ] && [ -d /run/systemd/system ] && has systemctl; }

is_linux() { [ "$(uname -s)" = "Linux" ]; }

download() { # URL FILE
  local url=$1 out=$2
  if has curl; then
    curl -fsSL --retry 3 --connect-timeout 20 -o "$out" "$url"
  elif has wget; then
    wget -q -O "$out" "$url"
  else
    die "neither curl nor wget is installed: install one, or pass --binary PATH"
  fi
}

sha256_of() { # FILE
  if has sha256sum; then
    sha256sum "$1" | awk '{print $1}'
  elif has shasum; then
    shasum -a 256 "$1" | awk '{print $1}'
  elif has openssl; then
    openssl dgst -sha256 -r "$1" | awk '{print $1}'
  else
    die "no SHA-256 tool (sha256sum, shasum or openssl): cannot verify the download"
  fi
}

# Sets ASSET, the release asset for this host: kitten-mq-<os>-<arch>[-baseline].
detect_asset() {
  if [ -n "${KITTEN_MQ_TARGET:-}" ]; then
    case "$KITTEN_MQ_TARGET" in
      linux-x64 | linux-x64-baseline | linux-arm64 | darwin-arm64) ASSET="kitten-mq-${KITTEN_MQ_TARGET}"; return ;;
      *) die "KITTEN_MQ_TARGET=$KITTEN_MQ_TARGET: expected linux-x64, linux-x64-baseline, linux-arm64 or darwin-arm64" ;;
    esac
  fi
  local os arch
  os=$(uname -s)
  arch=$(uname -m)
  case "$os" in
    Linux) os=linux ;;
    Darwin) os=darwin ;;
    *) die "no release binary for $os: build one with 'bun scripts/compile.ts' and pass --binary PATH" ;;
  esac
  case "$arch" in
    x86_64 | amd64) arch=x64 ;;
    aarch64 | arm64) arch=arm64 ;;
    *) die "no release binary for $os on $arch: build one with 'bun scripts/compile.ts' and pass --binary PATH" ;;
  esac
  if [ "$os" = darwin ] && [ "$arch" = x64 ]; then
    # A shell running under Rosetta reports x86_64 on Apple silicon.
    if [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || echo 0)" = 1 ]; then
      arch=arm64
    else
      die "no release binary for Intel Macs: build one with 'bun build --compile --target=bun-darwin-x64' and pass --binary PATH"
    fi
  fi
  if [ "$os" = linux ]; then
    if ls /lib/ld-musl-* >/dev/null 2>&1 && ! ls /lib64/ld-linux-* /lib/ld-linux-* >/dev/null 2>&1; then
      die "this looks like a musl system (Alpine): the release binaries need glibc; pass --binary PATH with a musl build"
    fi
    # Bun's default x64 build needs AVX2; older CPUs get the baseline build.
    if [ "$arch" = x64 ] && ! grep -qw avx2 /proc/cpuinfo 2>/dev/null; then
      arch=x64-baseline
    fi
  fi
  ASSET="kitten-mq-${os}-${arch}"
}

# Downloads the release binary as FILE and checks its SHA-256 against the release's SHA256SUMS.
fetch_release() { # VERSION FILE
  local version=$1 out=$2 asset base expected actual
  detect_asset
  asset=$ASSET
  if [ "$version" = latest ]; then base="${RELEASES_URL%/}/latest/download"; else base="${RELEASES_URL%/}/download/v${version}"; fi
  say "downloading ${base}/${asset}"
  download "${base}/${asset}" "$out" ||
    die "cannot download ${base}/${asset}: check the version (${version}) and your network, or pass --binary PATH"
  download "${base}/SHA256SUMS" "${WORK_DIR}/SHA256SUMS" ||
    die "cannot download ${base}/SHA256SUMS: refusing to install a binary that cannot be verified"
  expected=$(awk -v name="$asset" '$2 == name || $2 == "*" name { print tolower($1); exit }' "${WORK_DIR}/SHA256SUMS")
  [ -n "$expected" ] || die "SHA256SUMS of the release has no line for ${asset}: refusing to install it"
  actual=$(sha256_of "$out" | tr 'A-F' 'a-f')
  if [ "$actual" != "$expected" ]; then
    die "checksum mismatch for ${asset}: SHA256SUMS says ${expected}, the download is ${actual}; refusing to install it (a damaged or tampered download)"
  fi
  say "checksum OK (sha256 ${actual} in SHA256SUMS)"
}

# The value of a top-level string key in a config (JSON written one key per line by init-conf,
# or by write_instance_config); FILE defaults to the single broker's config.
config_string() { # KEY DEFAULT [FILE]
  local value
  value=$(sed -n "s/^  \"$1\": *\"\\([^\"]*\\)\".*/\\1/p" "${3:-${ROOT}${CONFIG_PATH}}" | head -n 1)
  printf '%s\n' "${value:-$2}"
}

nologin_shell() {
  local shell
  for shell in /usr/sbin/nologin /sbin/nologin /usr/bin/false /bin/false; do
    if [ -x "$shell" ]; then printf '%s\n' "$shell"; return; fi
  done
  printf '/bin/false\n'
}

ensure_user() {
  if ! is_linux; then
    warn "not Linux: no ${SERVICE_USER} user is created and no service is installed; files stay owned by root"
    return
  fi
  if getent group "$SERVICE_USER" >/dev/null 2>&1; then
    say "group ${SERVICE_USER} exists"
  else
    has groupadd || die "groupadd not found: create the system group ${SERVICE_USER} yourself, then run this again"
    groupadd --system "$SERVICE_USER" || die "cannot create the group ${SERVICE_USER}"
    say "created the system group ${SERVICE_USER}"
  fi
  if id -u "$SERVICE_USER" >/dev/null 2>&1; then
    say "user ${SERVICE_USER} exists"
  else
    has useradd || die "useradd not found: create the system user ${SERVICE_USER} yourself, then run this again"
    useradd --system --gid "$SERVICE_USER" --no-create-home --home-dir /nonexistent \
      --shell "$(nologin_shell)" --comment "Kitten-MQ broker" "$SERVICE_USER" ||
      die "cannot create the user ${SERVICE_USER}"
    say "created the system user ${SERVICE_USER} (no login shell, no home)"
  fi
}

# chown unless under --prefix or without the service user.
owner() { # OWNER:GROUP PATH
  if [ "$PREFIXED" -eq 0 ] && is_linux; then chown "$1" "$2"; fi
}

# ", OWNER:GROUP" for messages, when owner() applies it.
owned() { if [ "$PREFIXED" -eq 0 ] && is_linux; then printf ', %s' "$1"; fi; }

# The [Service] lines and the hardening every kitten-mq unit shares (kitten-mq.service and the
# kitten-mq@.service template); each unit writes its own paths between them.
unit_service_common() {
  cat <<'UNIT'
ExecReload=/bin/kill -USR2 $MAINPID
KillSignal=SIGTERM
TimeoutStopSec=40
Restart=on-failure
RestartSec=2
# Keep freed memory for reuse during traffic; a quiet second gives it back. Size the garbage
# collector's heuristics for a server process, not for the whole machine (docs/durability.md).
Environment=MIMALLOC_PURGE_DELAY=3600000
Environment=BUN_JSC_forceRAMSize=1073741824
LimitNOFILE=65536
UMask=0027
UNIT
}
unit_hardening_head() {
  cat <<'UNIT'
NoNewPrivileges=yes
CapabilityBoundingSet=
AmbientCapabilities=
ProtectSystem=strict
UNIT
}
unit_hardening_tail() {
  cat <<'UNIT'
ProtectHome=yes
PrivateTmp=yes
PrivateDevices=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictSUIDSGID=yes
RestrictRealtime=yes
RestrictNamespaces=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
LockPersonality=yes
SystemCallArchitectures=native

[Install]
WantedBy=multi-user.target
UNIT
}

write_unit() { # FILE
  {
  cat <<'UNIT'
# Kitten-MQ broker, installed by install.sh. Local changes: `sudo systemctl edit kitten-mq`
# (a drop-in survives upgrades; this file is rewritten by every install).
#   systemctl reload kitten-mq        SIGUSR2: re-read the config (a bad file changes nothing)
#   systemctl stop kitten-mq          SIGTERM: soft stop, in-flight deliveries get up to 5 s
#   systemctl kill -s SIGUSR1 kitten-mq   soft stop with up to 30 s (stays stopped)
[Unit]
Description=Kitten-MQ message broker
Documentation=https://github.com/kitten-mq/kitten-mq#readme
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
User=kitten-mq
Group=kitten-mq
WorkingDirectory=/var/www/kitten-mq
ExecStart=/var/www/kitten-mq/kitten-mq start --config /var/www/kitten-mq/kitten-mq.config.json
UNIT
  unit_service_common
  cat <<'UNIT'

# Hardening. The default ports (1234, 8080) need no capability. No MemoryDenyWriteExecute:
# the JavaScript JIT writes code. Data written outside /var/www/kitten-mq needs ReadWritePaths.
UNIT
  unit_hardening_head
  cat <<'UNIT'
ReadWritePaths=/var/www/kitten-mq
UNIT
  unit_hardening_tail
  } >"$1"
}

# The template of --instances: kitten-mq@<i> runs the broker of /var/www/kitten-mq/instances/<i>/.
write_template_unit() { # FILE
  {
  cat <<'UNIT'
# Kitten-MQ broker instance (several on one host, one per core), installed by
# `install.sh --instances N`: kitten-mq@<i> runs /var/www/kitten-mq/instances/<i>/kitten-mq.config.json.
# Local changes: `sudo systemctl edit kitten-mq@.service` (every instance) or `kitten-mq@2` (one);
# a drop-in survives upgrades, this file is rewritten by every install.
#   systemctl reload kitten-mq@2      SIGUSR2: re-read instance 2's config (a bad file changes nothing)
#   systemctl stop kitten-mq@2        SIGTERM: soft stop, in-flight deliveries get up to 5 s
#   systemctl restart 'kitten-mq@*'   every running instance
[Unit]
Description=Kitten-MQ message broker, instance %i
Documentation=https://github.com/kitten-mq/kitten-mq/blob/main/docs/cluster.md
After=network-online.target
Wants=network-online.target
AssertPathExists=/var/www/kitten-mq/instances/%i/kitten-mq.config.json

[Service]
Type=simple
User=kitten-mq
Group=kitten-mq
WorkingDirectory=/var/www/kitten-mq/instances/%i
ExecStart=/var/www/kitten-mq/kitten-mq start --config /var/www/kitten-mq/instances/%i/kitten-mq.config.json
UNIT
  unit_service_common
  cat <<'UNIT'

# Hardening, as kitten-mq.service; each instance may write its own folder only. No
# MemoryDenyWriteExecute: the JavaScript JIT writes code.
UNIT
  unit_hardening_head
  cat <<'UNIT'
ReadWritePaths=/var/www/kitten-mq/instances/%i
UNIT
  unit_hardening_tail
  } >"$1"
}

# ---------------------------------------------------------------------------------------------
# Install

install_binary() { # SOURCE
  local from=$1 staged="${ROOT}${APP_DIR}/.kitten-mq.new"
  # Copy then rename: a running broker keeps its old file until it restarts.
  cp "$from" "$staged" || die "cannot copy ${from} to ${ROOT}${APP_DIR}"
  chmod 0755 "$staged"
  owner root:root "$staged"
  mv -f "$staged" "${ROOT}${BIN_PATH}" || die "cannot install the binary as ${ROOT}${BIN_PATH}"
  say "installed ${ROOT}${BIN_PATH}"
}

# The folders a config names (relative ones, under the config's folder BASE), created when missing.
ensure_dirs() { # [CONFIG_FILE BASE UNIT]: default the single broker's config, APP_DIR, kitten-mq
  local config=${1:-${ROOT}${CONFIG_PATH}} base=${2:-$APP_DIR} unit=${3:-kitten-mq} key default dir path
  for key in dataDirectory:kitten-mq-data registeredClientsPath:clients keysDirectory:keys; do
    default=${key#*:}
    key=${key%%:*}
    dir=$(config_string "$key" "$default" "$config")
    case "$dir" in
      /*)
        warn "${key} is ${dir}, outside ${base}: create it owned by ${SERVICE_USER} and add it to ReadWritePaths= (systemctl edit ${unit})"
        continue
        ;;
    esac
    path="${ROOT}${base}/${dir}"
    if [ -d "$path" ]; then
      say "keeping ${path} (${key})"
    else
      mkdir -p "$path" || die "cannot create ${path}"
      chmod 0750 "$path"
      owner "${SERVICE_USER}:${SERVICE_USER}" "$path"
      say "created ${path} (${key}; 750$(owned "${SERVICE_USER}:${SERVICE_USER}"))"
    fi
  done
}

# ---------------------------------------------------------------------------------------------
# Several brokers per host (--instances N): instance i is kitten-mq@<i>, with its folder
# instances/<i>/, its ports, serviceId <host>-<i> and cluster.group g<i>.

# A host name as it goes into a serviceId (<name>-<i>, at most 128 characters) and a peer address.
valid_host_name() { # NAME
  local re='^[A-Za-z0-9_-][A-Za-z0-9._-]*$'
  [[ $1 =~ $re ]] && [ "${#1}" -le 120 ]
}

# Checks --instances and its options before anything is changed; sets INSTANCES, CLIENT_BASE,
# ADMIN_BASE, ETCD_JSON, PEER_HOSTS and HOST_NAME.
check_instance_options() { # INSTANCES ETCD PEERS BASE_PORT ADMIN_BASE_PORT (each "" when not given)
  local n=$1 etcd=$2 peers=$3 base=$4 admin=$5 count_re='^[1-9][0-9]{0,2}$' port_re='^[1-9][0-9]{0,4}$'
  local url_re='^https?://([A-Za-z0-9._~-]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?$' item items last option value
  if [ -z "$n" ]; then
    if [ -n "${etcd}${peers}${base}${admin}" ]; then
      die "--etcd, --peers, --base-port and --admin-base-port go with --instances N"
    fi
    return 0
  fi
  if ! [[ $n =~ $count_re ]] || [ "$n" -gt "$MAX_INSTANCES" ]; then
    die "--instances ${n}: expected a whole number of broker processes from 1 to ${MAX_INSTANCES} (one per core: --instances \$(nproc))"
  fi
  INSTANCES=$n
  last=$((65536 - n))
  for option in "--base-port:${base}:${DEFAULT_CLIENT_PORT}" "--admin-base-port:${admin}:${DEFAULT_ADMIN_PORT}"; do
    value=${option#*:}
    value=${value%%:*}
    option=${option%%:*}
    if [ -n "$value" ] && { ! [[ $value =~ $port_re ]] || [ "$value" -lt 1024 ] || [ "$value" -gt "$last" ]; }; then
      die "${option} ${value}: expected a port from 1024 to ${last} (instance i uses it + i - 1; the units grant no capability for ports below 1024)"
    fi
  done
  CLIENT_BASE=${base:-$DEFAULT_CLIENT_PORT}
  ADMIN_BASE=${admin:-$DEFAULT_ADMIN_PORT}
  if [ "$CLIENT_BASE" -le $((ADMIN_BASE + n - 1)) ] && [ "$ADMIN_BASE" -le $((CLIENT_BASE + n - 1)) ]; then
    die "client ports ${CLIENT_BASE}-$((CLIENT_BASE + n - 1)) and admin ports ${ADMIN_BASE}-$((ADMIN_BASE + n - 1)) overlap: change --base-port or --admin-base-port"
  fi

  if [ -z "$etcd" ] && [ "$n" -gt 1 ]; then
    die "--instances ${n} needs --etcd URL[,URL...]: each instance leads its own group (g1 ... g${n}), and a group other than \"default\" elects its master through etcd (the broker refuses cluster.group without cluster.etcd)"
  fi
  if [ -z "$etcd" ] && [ -n "$peers" ]; then
    die "--peers needs --etcd URL[,URL...]: the instances i of the hosts form the group g<i>, which elects its master through etcd"
  fi
  if [ -n "$etcd" ]; then
    case "$etcd" in ,* | *, | *,,*) die "--etcd ${etcd}: an empty URL in the list" ;; esac
    IFS=, read -r -a items <<<"$etcd"
    for item in "${items[@]}"; do
      [[ $item =~ $url_re ]] || die "--etcd: \"${item}\" is not an etcd client URL like http://10.0.0.1:2379"
      ETCD_JSON="${ETCD_JSON:+${ETCD_JSON}, }\"${item}\""
    done
  fi
  if [ -n "$peers" ]; then
    case "$peers" in ,* | *, | *,,*) die "--peers ${peers}: an empty name in the list" ;; esac
    IFS=, read -r -a items <<<"$peers"
    for item in "${items[@]}"; do
      valid_host_name "$item" ||
        die "--peers: \"${item}\" cannot name a host in a serviceId: use host names of letters, digits, \".\", \"_\", \"-\" (no IPv6 address, at most 120 characters)"
      case " ${PEER_HOSTS[*]-} " in *" ${item} "*) die "--peers lists ${item} twice" ;; esac
      PEER_HOSTS+=("$item")
    done
  fi

  HOST_NAME=${KITTEN_MQ_HOSTNAME:-$(hostname 2>/dev/null || uname -n)}
  valid_host_name "$HOST_NAME" ||
    die "this host's name \"${HOST_NAME}\" cannot go into a serviceId (letters, digits, \".\", \"_\", \"-\"): set KITTEN_MQ_HOSTNAME to the name the other hosts use for it"
}

# Writes instance I's config: only the keys an instance needs, the other keys keep their defaults.
write_instance_config() { # I FILE
  local i=$1 out=$2 port admin group etcd=null advertise=null host=127.0.0.1 is_master=true
  local peers="" brokers=1 min_in_sync=1 peer about exposed=""
  port=$((CLIENT_BASE + i - 1))
  admin=$((ADMIN_BASE + i - 1))
  if [ -n "$ETCD_JSON" ]; then
    group="g${i}"
    is_master=false # etcd elects the master (isMaster true would only be warned about)
    etcd="{ \"endpoints\": [${ETCD_JSON}], \"prefix\": \"kitten-mq/\", \"leaseTtlSeconds\": 3 }"
    about="cluster.group ${group}: instance ${i} of this host and of every host in cluster.peers; the group elects its master through cluster.etcd, beside the groups of the other instances."
  else
    group="default"
    about="cluster.group default: one broker, the master (install.sh --etcd makes instance groups g1..gN with automatic failover; docs/cluster.md)."
  fi
  for peer in ${PEER_HOSTS[@]+"${PEER_HOSTS[@]}"}; do
    if [ "$peer" = "$HOST_NAME" ]; then continue; fi
    peers="${peers:+${peers}, }\"${peer}:${port}@${peer}-${i}\""
    brokers=$((brokers + 1))
  done
  if [ "${#PEER_HOSTS[@]}" -gt 0 ]; then
    # Other hosts reach this broker: every address, and its name as they list it.
    host=0.0.0.0
    advertise="\"${HOST_NAME}:${port}\""
    exposed="
    \"socketServer.host 0.0.0.0: the peers on other hosts connect here. Set socketServer.token (and add '#token' to each cluster.peers entry) or rules: docs/security.md.\","
  fi
  # docs/cluster.md: with three brokers or more, a confirmed message is on two of them.
  if [ "$brokers" -ge 3 ]; then min_in_sync=2; fi
  cat >"$out" <<JSON
{
  "\$comment": [
    "Instance ${i} of ${INSTANCES} on ${HOST_NAME} (unit kitten-mq@${i}), written once by install.sh --instances: edit it freely, upgrades keep it.",
    "Only the keys of an instance are here; every other key has its default ('kitten-mq init-conf FILE' writes them all, documented).",
    "Ports: instance i listens on ${CLIENT_BASE}+i-1 (clients) and ${ADMIN_BASE}+i-1 (admin API). Folders are relative to this file's folder.",${exposed}
    "${about}"
  ],
  "serviceId": "${HOST_NAME}-${i}",
  "isMaster": ${is_master},
  "socketServer": {
    "host": "${host}",
    "port": ${port}
  },
  "httpServerPort": ${admin},
  "dataDirectory": "kitten-mq-data",
  "registeredClientsPath": "clients",
  "keysDirectory": "keys",
  "cluster": {
    "group": "${group}",
    "peers": [${peers}],
    "minInSyncReplicas": ${min_in_sync},
    "etcd": ${etcd},
    "advertise": ${advertise}
  }
}
JSON
}

# The instance folders and configs (each written only when missing), and their data folders.
install_instance_configs() {
  local i dir config extra
  mkdir -p "${ROOT}${INSTANCES_DIR}" || die "cannot create ${ROOT}${INSTANCES_DIR}"
  chmod 0750 "${ROOT}${INSTANCES_DIR}"
  owner "root:${SERVICE_USER}" "${ROOT}${INSTANCES_DIR}"
  for ((i = 1; i <= INSTANCES; i++)); do
    dir="${INSTANCES_DIR}/${i}"
    config="${dir}/kitten-mq.config.json"
    mkdir -p "${ROOT}${dir}" || die "cannot create ${ROOT}${dir}"
    chmod 0750 "${ROOT}${dir}"
    owner "root:${SERVICE_USER}" "${ROOT}${dir}"
    if [ -e "${ROOT}${config}" ]; then
      say "keeping the config ${ROOT}${config} (instance ${i})"
    else
      write_instance_config "$i" "${WORK_DIR}/instance.config.json"
      install -m 0640 "${WORK_DIR}/instance.config.json" "${ROOT}${config}" || die "cannot write ${ROOT}${config}"
      owner "root:${SERVICE_USER}" "${ROOT}${config}"
      say "wrote ${ROOT}${config} (serviceId ${HOST_NAME}-${i}, port $((CLIENT_BASE + i - 1)), admin port $((ADMIN_BASE + i - 1)); 640$(owned "root:${SERVICE_USER}"))"
    fi
    ensure_dirs "${ROOT}${config}" "$dir" "kitten-mq@${i}"
  done
  for extra in "${ROOT}${INSTANCES_DIR}"/*; do
    extra=${extra##*/}
    if [[ $extra =~ ^[0-9]+$ ]] && [ "$extra" -gt "$INSTANCES" ]; then
      warn "instance ${extra} (${INSTANCES_DIR}/${extra}) is beyond --instances ${INSTANCES}: left as it is; to stop it: sudo systemctl disable --now kitten-mq@${extra}"
    fi
  done
  if [ -e "${ROOT}${UNIT_PATH}" ]; then
    warn "the single broker's ${UNIT_PATH} is installed too: if it uses an instance's ports (${DEFAULT_CLIENT_PORT} and ${DEFAULT_ADMIN_PORT} by default), disable it: sudo systemctl disable --now kitten-mq"
  fi
}

# The instances among 1..N that systemd runs now (restarted after an upgrade).
running_instances() {
  local i
  if ! use_systemd; then return 0; fi
  for ((i = 1; i <= INSTANCES; i++)); do
    if systemctl is-active --quiet "kitten-mq@${i}.service"; then printf '%s ' "$i"; fi
  done
}

install_template_unit() {
  mkdir -p "${ROOT}$(dirname "$TEMPLATE_PATH")"
  write_template_unit "${WORK_DIR}/kitten-mq@.service"
  if [ -f "${ROOT}${TEMPLATE_PATH}" ] && cmp -s "${WORK_DIR}/kitten-mq@.service" "${ROOT}${TEMPLATE_PATH}"; then
    say "systemd unit ${ROOT}${TEMPLATE_PATH} is up to date"
  else
    install -m 0644 "${WORK_DIR}/kitten-mq@.service" "${ROOT}${TEMPLATE_PATH}" || die "cannot write ${ROOT}${TEMPLATE_PATH}"
    say "installed the systemd template unit ${ROOT}${TEMPLATE_PATH}"
  fi
}

# Enables kitten-mq@1..N (under --prefix: the symlinks `systemctl enable` makes), then restarts
# those that were running (RUNNING: their numbers).
enable_instances() { # RUNNING
  local running=$1 i units=() restarted=0
  for ((i = 1; i <= INSTANCES; i++)); do units+=("kitten-mq@${i}.service"); done
  if use_systemd; then
    systemctl daemon-reload || die "systemctl daemon-reload failed"
    systemctl enable "${units[@]}" >/dev/null 2>&1 || die "systemctl enable kitten-mq@1 ... kitten-mq@${INSTANCES} failed"
    say "enabled ${units[*]} (start at boot)"
    for i in $running; do
      systemctl restart "kitten-mq@${i}.service" || die "systemctl restart kitten-mq@${i} failed: see journalctl -u kitten-mq@${i}"
      say "restarted kitten-mq@${i}.service on the new binary (upgrade)"
      restarted=1
    done
    if [ "$restarted" -eq 0 ]; then
      say "start them with: sudo systemctl start kitten-mq@{1..${INSTANCES}}   (logs: journalctl -u 'kitten-mq@*' -f)"
    fi
  elif [ "$PREFIXED" -eq 1 ]; then
    mkdir -p "${ROOT}${WANTS_DIR}"
    for ((i = 1; i <= INSTANCES; i++)); do
      ln -sfn "$TEMPLATE_PATH" "${ROOT}${WANTS_DIR}/kitten-mq@${i}.service" || die "cannot enable kitten-mq@${i} under ${ROOT}"
    done
    say "enabled ${units[*]} under ${ROOT} (the links systemctl enable makes)"
  elif is_linux; then
    warn "systemd is not running here: the units are installed but not enabled; start instance i with:"
    warn "  sudo -u ${SERVICE_USER} ${BIN_PATH} start --config ${INSTANCES_DIR}/<i>/kitten-mq.config.json"
  else
    say "start instance i with: ${LINK_PATH} start --config ${INSTANCES_DIR}/<i>/kitten-mq.config.json"
  fi
}

# Every kitten-mq@ instance known here, one name per line: folders, enable links, loaded units.
instance_names() {
  local path
  for path in "${ROOT}${INSTANCES_DIR}"/* "${ROOT}${WANTS_DIR}"/kitten-mq@*.service; do
    case "$path" in
      */kitten-mq@\*.service | */instances/\*) ;;
      *.service) path=${path##*/kitten-mq@}; printf '%s\n' "${path%.service}" ;;
      *) if [ -d "$path" ]; then printf '%s\n' "${path##*/}"; fi ;;
    esac
  done
  if use_systemd; then
    systemctl list-units --all --plain --no-legend 'kitten-mq@*.service' 2>/dev/null |
      awk '{ name = $1; sub(/^kitten-mq@/, "", name); sub(/\.service$/, "", name); print name }'
  fi
}

uninstall_instances() {
  local name link removed=0
  for name in $(instance_names | sort -u); do
    if ! [[ $name =~ ^[A-Za-z0-9._-]+$ ]]; then continue; fi
    if use_systemd; then
      if systemctl is-active --quiet "kitten-mq@${name}.service"; then
        systemctl stop "kitten-mq@${name}.service" || die "systemctl stop kitten-mq@${name} failed"
        say "stopped kitten-mq@${name}.service"
      fi
      if systemctl is-enabled --quiet "kitten-mq@${name}.service" 2>/dev/null; then
        systemctl disable "kitten-mq@${name}.service" >/dev/null 2>&1 || die "systemctl disable kitten-mq@${name} failed"
        say "disabled kitten-mq@${name}.service"
      fi
    fi
    link="${ROOT}${WANTS_DIR}/kitten-mq@${name}.service"
    if [ -L "$link" ]; then
      rm -f "$link"
      say "removed ${link}"
    fi
  done
  if [ -e "${ROOT}${TEMPLATE_PATH}" ]; then
    rm -f "${ROOT}${TEMPLATE_PATH}"
    removed=1
    say "removed ${ROOT}${TEMPLATE_PATH}"
  fi
  if [ "$removed" -eq 1 ] && use_systemd; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
}

do_install() { # VERSION BINARY
  local version=$1 binary=$2 staged reported was_active=0 running=""
  if [ "$PREFIXED" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
    die "run this as root (curl -fsSL …/install.sh | sudo bash), or use --prefix DIR for a fake root"
  fi
  WORK_DIR=$(mktemp -d "${TMPDIR:-/tmp}/kitten-mq-install.XXXXXX")

  # The binary is staged in WORK_DIR, and must run here (right architecture, not damaged)
  # before anything is changed.
  staged="${WORK_DIR}/kitten-mq"
  if [ -n "$binary" ]; then
    [ -e "$binary" ] || die "--binary ${binary}: no such file"
    [ -f "$binary" ] || die "--binary ${binary}: not a regular file"
    cp "$binary" "$staged" || die "cannot read --binary ${binary}"
    say "using the local binary ${binary}"
  else
    fetch_release "$version" "$staged"
  fi
  # An ELF or Mach-O file, never anything bash would run as a script.
  case "$(head -c 4 "$staged" | od -An -tx1 | tr -d ' \n')" in
    7f454c46 | cffaedfe | cefaedfe) ;;
    *) die "${binary:-the download} is not an executable (ELF or Mach-O): expected a kitten-mq binary" ;;
  esac
  chmod 0755 "$staged"
  reported=$("$staged" --version </dev/null 2>&1) || true
  case "$reported" in
    "kitten-mq "*) say "binary: ${reported}" ;;
    *) die "${binary:-the download} is not a kitten-mq binary that runs on this host ($(uname -s) $(uname -m)); its --version printed: ${reported:-nothing}" ;;
  esac
  if [ -z "$binary" ] && [ "$version" != latest ] && [[ "$reported" != "kitten-mq ${version} "* ]]; then
    die "the release v${version} binary reports '${reported}': refusing to install it"
  fi

  if [ "$PREFIXED" -eq 1 ]; then
    say "installing under ${ROOT} (fake root: no user, no systemctl)"
  else
    ensure_user
  fi

  mkdir -p "${ROOT}${APP_DIR}" || die "cannot create ${ROOT}${APP_DIR}"
  chmod 0750 "${ROOT}${APP_DIR}"
  owner "root:${SERVICE_USER}" "${ROOT}${APP_DIR}"
  say "directory ${ROOT}${APP_DIR} (750$(owned "root:${SERVICE_USER}"))"

  if [ "$INSTANCES" -gt 0 ]; then
    running=$(running_instances)
  elif use_systemd && systemctl is-active --quiet kitten-mq.service; then
    was_active=1
  fi
  install_binary "$staged"

  if [ "$INSTANCES" -gt 0 ]; then
    install_instance_configs
  elif [ -e "${ROOT}${CONFIG_PATH}" ]; then
    say "keeping the config ${ROOT}${CONFIG_PATH}"
  else
    "${ROOT}${BIN_PATH}" init-conf "${ROOT}${CONFIG_PATH}" </dev/null >/dev/null ||
      die "'kitten-mq init-conf ${ROOT}${CONFIG_PATH}' failed"
    chmod 0640 "${ROOT}${CONFIG_PATH}"
    owner "root:${SERVICE_USER}" "${ROOT}${CONFIG_PATH}"
    say "wrote the default config ${ROOT}${CONFIG_PATH} (kitten-mq init-conf; 640$(owned "root:${SERVICE_USER}"))"
  fi
  if [ "$INSTANCES" -eq 0 ]; then ensure_dirs; fi

  mkdir -p "${ROOT}$(dirname "$LINK_PATH")"
  if [ -e "${ROOT}${LINK_PATH}" ] && [ ! -L "${ROOT}${LINK_PATH}" ]; then
    warn "replacing the file ${ROOT}${LINK_PATH} with a symlink"
  fi
  ln -sfn "$BIN_PATH" "${ROOT}${LINK_PATH}" || die "cannot create the symlink ${ROOT}${LINK_PATH}"
  say "linked ${ROOT}${LINK_PATH} -> ${BIN_PATH}"

  if [ "$INSTANCES" -gt 0 ]; then
    if [ "$PREFIXED" -eq 1 ] || is_linux; then install_template_unit; fi
    enable_instances "$running"
    say "done: ${INSTANCES} instances; edit ${INSTANCES_DIR}/<i>/kitten-mq.config.json, then 'sudo systemctl reload kitten-mq@<i>'; 'sudo kitten-mq status -c ${INSTANCES_DIR}/1/kitten-mq.config.json' shows instance 1"
    return 0
  fi

  if [ "$PREFIXED" -eq 1 ] || is_linux; then
    mkdir -p "${ROOT}$(dirname "$UNIT_PATH")"
    write_unit "${WORK_DIR}/kitten-mq.service"
    if [ -f "${ROOT}${UNIT_PATH}" ] && cmp -s "${WORK_DIR}/kitten-mq.service" "${ROOT}${UNIT_PATH}"; then
      say "systemd unit ${ROOT}${UNIT_PATH} is up to date"
    else
      install -m 0644 "${WORK_DIR}/kitten-mq.service" "${ROOT}${UNIT_PATH}" || die "cannot write ${ROOT}${UNIT_PATH}"
      say "installed the systemd unit ${ROOT}${UNIT_PATH}"
    fi
  fi

  if use_systemd; then
    systemctl daemon-reload || die "systemctl daemon-reload failed"
    systemctl enable kitten-mq.service >/dev/null 2>&1 || die "systemctl enable kitten-mq failed"
    say "enabled kitten-mq.service (starts at boot)"
    if [ "$was_active" -eq 1 ]; then
      systemctl restart kitten-mq.service || die "systemctl restart kitten-mq failed: see journalctl -u kitten-mq"
      say "restarted kitten-mq.service on the new binary (upgrade)"
    else
      say "start it with: sudo systemctl start kitten-mq   (logs: journalctl -u kitten-mq -f)"
    fi
  elif [ "$PREFIXED" -eq 0 ] && is_linux; then
    warn "systemd is not running here: the unit is installed but not enabled; start the broker with:"
    warn "  sudo -u ${SERVICE_USER} ${BIN_PATH} start --config ${CONFIG_PATH}"
  elif [ "$PREFIXED" -eq 0 ]; then
    say "start it with: ${LINK_PATH} start --config ${CONFIG_PATH}"
  fi
  say "done: edit ${CONFIG_PATH}, then 'sudo systemctl reload kitten-mq'; 'sudo kitten-mq status -c ${CONFIG_PATH}' shows it"
}

# ---------------------------------------------------------------------------------------------
# Uninstall

do_uninstall() {
  if [ "$PREFIXED" -eq 0 ] && [ "$(id -u)" -ne 0 ]; then
    die "run this as root (sudo bash install.sh --uninstall), or use --prefix DIR"
  fi
  if use_systemd; then
    if systemctl is-active --quiet kitten-mq.service; then
      systemctl stop kitten-mq.service || die "systemctl stop kitten-mq failed"
      say "stopped kitten-mq.service"
    fi
    if systemctl is-enabled --quiet kitten-mq.service 2>/dev/null; then
      systemctl disable kitten-mq.service >/dev/null 2>&1 || die "systemctl disable kitten-mq failed"
      say "disabled kitten-mq.service"
    fi
  fi
  if [ -e "${ROOT}${UNIT_PATH}" ]; then
    rm -f "${ROOT}${UNIT_PATH}"
    say "removed ${ROOT}${UNIT_PATH}"
    if use_systemd; then systemctl daemon-reload || die "systemctl daemon-reload failed"; fi
  fi
  uninstall_instances
  if [ -L "${ROOT}${LINK_PATH}" ]; then
    rm -f "${ROOT}${LINK_PATH}"
    say "removed ${ROOT}${LINK_PATH}"
  fi
  if [ -e "${ROOT}${BIN_PATH}" ]; then
    rm -f "${ROOT}${BIN_PATH}"
    say "removed ${ROOT}${BIN_PATH}"
  fi
  if [ -d "${ROOT}${APP_DIR}" ]; then
    say "kept ${ROOT}${APP_DIR} (config, keys, data) and the ${SERVICE_USER} user; to remove them too:"
    say "  sudo rm -rf ${APP_DIR} && sudo userdel ${SERVICE_USER}"
  fi
  say "uninstalled"
}

# ---------------------------------------------------------------------------------------------

main() {
  local version="${KITTEN_MQ_VERSION:-$DEFAULT_VERSION}" binary="${KITTEN_MQ_BINARY:-}" prefix="" uninstall=0
  local instances="" instances_given=0 etcd="" peers="" base_port="" admin_base_port=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --version) [ $# -ge 2 ] || die "--version needs a value (X.Y.Z or latest)"; version=$2; shift 2 ;;
      --version=*) version=${1#*=}; shift ;;
      --binary) [ $# -ge 2 ] || die "--binary needs a path"; binary=$2; shift 2 ;;
      --binary=*) binary=${1#*=}; shift ;;
      --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
      --prefix=*) prefix=${1#*=}; shift ;;
      --instances) [ $# -ge 2 ] || die "--instances needs a number (1 to ${MAX_INSTANCES})"; instances=$2; instances_given=1; shift 2 ;;
      --instances=*) instances=${1#*=}; instances_given=1; shift ;;
      --etcd) [ $# -ge 2 ] || die "--etcd needs etcd client URLs (http://host:2379[,...])"; etcd=$2; shift 2 ;;
      --etcd=*) etcd=${1#*=}; shift ;;
      --peers) [ $# -ge 2 ] || die "--peers needs host names (a,b,c)"; peers=$2; shift 2 ;;
      --peers=*) peers=${1#*=}; shift ;;
      --base-port) [ $# -ge 2 ] || die "--base-port needs a port"; base_port=$2; shift 2 ;;
      --base-port=*) base_port=${1#*=}; shift ;;
      --admin-base-port) [ $# -ge 2 ] || die "--admin-base-port needs a port"; admin_base_port=$2; shift 2 ;;
      --admin-base-port=*) admin_base_port=${1#*=}; shift ;;
      --uninstall) uninstall=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) usage >&2; die "unknown argument: $1" ;;
    esac
  done
  version=${version#v}
  if [ "$version" != latest ] && ! printf '%s' "$version" | grep -Eq '^[0-9]+\.[0-9]+\.[0-9]+([-+][0-9A-Za-z.-]+)?$'; then
    die "--version ${version}: expected X.Y.Z (or latest)"
  fi
  if [ "$instances_given" -eq 1 ] && [ -z "$instances" ]; then
    die "--instances needs a number (1 to ${MAX_INSTANCES})"
  fi
  if [ "$uninstall" -eq 0 ]; then
    check_instance_options "$instances" "$etcd" "$peers" "$base_port" "$admin_base_port"
  fi
  if [ -n "$prefix" ]; then
    mkdir -p "$prefix" || die "cannot create the prefix ${prefix}"
    ROOT=$(cd "$prefix" && pwd -P)
    ROOT=${ROOT%/}
    PREFIXED=1
  fi
  if [ "$uninstall" -eq 1 ]; then
    do_uninstall
  else
    do_install "$version" "$binary"
  fi
}

# Last line: a truncated download (curl | bash) runs nothing.
main "$@"
