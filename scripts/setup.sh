#!/usr/bin/env bash
# One set-up path for a fresh machine and for one that already has some of it: installs the
# Debian packages the tests and the demo need when missing, creates .venv and installs the
# project with its dev extras. Idempotent; quiet when there is nothing to do.
#
# `--airflow` also creates .venv-airflow (the Airflow provider's environment: scripts/test.sh
# asks for it; the demo does not need it, and its first install takes many minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

with_airflow=""
for arg in "$@"; do
  case "$arg" in
    --airflow) with_airflow=1 ;;
    *) printf 'setup: unknown option %s (known: --airflow)\n' "$arg" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*" >&2; }

# --- Debian packages --------------------------------------------------------------------------
# mariadb-server/-client: private binlog servers for tests and the demo (never the system one).
# zookeeper: the HA backend's server jar (with libnetty-java, which its TLS client port runs on,
# tests/integration/test_ha_zookeeper_tls.py). A Java runtime runs ZooKeeper and Apache Spark;
# maven fetches Spark's Delta and S3 jars (below).
# postgresql: initdb/postgres for the private server of the PostgreSQL lease tests.
# chromium: headless screenshots of the Dagster UI (`python -m cdc_platform.testing.demo_check`).
# percona-toolkit: pt-online-schema-change, run against the private MariaDB by
# tests/integration/test_online_schema_change.py (docs/ddl.md).
need=()
for pkg in mariadb-server mariadb-client zookeeper postgresql chromium percona-toolkit; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg")
done
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v mvn >/dev/null 2>&1 || need+=(maven)
if [ "${#need[@]}" -gt 0 ]; then
  say "installing Debian packages: ${need[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  # Keep package scripts from starting system services: the project starts private servers.
  policy_created=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo_cmd tee /usr/sbin/policy-rc.d >/dev/null
    $sudo_cmd chmod +x /usr/sbin/policy-rc.d
    policy_created=1
  fi
  $sudo_cmd apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  [ -z "$policy_created" ] || $sudo_cmd rm -f /usr/sbin/policy-rc.d
fi

# --- The installer -----------------------------------------------------------------------------
# uv installs the same pinned versions as pip, faster (measured here, caches warm: .venv in 81 s
# instead of 110 s on a quiet machine, 74 s instead of 147 s on a loaded one; the test command
# waits for it; about the same CPU, most of it compiling bytecode).
# It is installed into .venv by pip, at a pinned version, and compiles every module to bytecode at
# install, as pip does: where PYTHONDONTWRITEBYTECODE is set (as on the project's machines) no
# process would ever write a .pyc, and each would compile what it imports from source (it made
# the test command far slower). uv does not read pip's configuration, so pip's environment
# settings are passed on (index, extra index, find-links, certificate); where uv still cannot
# install (a pip.conf-only index, a network it cannot reach), or with CDC_SETUP_PIP=1, pip does
# the work, as before.
UV_VERSION=0.13.9
uv_env=()
[ -z "${PIP_INDEX_URL:-}" ] || uv_env+=("UV_INDEX_URL=$PIP_INDEX_URL")
[ -z "${PIP_EXTRA_INDEX_URL:-}" ] || uv_env+=("UV_EXTRA_INDEX_URL=$PIP_EXTRA_INDEX_URL")
[ -z "${PIP_FIND_LINKS:-}" ] || uv_env+=("UV_FIND_LINKS=$PIP_FIND_LINKS")
[ -n "${SSL_CERT_FILE:-}" ] || [ -z "${PIP_CERT:-}" ] || uv_env+=("SSL_CERT_FILE=$PIP_CERT")

