#!/usr/bin/env bash
# Build helm from its Go module at the release pinned below, into
#   ${CROSSDOCK_CACHE:-$HOME/.cache/crossdock}/helm/<HELM_VERSION>/bin/helm
# (Go module and build caches in ${CROSSDOCK_CACHE}/helm/go/). A helm already there is kept; pass
# --force to rebuild. Nothing is written to the repository. About 4-6 minutes cold on 2 idle cores.
set -euo pipefail

HELM_VERSION=v3.22.0  # the newest helm.sh/helm/v3 whose go.mod asks for no newer Go than 1.26.8

force=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --version) echo "$HELM_VERSION"; exit 0 ;;
    *) echo "usage: $0 [--force|--version]" >&2; exit 2 ;;
  esac
done

go_bin="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
cache_root="${CROSSDOCK_CACHE:-$HOME/.cache/crossdock}/helm"
bin_dir="$cache_root/$HELM_VERSION/bin"
if [[ $force == 0 && -x "$bin_dir/helm" ]]; then
  echo "$bin_dir/helm"
  exit 0
fi
export GOMODCACHE="$cache_root/go/mod" GOCACHE="$cache_root/go/build" GOBIN="$bin_dir"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${CROSSDOCK_GOFLAGS:--p=2} -buildvcs=false" CGO_ENABLED=0
mkdir -p "$bin_dir" "$GOMODCACHE" "$GOCACHE"
printf '[build %s] helm %s\n' "$(date -u +%H:%M:%S)" "$HELM_VERSION" >&2
nice -n 10 "$go_bin" install -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION" \
  "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
echo "$bin_dir/helm"
