#!/usr/bin/env bash
# Build the local Kubernetes control plane from upstream Go modules at the
# releases pinned in versions.env, into
#   ${CROSSDOCK_CACHE:-$HOME/.cache/crossdock}/k8s/<KUBERNETES_VERSION>/bin/
# (kube-apiserver, kube-controller-manager, kube-scheduler, etcd, kwok, karpenter, descheduler;
# with --kubelet also the kubelet of the same release, for the optional real node).
# Go module and build caches live in ${CROSSDOCK_CACHE}/k8s/go/. Binaries
# already present are kept; pass --force to rebuild. Nothing is written to the
# repository.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"

force=0
kubelet=0
for arg in "$@"; do
  case "$arg" in
    --force) force=1 ;;
    --kubelet) kubelet=1 ;;
    *) echo "usage: $0 [--force] [--kubelet]" >&2; exit 2 ;;
  esac
done

go_bin="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
cache_root="${CROSSDOCK_CACHE:-$HOME/.cache/crossdock}/k8s"
bin_dir="$cache_root/$KUBERNETES_VERSION/bin"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$cache_root/go/mod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$cache_root/go/build}"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
export GOFLAGS="${CROSSDOCK_GOFLAGS:--p=2} -buildvcs=false"
export CGO_ENABLED=0
mkdir -p "$bin_dir" "$GOMODCACHE" "$GOCACHE"

minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
k8s_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  k8s_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

stage="$(mktemp -d "$bin_dir/.stage.XXXXXX")"
trap 'rm -rf "$stage"' EXIT

