"""``crossdock metrics-adapter``: serve the queues' backlog as Kubernetes external metrics."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path

import typer

from crossdock.cli.common import console, fail, runtime


def metrics_adapter(
    port: int = typer.Option(6443, "--port", min=0, max=65535, help="TCP port (0: any free one)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback by default)"),
    cert: Path | None = typer.Option(None, "--cert", exists=True, dir_okay=False,
                                     help="serving certificate (default: a self-signed one in the state dir)"),
    key: Path | None = typer.Option(None, "--key", exists=True, dir_okay=False, help="its private key"),
    client_ca: Path | None = typer.Option(None, "--client-ca", exists=True, dir_okay=False,
                                          help="only clients signed by it: the apiserver's --requestheader-client-ca-file"),
    namespace: str = typer.Option("default", "--namespace", help="namespace of the Service in --print-manifests"),
    print_manifests: bool = typer.Option(False, "--print-manifests",
                                         help="print the Service and APIService to apply, then exit"),
    verbose: bool = typer.Option(False, "--verbose", "-v"),
) -> None:
    """Serve external.metrics.k8s.io/v1beta1: crossdock_queue_backlog{queue=NAME} is the queue's
    pending + scheduled + running jobs, for HPAs with an External metric. Register it with
    `--print-manifests | kubectl apply -f -`."""
    from crossdock.backends.kubernetes import external_metrics as em

    if print_manifests:
        items = [em.service_manifest(namespace, "crossdock-metrics", port),
                 em.apiservice_manifest(namespace, "crossdock-metrics", port)]
        typer.echo(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}, indent=2))
        return
    if (cert is None) != (key is None):
        fail("--cert and --key: give both, or neither for a self-signed certificate")
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(name)s %(message)s")
    rt = runtime()
    source = em.store_backlog_source(rt.store.backlog, rt.config.queues)
    try:
        adapter = em.ExternalMetricsAdapter(source, host=host, port=port, cert_file=cert, key_file=key,
                                            cert_dir=rt.settings.state_dir / "external-metrics",
                                            client_ca_file=client_ca)
    except (OSError, RuntimeError) as exc:
        fail(f"--host {host} --port {port}: cannot serve: {exc}", code=1)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with adapter:
        console.print(f"external metrics on https://{adapter.host}:{adapter.port} for queues"
                      f" {', '.join(sorted(rt.config.queues))}; Ctrl-C to stop", highlight=False)
        done.wait()
