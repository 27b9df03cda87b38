{{/*
Chart name, truncated to 63 characters (the DNS label limit).
*/}}
{{- define "delay-bridge.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Fully qualified app name: the release name, with the chart name appended unless the
release name already contains it.
*/}}
{{- define "delay-bridge.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart name and version for the helm.sh/chart label.
*/}}
{{- define "delay-bridge.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Selector labels: stable for the life of a release (Deployment selectors are immutable).
*/}}
{{- define "delay-bridge.selectorLabels" -}}
app.kubernetes.io/name: {{ include "delay-bridge.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Common labels.
*/}}
{{- define "delay-bridge.labels" -}}
helm.sh/chart: {{ include "delay-bridge.chart" . }}
{{ include "delay-bridge.selectorLabels" . }}
app.kubernetes.io/version: {{ include "delay-bridge.imageTag" . | trunc 63 | trimSuffix "-" | quote }}
app.kubernetes.io/component: bridge
app.kubernetes.io/part-of: delay-bridge
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{- define "delay-bridge.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "delay-bridge.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "delay-bridge.imageTag" -}}
{{- .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{- define "delay-bridge.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (include "delay-bridge.imageTag" .) }}
{{- end }}
{{- end }}

{{/*
Where the ConfigMap is mounted, and the file the bridge reads.
*/}}
{{- define "delay-bridge.configDir" -}}/etc/delay-bridge{{- end }}
{{- define "delay-bridge.configFile" -}}{{ include "delay-bridge.configDir" . }}/bridge.yaml{{- end }}

{{/*
The secrets the bridge reads from the environment: value key in .Values.secrets ->
environment variable.
*/}}
{{- define "delay-bridge.secretEnv" -}}
redisPassword: DELAYBRIDGE_REDIS__PASSWORD
redisSentinelPassword: DELAYBRIDGE_REDIS__SENTINEL_PASSWORD
kafkaSaslPassword: DELAYBRIDGE_KAFKA__SASL__PASSWORD
adminToken: DELAYBRIDGE_ADMIN__TOKEN
amqpUrl: DELAYBRIDGE_AMQP__URL
{{- end }}

{{/*
True (non-empty) when the chart creates the Secret: no existingSecret and at least one
secret value set.
*/}}
{{- define "delay-bridge.createSecret" -}}
{{- if not .Values.secrets.existingSecret }}
{{- range $k, $_ := include "delay-bridge.secretEnv" . | fromYaml }}
{{- if index $.Values.secrets $k }}true{{ end }}
{{- end }}
{{- end }}
{{- end }}

{{- define "delay-bridge.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "delay-bridge.fullname" .) }}
{{- end }}

{{/*
The bridge configuration as YAML: .Values.config with admin.listen set from admin.port.
Refuses secrets in the ConfigMap and a configuration without routes.
*/}}
{{- define "delay-bridge.config" -}}
{{- $cfg := deepCopy .Values.config }}
{{- if not $cfg.routes }}
{{- fail "config.routes: at least one route is required (see values.yaml for an example)" }}
{{- end }}
{{- if and $cfg.redis $cfg.redis.password }}
{{- fail "config.redis.password: do not put secrets in the ConfigMap; set secrets.redisPassword or secrets.existingSecret" }}
{{- end }}
{{- if and $cfg.redis $cfg.redis.sentinel_password }}
{{- fail "config.redis.sentinel_password: do not put secrets in the ConfigMap; set secrets.redisSentinelPassword or secrets.existingSecret" }}
{{- end }}
{{- if and $cfg.kafka $cfg.kafka.sasl $cfg.kafka.sasl.password }}
{{- fail "config.kafka.sasl.password: do not put secrets in the ConfigMap; set secrets.kafkaSaslPassword or secrets.existingSecret" }}
{{- end }}
{{- if and $cfg.admin $cfg.admin.token }}
{{- fail "config.admin.token: do not put secrets in the ConfigMap; set secrets.adminToken or secrets.existingSecret" }}
{{- end }}
{{- if $cfg.instance }}
{{- fail "config.instance: set by the chart to the pod name; remove it" }}
{{- end }}
{{- $_ := set $cfg "admin" (dict "listen" (printf "0.0.0.0:%d" (int .Values.admin.port))) }}
{{- toYaml $cfg }}
{{- end }}

{{/*
Pod selector labels added to topology spread constraints that name none.
*/}}
{{- define "delay-bridge.topologySpreadConstraints" -}}
{{- $sel := include "delay-bridge.selectorLabels" . | fromYaml }}
{{- $out := list }}
{{- range .Values.topologySpreadConstraints }}
{{- $c := deepCopy . }}
{{- if not $c.labelSelector }}
{{- $_ := set $c "labelSelector" (dict "matchLabels" $sel) }}
{{- end }}
{{- $out = append $out $c }}
{{- end }}
{{- toYaml $out }}
{{- end }}

{{/*
GOMEMLIMIT in bytes: pct % of a Kubernetes memory quantity ("1Gi", "512M", "1073741824").
Argument: dict "quantity" Q "pct" P. Empty when Q is empty or P is 0. (The same helper is
in charts/delay-bridge-sidecar; the chart tests render both.)
*/}}
{{- define "delay-bridge.goMemLimit" -}}
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
