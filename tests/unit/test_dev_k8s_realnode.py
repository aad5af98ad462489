"""The real node's pure parts: the OCI archive containerd imports, the crossdock layer, and the
kubelet's and containerd's configuration for this machine's quirks (the node itself runs in
tests/integration/kubernetes/test_k8s_realnode.py)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import tomllib
from pathlib import Path

from crossdock.dev.k8s import image, realnode


def _members(tar_path: Path) -> dict[str, bytes]:
    with tarfile.open(tar_path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_oci_archive_is_a_layout_whose_digests_match_its_blobs(tmp_path):
    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as tar:
        data = b"#!/bin/sh\necho hi\n"
        info = tarfile.TarInfo("bin/hi")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
    out = image.oci_archive(tmp_path / "img.tar", "crossdock.local/x:1", [layer], entrypoint=["/bin/hi"],
                            env=["PATH=/bin"])
    files = _members(out)
    assert json.loads(files["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    blobs = {name.rsplit("/", 1)[1]: body for name, body in files.items() if name.startswith("blobs/sha256/")}
    assert all(hashlib.sha256(body).hexdigest() == digest for digest, body in blobs.items())
    [desc] = json.loads(files["index.json"])["manifests"]
    assert desc["annotations"]["io.containerd.image.name"] == "crossdock.local/x:1"
    manifest = json.loads(blobs[desc["digest"].removeprefix("sha256:")])
    config = json.loads(blobs[manifest["config"]["digest"].removeprefix("sha256:")])
    assert [entry["digest"] for entry in manifest["layers"]] == config["rootfs"]["diff_ids"]
    assert blobs[manifest["layers"][0]["digest"].removeprefix("sha256:")] == layer.read_bytes()
    assert config["config"]["Entrypoint"] == ["/bin/hi"] and config["config"]["Env"] == ["PATH=/bin"]


def test_crossdock_layer_is_the_checkout_on_pythons_path_and_deterministic(tmp_path):
    a, b = image.crossdock_layer(tmp_path / "a.tar"), image.crossdock_layer(tmp_path / "b.tar")
    assert a.read_bytes() == b.read_bytes()  # its digest names the code: same checkout, same tag
    files = _members(a)
    assert files[f"{image.SITE.lstrip('/')}/crossdock-src.pth"] == f"{image.SRC}\n".encode()
    runner = f"{image.SRC.lstrip('/')}/crossdock/workers/pyjob.py"
    assert files[runner] == (image.REPO / "crossdock" / "workers" / "pyjob.py").read_bytes()
    assert not any("__pycache__" in name for name in files)


def test_base_recipe_names_its_cache_key_and_debian_packages():
    recipe = json.loads(image.base_recipe())
    assert "python-is-python3" in recipe["include"]  # `python` on the submitter's PATH finds it
    assert any(p.startswith("cloudpickle") for p in recipe["pip"])


def test_kubelet_config_runs_on_cgroup_v1_with_the_taint_and_loopback_servers():
    cfg = json.loads(realnode._kubelet_config())
    assert cfg["failCgroupV1"] is False and cfg["cgroupDriver"] == "cgroupfs"
    assert cfg["registerWithTaints"] == [realnode.TAINT]
    assert cfg["address"] == cfg["healthzBindAddress"] == "127.0.0.1" and cfg["readOnlyPort"] == 0
    assert cfg["containerRuntimeEndpoint"] == f"unix://{realnode.RUN_DIR / 'containerd.sock'}"


def test_containerd_config_clamps_oom_score_and_uses_the_local_pause_image():
    cfg = tomllib.loads(realnode._containerd_config())
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["restrict_oom_score_adj"] is True and cri["sandbox_image"] == image.PAUSE_IMAGE
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is False
    assert cri["cni"]["conf_dir"] == str(realnode.RUN_DIR / "cni")
    cni = json.loads(realnode._cni_config())
    assert [p["type"] for p in cni["plugins"]] == ["bridge", "loopback"]
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": realnode.SUBNET}]]
