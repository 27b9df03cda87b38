{{/*
Defaults for the settings an application chart passes (see README.md). Anything the
caller sets wins, key by key.
*/}}
{{- define "delay-bridge-sidecar.defaults" -}}
# true: a native sidecar (initContainers with restartPolicy: Always, Kubernetes 1.29+):
# it starts, and passes its startup probe, before the application's containers, and
# stops after them. false: a plain container beside the application (older clusters).
native: true
# Container name, and the suffix of the ConfigMap's name (<release>-<name>).
name: delay-bridge
image:
  repository: ghcr.io/delaybridge/delay-bridge
  tag: "0.1.0"
  # sha256:...; wins over tag.
  digest: ""
  pullPolicy: IfNotPresent
# Port of the bridge's admin API (/healthz, /readyz, /metrics, /v1/*), bound on 0.0.0.0
# so kubelet probes reach it; the application talks to 127.0.0.1:<adminPort>.
adminPort: 8089
# bridge.yaml (at least one route). admin.listen and instance are set by the template;
# secrets come from secretName.
config: {}
# An existing Secret with any of the keys redis-password, redis-sentinel-password,
# kafka-sasl-password, admin-token, amqp-url (each optional).
secretName: ""
resources:
  requests:
    cpu: 50m
    memory: 128Mi
  limits:
    memory: 512Mi
# GOMEMLIMIT = this percentage of resources.limits.memory (0 = unset): headroom for
# memory the Go collector does not manage.
goMemLimitPercent: 90
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: ["ALL"]
livenessProbe:
  httpGet:
    path: /healthz
    port: bridge-admin
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 6
# Native form only: the application's containers start once this passes.
startupProbe:
  httpGet:
    path: /healthz
    port: bridge-admin
  periodSeconds: 1
  failureThreshold: 60
extraEnv: []
{{- end }}

{{/*
The caller's settings merged over the defaults. Argument: dict "root" $ "values" <settings>.
*/}}
{{- define "delay-bridge-sidecar.values" -}}
{{- $def := include "delay-bridge-sidecar.defaults" . | fromYaml }}
{{- toYaml (mergeOverwrite $def (deepCopy (.values | default dict))) }}
{{- end }}
