{{- define "crossdock.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}{{ .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else -}}{{ printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" }}{{- end -}}
{{- end -}}

{{- define "crossdock.labels" -}}
app.kubernetes.io/name: crossdock
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "crossdock.selector" -}}
app.kubernetes.io/name: crossdock
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "crossdock.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}{{ default (include "crossdock.fullname" .) .Values.serviceAccount.name }}
{{- else -}}{{ default "default" .Values.serviceAccount.name }}{{- end -}}
{{- end -}}

{{- define "crossdock.jobsNamespace" -}}
{{ default .Release.Namespace .Values.kubernetes.jobsNamespace }}
{{- end -}}

{{/* The environment every crossdock container shares: Redis, the config, the Kubernetes backend. */}}
{{- define "crossdock.env" -}}
{{- if .Values.redis.enabled }}
{{- if .Values.redis.password }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef: {name: {{ include "crossdock.fullname" . }}-redis, key: password}
- name: CROSSDOCK_REDIS_URL
  value: "redis://:$(REDIS_PASSWORD)@{{ include "crossdock.fullname" . }}-redis:6379/0"
{{- else }}
- name: CROSSDOCK_REDIS_URL
  value: "redis://{{ include "crossdock.fullname" . }}-redis:6379/0"
{{- end }}
{{- else if .Values.redis.existingSecret }}
- name: CROSSDOCK_REDIS_URL
  valueFrom:
    secretKeyRef: {name: {{ .Values.redis.existingSecret }}, key: {{ .Values.redis.existingSecretKey }}}
{{- else }}
- name: CROSSDOCK_REDIS_URL
  value: {{ required "redis.url (or redis.existingSecret) is required when redis.enabled is false" .Values.redis.url | quote }}
{{- end }}
- name: CROSSDOCK_PREFIX
  value: {{ .Values.prefix | quote }}
- name: CROSSDOCK_CONFIG
  value: /etc/crossdock/crossdock.yaml
- name: CROSSDOCK_STATE_DIR
  value: /var/lib/crossdock
- name: CROSSDOCK_SOCKET
  value: none
- name: CROSSDOCK_MASTER_KEY_FILE
  value: /etc/crossdock-signing/hmac.key
- name: CROSSDOCK_K8S_NAMESPACE
  value: {{ include "crossdock.jobsNamespace" . | quote }}
- name: CROSSDOCK_K8S_IMAGE
  value: {{ .Values.kubernetes.jobImage | quote }}
- name: CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES
  value: {{ .Values.kubernetes.syncPriorityClasses | quote }}
{{- if .Values.celeryEvents }}
- name: CROSSDOCK_CELERY_EVENTS
  value: "1"
{{- end }}
{{- if gt (int .Values.metrics.port) 0 }}
- name: CROSSDOCK_METRICS_ADDRESS
  value: "0.0.0.0:{{ .Values.metrics.port }}"
{{- end }}
{{- end -}}

{{/* The Secret with the signing key: the user's own (signingKey.existingSecret) or the release's. */}}
{{- define "crossdock.signingKeySecret" -}}
{{ default (printf "%s-signing-key" (include "crossdock.fullname" .)) .Values.signingKey.existingSecret }}
{{- end -}}

{{- define "crossdock.volumes" -}}
- name: config
  configMap: {name: {{ include "crossdock.fullname" . }}-config}
- name: state
  emptyDir: {}
- name: signing-key
  secret:
    secretName: {{ include "crossdock.signingKeySecret" . }}
    items: [{key: {{ .Values.signingKey.existingSecretKey }}, path: hmac.key}]
    defaultMode: 0440
{{- end -}}

{{- define "crossdock.mounts" -}}
- {name: config, mountPath: /etc/crossdock, readOnly: true}
- {name: state, mountPath: /var/lib/crossdock}
- {name: signing-key, mountPath: /etc/crossdock-signing, readOnly: true}
{{- end -}}

{{- define "crossdock.placement" -}}
{{- with .Values.nodeSelector }}
nodeSelector: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.tolerations }}
tolerations: {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.affinity }}
affinity: {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}