step() { printf '[build %s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }

need_k8s=0
for b in kube-apiserver kube-controller-manager kube-scheduler; do
  [[ $force == 1 || ! -x "$bin_dir/$b" ]] && need_k8s=1
done
if [[ $need_k8s == 1 ]]; then
  step "kube-apiserver kube-controller-manager kube-scheduler $KUBERNETES_VERSION"
  (cd "$here" && nice -n 10 "$go_bin" build -trimpath -ldflags "$k8s_ldflags" -o "$stage/" \
      k8s.io/kubernetes/cmd/kube-apiserver \
      k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler)
  mv -f "$stage/kube-apiserver" "$stage/kube-controller-manager" "$stage/kube-scheduler" "$bin_dir/"
fi

# The kubelet only on request (--kubelet): the real node of crossdock/dev/k8s/realnode.py. It shares
# the wrapper module and the build cache of the three binaries above (measured: 3 min wall, 46 s user).
if [[ $kubelet == 1 && ( $force == 1 || ! -x "$bin_dir/kubelet" ) ]]; then
  step "kubelet $KUBERNETES_VERSION"
  (cd "$here" && nice -n 10 "$go_bin" build -trimpath -ldflags "$k8s_ldflags" -o "$stage/kubelet" \
      k8s.io/kubernetes/cmd/kubelet)
  mv -f "$stage/kubelet" "$bin_dir/"
fi

if [[ $force == 1 || ! -x "$bin_dir/etcd" ]]; then
  step "etcd $ETCD_VERSION"
  (cd "$here" && nice -n 10 "$go_bin" build -trimpath -ldflags "-s -w" -o "$stage/etcd" \
      go.etcd.io/etcd/server/v3)
  mv -f "$stage/etcd" "$bin_dir/"
fi

if [[ $force == 1 || ! -x "$bin_dir/kwok" ]]; then
  step "kwok $KWOK_VERSION"
  # kwok's go.mod has no replace directives: build it in its own module graph.
  GOBIN="$stage" nice -n 10 "$go_bin" install -trimpath -ldflags "-s -w" \
      "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv -f "$stage/kwok" "$bin_dir/"
fi

karpenter_crds="$bin_dir/../karpenter-crds"
if [[ $force == 1 || ! -x "$bin_dir/karpenter" || ! -s "$karpenter_crds/karpenter.sh_nodeclaims.yaml" \
      || "$(cat "$bin_dir/karpenter.version" 2>/dev/null)" != "$KARPENTER_VERSION+loopback" ]]; then
  step "karpenter $KARPENTER_VERSION (its kwok cloud provider)"
  # No replace directives either: its own module graph. The main package is kwok/, hence the rename.
  mkdir -p "$stage/karpenter"
  karpenter_dir="$(cd "$stage" && "$go_bin" mod download -json "sigs.k8s.io/karpenter@$KARPENTER_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  # Its metrics and health servers bind ":<port>" (every interface) and no flag changes that:
  # build from a copy of the module whose operator.go binds both to 127.0.0.1 (the module cache
  # is read-only and `go build -overlay` refuses files in it), so the dev plane stays on loopback.
  cp -r "$karpenter_dir" "$stage/karpenter/src" && chmod -R u+w "$stage/karpenter/src"
  operator_go="$stage/karpenter/src/pkg/operator/operator.go"
  sed -i 's/fmt.Sprintf(":%d"/fmt.Sprintf("127.0.0.1:%d"/' "$operator_go"
  [[ "$(grep -c '"127.0.0.1:%d"' "$operator_go")" == 2 ]] \
    || { echo "karpenter $KARPENTER_VERSION: its bind addresses moved; update the loopback patch" >&2; exit 1; }
  (cd "$stage/karpenter/src" && nice -n 10 "$go_bin" build -trimpath -ldflags "-s -w" \
      -o "$stage/karpenter/kwok" ./kwok)
  mkdir -p "$stage/karpenter-crds"
  cp "$karpenter_dir"/kwok/charts/crds/*.yaml "$karpenter_dir"/kwok/apis/crds/*.yaml "$stage/karpenter-crds/"
  chmod 0644 "$stage/karpenter-crds/"*.yaml
  mv -f "$stage/karpenter/kwok" "$bin_dir/karpenter"
  rm -rf "$karpenter_crds"
  mv "$stage/karpenter-crds" "$karpenter_crds"
  echo "$KARPENTER_VERSION+loopback" > "$bin_dir/karpenter.version"
fi

if [[ $force == 1 || ! -x "$bin_dir/descheduler" \
      || "$(cat "$bin_dir/descheduler.version" 2>/dev/null)" != "$DESCHEDULER_VERSION" ]]; then
  step "descheduler $DESCHEDULER_VERSION"
  # Its go.mod has a replace directive, so `go install …@v` refuses it: build it as the main
  # module from its downloaded source (its own module graph, client libraries of its release).
  descheduler_dir="$(cd "$stage" && "$go_bin" mod download -json "sigs.k8s.io/descheduler@$DESCHEDULER_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  (cd "$descheduler_dir" && nice -n 10 "$go_bin" build -trimpath \
      -ldflags "-s -w -X sigs.k8s.io/descheduler/pkg/version.version=$DESCHEDULER_VERSION" \
      -o "$stage/descheduler" ./cmd/descheduler)
  mv -f "$stage/descheduler" "$bin_dir/"
  echo "$DESCHEDULER_VERSION" > "$bin_dir/descheduler.version"
fi

stages_dir="$bin_dir/../kwok-stages"
if [[ $force == 1 || ! -s "$stages_dir/pod-ready.yaml" ]]; then
  step "kwok $KWOK_VERSION stages"
  # The upstream node and pod Stages of this kwok release; crossdock/dev/k8s.py
  # adds its own pod-termination Stages beside them.
  kwok_dir="$(cd "$stage" && "$go_bin" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  mkdir -p "$stage/kwok-stages"
  cp "$kwok_dir/kustomize/stage/node/fast/node-initialize.yaml" \
     "$kwok_dir/kustomize/stage/node/heartbeat-with-lease/node-heartbeat-with-lease.yaml" \
     "$kwok_dir/kustomize/stage/pod/fast/pod-ready.yaml" \
     "$kwok_dir/kustomize/stage/pod/fast/pod-delete.yaml" \
     "$stage/kwok-stages/"
  chmod 0644 "$stage/kwok-stages/"*.yaml
  rm -rf "$stages_dir"
  mv "$stage/kwok-stages" "$stages_dir"
fi

step "done: $bin_dir"
