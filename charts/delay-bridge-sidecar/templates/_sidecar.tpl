{{/*
delay-bridge as a sidecar. Every template takes one argument:
  dict "root" $ "values" .Values.delayBridge
and renders list items or manifests to place with nindent (see README.md).
*/}}

{{- define "delay-bridge-sidecar.configMapName" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml }}
{{- printf "%s-%s" .root.Release.Name $v.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* bridge.yaml: the caller's config with admin.listen set; secrets refused. */}}
{{- define "delay-bridge-sidecar.bridgeYAML" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml }}
{{- $cfg := deepCopy ($v.config | default dict) }}
{{- if not $cfg.routes }}
{{- fail "delay-bridge sidecar: config.routes: at least one route is required" }}
{{- end }}
{{- if or (and $cfg.redis (or $cfg.redis.password $cfg.redis.sentinel_password)) (and $cfg.kafka $cfg.kafka.sasl $cfg.kafka.sasl.password) (and $cfg.admin $cfg.admin.token) }}
{{- fail "delay-bridge sidecar: secrets do not go in config (a ConfigMap); put them in the Secret named by secretName" }}
{{- end }}
{{- if $cfg.instance }}
{{- fail "delay-bridge sidecar: config.instance is set to the pod name by the template; remove it" }}
{{- end }}
{{- $_ := set $cfg "admin" (dict "listen" (printf "0.0.0.0:%d" (int $v.adminPort))) }}
{{- toYaml $cfg }}
{{- end }}

{{/* The ConfigMap manifest. */}}
{{- define "delay-bridge-sidecar.configMap" -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ include "delay-bridge-sidecar.configMapName" . }}
  namespace: {{ .root.Release.Namespace }}
  labels:
    app.kubernetes.io/component: delay-bridge
    app.kubernetes.io/instance: {{ .root.Release.Name }}
    app.kubernetes.io/managed-by: {{ .root.Release.Service }}
data:
  bridge.yaml: |
    {{- include "delay-bridge-sidecar.bridgeYAML" . | nindent 4 }}
{{- end }}

{{/* A pod annotation that rolls the pods when bridge.yaml changes. */}}
{{- define "delay-bridge-sidecar.podAnnotations" -}}
checksum/delay-bridge-config: {{ include "delay-bridge-sidecar.bridgeYAML" . | sha256sum }}
{{- end }}

{{/*
GOMEMLIMIT in bytes: pct % of a Kubernetes memory quantity ("512Mi", "1G", "1073741824").
Argument: dict "quantity" Q "pct" P. Empty when Q is empty or P is 0.
*/}}
{{- define "delay-bridge-sidecar.goMemLimit" -}}
{{- $q := toString (.quantity | default "") }}
{{- if and $q .pct }}
{{- $num := regexFind "^[0-9]+(\\.[0-9]+)?" $q }}
{{- $suffix := trimPrefix $num $q }}
{{- $units := dict "" 1.0 "k" 1e3 "M" 1e6 "G" 1e9 "T" 1e12 "Ki" 1024.0 "Mi" 1048576.0 "Gi" 1073741824.0 "Ti" 1099511627776.0 }}
{{- if or (not $num) (not (hasKey $units $suffix)) }}
{{- fail (printf "resources.limits.memory %q: not a memory quantity this chart can read (use a number with k, M, G, T, Ki, Mi, Gi or Ti)" $q) }}
{{- end }}
{{- mulf (float64 $num) (index $units $suffix) (divf (float64 .pct) 100) | floor | int64 }}
{{- end }}
{{- end }}

{{/* The container (one list item). */}}
{{- define "delay-bridge-sidecar.container" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml -}}
- name: {{ $v.name }}
  image: {{ if $v.image.digest }}{{ printf "%s@%s" $v.image.repository $v.image.digest | quote }}{{ else }}{{ printf "%s:%s" $v.image.repository (toString $v.image.tag) | quote }}{{ end }}
  imagePullPolicy: {{ $v.image.pullPolicy }}
  {{- if $v.native }}
  # A native sidecar: runs for the pod's life, started before the app, stopped after it.
  restartPolicy: Always
  {{- end }}
  args: ["run", "-c", "/etc/delay-bridge/bridge.yaml"]
  ports:
    - name: bridge-admin
      containerPort: {{ $v.adminPort }}
      protocol: TCP
  env:
    # The member name in Redis: unique per pod, stable for its life.
    - name: DELAYBRIDGE_INSTANCE
      valueFrom:
        fieldRef:
          fieldPath: metadata.name
    # Lets `bridge ctl` in the container find the API.
    - name: DELAYBRIDGE_ADMIN__LISTEN
      value: {{ printf "0.0.0.0:%d" (int $v.adminPort) | quote }}
    {{- if $v.secretName }}
    {{- range $key, $env := dict "redis-password" "DELAYBRIDGE_REDIS__PASSWORD" "redis-sentinel-password" "DELAYBRIDGE_REDIS__SENTINEL_PASSWORD" "kafka-sasl-password" "DELAYBRIDGE_KAFKA__SASL__PASSWORD" "admin-token" "DELAYBRIDGE_ADMIN__TOKEN" "amqp-url" "DELAYBRIDGE_AMQP__URL" }}
    - name: {{ $env }}
      valueFrom:
        secretKeyRef:
          name: {{ $v.secretName }}
          key: {{ $key }}
          optional: true
    {{- end }}
    {{- end }}
    {{- $limit := include "delay-bridge-sidecar.goMemLimit" (dict "quantity" (dig "limits" "memory" "" ($v.resources | default dict)) "pct" $v.goMemLimitPercent) }}
    {{- if $limit }}
    - name: GOMEMLIMIT
      value: {{ $limit | quote }}
    {{- end }}
    {{- with $v.extraEnv }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.livenessProbe }}
  livenessProbe:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- if and $v.native $v.startupProbe }}
  startupProbe:
    {{- toYaml $v.startupProbe | nindent 4 }}
  {{- end }}
  {{- with $v.resources }}
  resources:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.securityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  volumeMounts:
    - name: {{ $v.name }}-config
      mountPath: /etc/delay-bridge
      readOnly: true
    - name: {{ $v.name }}-tmp
      mountPath: /tmp
{{- end }}

{{/* List items for the pod's initContainers: the bridge in the native form, else nothing. */}}
{{- define "delay-bridge-sidecar.initContainers" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml }}
{{- if and $v.native (semverCompare "<1.29.0-0" .root.Capabilities.KubeVersion.Version) }}
{{- fail (printf "delay-bridge sidecar: native sidecars (initContainers with restartPolicy: Always) need Kubernetes 1.29+, this is %s; set native: false" .root.Capabilities.KubeVersion.Version) }}
{{- end }}
{{- if $v.native }}
{{- include "delay-bridge-sidecar.container" . }}
{{- end }}
{{- end }}

{{/* List items for the pod's containers: the bridge in the plain form, else nothing. */}}
{{- define "delay-bridge-sidecar.containers" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml }}
{{- if not $v.native }}
{{- include "delay-bridge-sidecar.container" . }}
{{- end }}
{{- end }}

{{/* List items for the pod's volumes. */}}
{{- define "delay-bridge-sidecar.volumes" -}}
{{- $v := include "delay-bridge-sidecar.values" . | fromYaml -}}
- name: {{ $v.name }}-config
  configMap:
    name: {{ include "delay-bridge-sidecar.configMapName" . }}
- name: {{ $v.name }}-tmp
  emptyDir:
    sizeLimit: 64Mi
{{- end }}