# install_into VENV LOG ARGS...: `pip install ARGS` into VENV, by uv when it can; output to LOG.
install_into() {
  local venv="$1" log="$2"
  shift 2
  if [ -z "${CDC_SETUP_PIP:-}" ] && [ ! -x .venv/bin/uv ]; then
    .venv/bin/python -m pip install --disable-pip-version-check -q "uv==$UV_VERSION" >>"$log" 2>&1 || true
  fi
  if [ -z "${CDC_SETUP_PIP:-}" ] && [ -x .venv/bin/uv ]; then
    if env ${uv_env[@]+"${uv_env[@]}"} .venv/bin/uv pip install --quiet --compile-bytecode \
         --python "$venv/bin/python" "$@" >>"$log" 2>&1; then
      return 0
    fi
    echo "setup: uv could not install (above); pip installs instead" >>"$log"
  fi
  "$venv/bin/python" -m pip install --disable-pip-version-check --upgrade pip >>"$log" 2>&1 \
    && "$venv/bin/python" -m pip install --disable-pip-version-check "$@" >>"$log" 2>&1
}

# --- pyspark as a wheel, built once ---------------------------------------------------------------
# pyspark is published as a source archive only (about 450 MB of jars). uv builds it again on every
# fresh clone and keeps each build in its cache (about 1.9 GB a time: the disk of a machine that
# sets up many clones fills up), and pip's own cache is only used by pip. So the pinned version is
# built into a wheel once, by pip, into ${CDC_PLATFORM_CACHE:-~/.cache/cdc-platform}/wheels, and
# every install finds it there. Where that fails (no network), the installers build it as before.
# with_pyspark_wheel LOG CONSTRAINTS: sets find_links to the wheel of CONSTRAINTS' pyspark.
find_links=()
with_pyspark_wheel() {
  local version dir log="$1"
  find_links=()
  version="$(sed -n 's/^pyspark==\([^ ;]*\).*/\1/p' "$2" | head -n 1)"
  dir="${CDC_PLATFORM_CACHE:-$HOME/.cache/cdc-platform}/wheels"
  if [ -n "$version" ] && ! ls "$dir/pyspark-$version-"*.whl >/dev/null 2>&1; then
    mkdir -p "$dir"
    .venv/bin/python -m pip wheel --disable-pip-version-check -q --no-deps -w "$dir" \
      "pyspark==$version" >>"$log" 2>&1 \
      || echo "setup: could not build the pyspark wheel (above); the installer builds it" >>"$log"
  fi
  if [ -n "$version" ] && ls "$dir/pyspark-$version-"*.whl >/dev/null 2>&1; then
    find_links=(--find-links "$dir")
  fi
}

# --- Python virtualenv ------------------------------------------------------------------------
python_bin="${PYTHON:-python3}"
if ! "$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  say "Python 3.11 or newer is required (found: $("$python_bin" --version 2>&1))"
  exit 1
fi
if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$python_bin" -m venv .venv
fi
stamp=.venv/.cdc-platform-installed
want="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ] || ! .venv/bin/python -c 'import cdc_platform' 2>/dev/null; then
  say "installing the project and its dependencies into .venv (about a minute on a fresh machine)"
  log=.venv/pip-install.log
  : >"$log"
  with_pyspark_wheel "$log" constraints.txt
  if ! install_into .venv "$log" ${find_links[@]+"${find_links[@]}"} -c constraints.txt -e '.[dev]'; then
    grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
    say "install failed; full log in $log"
    exit 1
  fi
  .venv/bin/python -c 'import cdc_platform, dagster, deltalake, pymysqlreplication, kazoo' \
    || { say "the virtualenv is incomplete; see the pip output above"; exit 1; }
  echo "$want" > "$stamp"
fi

