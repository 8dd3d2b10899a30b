# Sourced by scripts/quickstart.sh and scripts/gpu-check.sh: the default run's corpus.
#
#   prepare_fortunes PLEXUS_BIN PREFIX   prepares PREFIX.{bin,idx} from Debian's fortunes unless
#                                        it exists; the fortune files are read from
#                                        $PLEXUS_FORTUNES_DIR (default /usr/share/games/fortunes,
#                                        scripts/offline-deps.sh points it elsewhere).
#                                        Returns non-zero, saying why on stderr, on failure.
prepare_fortunes() {
  local plexus="$1" prefix="$2"
  local dir="${PLEXUS_FORTUNES_DIR:-/usr/share/games/fortunes}"
  [ -f "$prefix.idx" ] && return 0
  local inputs
  # The fortune files themselves; their .dat/.u8 siblings are indexes and links.
  mapfile -t inputs < <(find "$dir" -maxdepth 1 -type f ! -name '*.*' 2>/dev/null | sort)
  if [ "${#inputs[@]}" -eq 0 ]; then
    echo "no fortune files in $dir (Debian: apt-get install fortunes)" >&2
    return 1
  fi
  mkdir -p "$(dirname "$prefix")"  # plexus data prepare writes into an existing directory only
  "$plexus" data prepare --input "${inputs[@]}" --output-prefix "$prefix"
}
