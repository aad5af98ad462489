"""Container images for the real node, built without a registry or an image builder: a Debian
root filesystem (``mmdebstrap`` from the Debian mirror, Python packages from PyPI)
plus a layer with this checkout's ``crossdock`` package, written as an OCI image archive that
``ctr images import`` loads into containerd.

- the *pause* image (the pod sandbox): Debian's ``busybox-static``, ``sleep`` as PID 1;
- the *crossdock* image: Debian bookworm's ``python3`` (``python`` from ``python-is-python3``) with
  crossdock's dependencies from PyPI in ``/usr/local`` and the checkout's package beside them. Both
  are found on any usual PATH: a job's container gets its submitter's PATH, not the image's.
  The base layer is cached by the hash of its recipe; the crossdock layer is rebuilt per
  checkout and names the image's tag, so a changed runner never meets a stale image.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import tomllib
from collections.abc import Iterable, Sequence
from pathlib import Path

from crossdock.dev.k8s.errors import ControlPlaneError

REPO = Path(__file__).resolve().parents[3]
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
SITE = "/usr/local/lib/python3.11/dist-packages"  # bookworm's python3 is 3.11; pip's prefix is /usr/local
SRC = "/opt/crossdock/src"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INCLUDE = ("python3", "python3-pip", "python-is-python3", "ca-certificates")
PAUSE_IMAGE = "crossdock.local/pause:busybox"
IMAGE_REPO = "crossdock.local/crossdock"


def pip_packages() -> tuple[str, ...]:
    """What the runner needs in the pod: crossdock's runtime dependencies (pyproject's), not its dev tools."""
    with (REPO / "pyproject.toml").open("rb") as f:
        return tuple(tomllib.load(f)["project"]["dependencies"])


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _run(argv: Sequence[str], what: str, log: Path) -> None:
    with log.open("ab") as out:
        proc = subprocess.run(list(argv), stdout=out, stderr=subprocess.STDOUT, check=False)
    if proc.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-5:]
        raise ControlPlaneError(f"{what} failed (exit {proc.returncode}; {log}): " + " | ".join(tail))


def base_recipe() -> str:
    return json.dumps({"suite": SUITE, "include": list(INCLUDE), "pip": list(pip_packages()), "site": SITE},
                      sort_keys=True)


def base_layer(cache: Path) -> Path:
    """The Debian root filesystem with Python and crossdock's dependencies, as an uncompressed
    tar (cached by its recipe's hash; about 1.5 min and 500 MB the first time)."""
    key = hashlib.sha256(base_recipe().encode()).hexdigest()[:16]
    out = cache / f"base-{key}.tar"
    if out.is_file():
        return out
    if shutil.which("mmdebstrap") is None:
        raise ControlPlaneError("mmdebstrap not found: apt-get install mmdebstrap (scripts/setup.sh installs it)")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    packages = pip_packages()
    if any("'" in p for p in packages):  # mmdebstrap's hooks are shell lines: each one goes in single quotes
        raise ControlPlaneError(f"pyproject.toml: a dependency with a quote cannot go into mmdebstrap's hook: "
                                f"{packages}")
    pip = " ".join(f"'{p}'" for p in packages)
    ca = "/etc/ssl/certs/ca-certificates.crt"
    argv = ["nice", "-n", "10", "mmdebstrap", "--variant=apt", "--mode=root", "--format=tar",
            f"--include={','.join(INCLUDE)}",
            f'--customize-hook=cp {ca} "$1{ca}"',  # the host's trust store (PyPI through this machine's proxy CA)
            # the image is crossdock's own: its packages go beside Debian's (/usr/local), as in a Dockerfile
            f'--customize-hook=chroot "$1" env PIP_DISABLE_PIP_VERSION_CHECK=1 pip install --break-system-packages'
            f' --no-cache-dir -q {pip}',
            '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
            SUITE, str(tmp), MIRROR]
    _run(argv, "mmdebstrap (the crossdock image's base)", cache / "mmdebstrap.log")
    tmp.rename(out)
    return out


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = len(data), mode, 0
    tar.addfile(info, io.BytesIO(data))


def _source_files(root: Path) -> Iterable[Path]:
    for path in sorted(root.rglob("*")):
        if "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
            continue
        yield path


def crossdock_layer(out: Path) -> Path:
    """This checkout's ``crossdock`` package under ``/opt/crossdock/src``, on Python's path
    through a ``.pth`` file. Deterministic (sorted, mtime 0), so its digest names the code."""
    pkg = REPO / "crossdock"
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in _source_files(pkg):
            arc = f"{SRC.lstrip('/')}/{path.relative_to(REPO)}"
            info = tar.gettarinfo(str(path), arc)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if info.isreg():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
        _add_bytes(tar, f"{SITE.lstrip('/')}/crossdock-src.pth", f"{SRC}\n".encode())
    return out


def busybox_layer(out: Path) -> Path:
    """Debian's static busybox as ``/bin/busybox`` (the pause image's only file)."""
    busybox = Path("/bin/busybox")
    if not busybox.is_file() or not _is_static(busybox):
        raise ControlPlaneError("a static /bin/busybox is needed for the pause image: apt-get install busybox-static")
    with tarfile.open(out, "w") as tar:
        info = tar.gettarinfo(str(busybox), "bin/busybox")
        info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
        with busybox.open("rb") as f:
            tar.addfile(info, f)
    return out


def _is_static(binary: Path) -> bool:
    """No ELF interpreter (PT_INTERP) means statically linked."""
    return b"/lib64/ld-linux" not in binary.read_bytes()[:4096]


def layer_digest(layer: Path) -> str:
    """A layer's sha256, remembered beside it (the base is 370 MB)."""
    memo = layer.with_name(layer.name + ".sha256")
    if memo.is_file() and memo.stat().st_mtime >= layer.stat().st_mtime:
        return memo.read_text().strip()
    digest = _sha256(layer)
    memo.write_text(digest + "\n")
    return digest


def oci_archive(out: Path, name: str, layers: Sequence[Path], *, entrypoint: Sequence[str],
                env: Sequence[str] = (), workdir: str = "/", present: Iterable[str] = ()) -> Path:
    """An OCI image layout as a tar (``index.json``, ``oci-layout``, ``blobs/sha256/…``) naming
    ``name`` (containerd reads ``io.containerd.image.name``); layers are uncompressed tars. Layers
    whose digest is in ``present`` (already in containerd's content store) are left out."""
    digests = [layer_digest(layer) for layer in layers]
    skip = {d.removeprefix("sha256:") for d in present}
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Entrypoint": list(entrypoint), "Env": list(env), "WorkingDir": workdir},
              "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in digests]}}
    config_bytes = json.dumps(config, sort_keys=True).encode()
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": f"sha256:{hashlib.sha256(config_bytes).hexdigest()}", "size": len(config_bytes)},
                "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": f"sha256:{d}",
                            "size": layer.stat().st_size} for d, layer in zip(digests, layers)]}
    manifest_bytes = json.dumps(manifest, sort_keys=True).encode()
    index = {"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": f"sha256:{hashlib.sha256(manifest_bytes).hexdigest()}", "size": len(manifest_bytes),
        "annotations": {"io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1]}}]}
    tmp = out.with_suffix(".tmp")
    with tarfile.open(tmp, "w") as tar:
        _add_bytes(tar, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        _add_bytes(tar, "index.json", json.dumps(index).encode())
        _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(manifest_bytes).hexdigest()}", manifest_bytes)
        _add_bytes(tar, f"blobs/sha256/{hashlib.sha256(config_bytes).hexdigest()}", config_bytes)
        for d, layer in zip(digests, layers):
            if d not in skip:
                tar.add(str(layer), f"blobs/sha256/{d}")
    os.replace(tmp, out)
    return out


def pause_archive(cache: Path) -> tuple[str, Path]:
    out = cache / "pause.oci.tar"
    if not out.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            layer = busybox_layer(Path(tmp) / "busybox.tar")
            oci_archive(out, PAUSE_IMAGE, [layer], entrypoint=["/bin/busybox", "sleep", "2147483647"])
    return PAUSE_IMAGE, out


def crossdock_archive(cache: Path, present: Iterable[str] = ()) -> tuple[str, Path]:
    """The crossdock image of this checkout: its name (tagged by the code layer's digest) and
    archive (without the layers in ``present``: a new checkout's archive is its code layer only)."""
    base = base_layer(cache)
    cache.mkdir(parents=True, exist_ok=True)
    layer = crossdock_layer(cache / "crossdock-layer.tar")
    name = f"{IMAGE_REPO}:{layer_digest(layer)[:12]}-{base.stem.removeprefix('base-')[:8]}"
    out = cache / "crossdock.oci.tar"
    oci_archive(out, name, [base, layer], entrypoint=[], env=[f"PATH={PATH}"], workdir="/", present=present)
    return name, out