# --- The Airflow environment -------------------------------------------------------------------
# Airflow's pins fight Dagster's, so the Airflow provider (cdc_airflow/) gets its own .venv-airflow:
# Airflow 3 and the engine's requirements (requirements-airflow.txt: pyproject.toml's less
# dagster) at the versions of constraints-airflow.txt, then the project itself without its
# dependencies. Only with --airflow. docs/airflow.md.
if [ -n "$with_airflow" ]; then
  if [ ! -x .venv-airflow/bin/python ]; then
    say "creating .venv-airflow"
    "$python_bin" -m venv .venv-airflow
  fi
  airflow_stamp=.venv-airflow/.cdc-platform-installed
  airflow_want="$(cat pyproject.toml requirements-airflow.txt constraints-airflow.txt | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$airflow_stamp" 2>/dev/null)" != "$airflow_want" ] \
     || ! .venv-airflow/bin/python -c 'import cdc_airflow, airflow' 2>/dev/null; then
    say "installing Airflow and the engine into .venv-airflow (a few minutes on a fresh machine)"
    log=.venv-airflow/pip-install.log
    : >"$log"
    with_pyspark_wheel "$log" constraints-airflow.txt
    if ! { install_into .venv-airflow "$log" ${find_links[@]+"${find_links[@]}"} \
             -c constraints-airflow.txt -r requirements-airflow.txt \
           && install_into .venv-airflow "$log" --no-deps -e .; }; then
      grep -v "^WARNING: Location" "$log" | tail -n 40 >&2
      say "install into .venv-airflow failed; full log in $log"
      exit 1
    fi
    .venv-airflow/bin/python -c 'import airflow, cdc_airflow, cdc_platform.spark' \
      || { say ".venv-airflow is incomplete; see the pip output above"; exit 1; }
    if .venv-airflow/bin/python -c 'import dagster' 2>/dev/null; then
      say ".venv-airflow holds dagster: the engine must run without it"; exit 1
    fi
    echo "$airflow_want" > "$airflow_stamp"
  fi
fi

# --- gh-ost ------------------------------------------------------------------------------------
# GitHub's online schema-change tool, for tests/integration/test_online_schema_change.py: built
# once from the Go module proxy into ${CDC_PLATFORM_CACHE:-~/.cache/cdc-platform}/bin (never in
# the work tree). Not `go install ...@version`: it also asks the proxy for the module's version
# list (for deprecation notices), which the proxy here refuses; the exact version downloads and
# builds in a copy, its dependencies at the versions of its go.sum. v1.1.6 is the version served.
GH_OST_VERSION=v1.1.6
gh_ost_dir="${CDC_PLATFORM_CACHE:-$HOME/.cache/cdc-platform}/bin"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"
if [ "$(cat "$gh_ost_dir/gh-ost.version" 2>/dev/null)" != "$GH_OST_VERSION" ] && [ -x "$go_bin" ]; then
  say "building gh-ost $GH_OST_VERSION into $gh_ost_dir (a few minutes, once)"
  log=.venv/gh-ost-build.log
  build_dir="$(mktemp -d)"
  if module="$("$go_bin" mod download -json "github.com/github/gh-ost@$GH_OST_VERSION" 2>>"$log" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" && [ -n "$module" ] \
     && cp -r "$module/." "$build_dir" && chmod -R u+w "$build_dir" && mkdir -p "$gh_ost_dir" \
     && (cd "$build_dir" && "$go_bin" build -mod=mod -o "$gh_ost_dir/gh-ost" ./go/cmd/gh-ost) >>"$log" 2>&1; then
    echo "$GH_OST_VERSION" > "$gh_ost_dir/gh-ost.version"
  else
    say "could not build gh-ost (see $log); its test fails until it is built"
  fi
  rm -rf "$build_dir"
fi

# --- The project's own bytecode ----------------------------------------------------------------
# An editable install compiles none of the project's modules, and where PYTHONDONTWRITEBYTECODE
# is set no process writes their .pyc either: each process importing the engine or the Dagster
# definitions compiled them from source (about 0.35 CPU-s each; the tests start hundreds). So
# they are compiled here, each run (only what changed; Python ignores a .pyc older than its
# source, so a stale one is never used).
.venv/bin/python -m compileall -q -j 0 cdc_platform dagster_defs cdc_airflow >/dev/null

# --- Apache Spark jars -------------------------------------------------------------------------
# delta-spark for the pinned pyspark and hadoop-aws with its AWS SDK (~690 MB), fetched once from
# Maven Central into Maven's own repository (~/.m2, outside the work tree), leaving out what
# pyspark ships; the list of files goes to ${CDC_PLATFORM_CACHE:-~/.cache/cdc-platform}. Later runs
# only check that list (offline, quiet). cdc_platform/spark/jars.py, docs/spark.md.
.venv/bin/python -c 'import sys; from cdc_platform.spark.jars import main; sys.exit(main())'
