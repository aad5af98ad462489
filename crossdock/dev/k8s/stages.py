"""Pod lifecycle on the fake nodes: crossdock's kwok Stages, which end a Running pod after the
run time and with the exit code its annotations give (see the package's docstring)."""

from __future__ import annotations

from typing import Any

ANNOTATION_RUN_SECONDS = "crossdock.io/run-seconds"
ANNOTATION_EXIT_CODE = "crossdock.io/exit-code"

# Crossdock's pod-termination Stages; the upstream node Stages and the pod-ready and
# pod-delete Stages of the pinned kwok release are copied beside the binaries by
# build.sh. A pod terminates once it has a run time or an exit code; the delay is the
# run time in seconds (0 when absent).
_RUN_SECONDS = f'.metadata.annotations["{ANNOTATION_RUN_SECONDS}"]'
_EXIT_CODE = f'.metadata.annotations["{ANNOTATION_EXIT_CODE}"]'
_TERMINATE_DELAY = {
    "durationMilliseconds": 0,
    "durationFrom": {"jq": {"expression": f'({_RUN_SECONDS} // empty) + "s"'}},
}
_CONTAINERS_TERMINATED = """\
{{{{ $now := Now }}}}
{{{{ $root := . }}}}
containerStatuses:
{{{{ range .spec.containers }}}}
- image: {{{{ .image | Quote }}}}
  name: {{{{ .name | Quote }}}}
  ready: false
  restartCount: 0
  started: false
  state:
    terminated:
      exitCode: {exit_code}
      finishedAt: {{{{ $now | Quote }}}}
      reason: {reason}
      startedAt: {{{{ or $root.status.startTime $now | Quote }}}}
{{{{ end }}}}
conditions:
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  type: Ready
  reason: {condition_reason}
- lastTransitionTime: {{{{ $now | Quote }}}}
  status: "False"
  type: ContainersReady
  reason: {condition_reason}
phase: {phase}
"""

POD_STAGES: tuple[dict[str, Any], ...] = (
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "crossdock-pod-succeeded"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f"({_RUN_SECONDS} // {_EXIT_CODE})", "operator": "Exists"},
                {"key": f'({_EXIT_CODE} // "0")', "operator": "In", "values": ["0"]},
            ]},
            "delay": _TERMINATE_DELAY,
            "next": {"statusTemplate": _CONTAINERS_TERMINATED.format(
                exit_code=0, reason="Completed", condition_reason="PodCompleted",
                phase="Succeeded")},
        },
    },
    {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "crossdock-pod-failed"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {"matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": f'({_EXIT_CODE} // "0")', "operator": "NotIn", "values": ["0"]},
            ]},
            "delay": _TERMINATE_DELAY,
            "next": {"statusTemplate": _CONTAINERS_TERMINATED.format(
                exit_code=f'{{{{ index $root.metadata.annotations "{ANNOTATION_EXIT_CODE}" }}}}',
                reason="Error", condition_reason="PodFailed", phase="Failed")},
        },
    },
)

