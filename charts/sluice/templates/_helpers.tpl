{{/*
Names, labels, images and the ledger Secret, shared by every template.
*/}}

{{/* The release's base name: the release name, or "<release>-sluice" if it does not contain "sluice". */}}
{{- define "sluice.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "sluice.operatorName" -}}
{{- printf "%s-operator" (include "sluice.fullname" .) -}}
{{- end -}}

{{- define "sluice.postgresName" -}}
{{- printf "%s-postgres" (include "sluice.fullname" .) -}}
{{- end -}}

{{/*
The chart's own Secret for `ledger.url`. It must not be called `sluice-ledger`: that
name belongs to the operator, which writes a Secret of that name (key `url`) into every
namespace that runs gateways, the release namespace included.
*/}}
{{- define "sluice.ledgerUrlSecretName" -}}
{{- printf "%s-operator-ledger" (include "sluice.fullname" .) -}}
{{- end -}}

{{- define "sluice.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: sluice
{{- end -}}

{{/* Selector labels; call with (dict "ctx" $ "component" "operator"). */}}
{{- define "sluice.selectorLabels" -}}
app.kubernetes.io/name: {{ .ctx.Chart.Name }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/*
Labels the operator puts on every gateway object it renders (docs/design.md §7): used by the
ServiceMonitor, the NetworkPolicies and NOTES.txt to find gateways.
*/}}
{{- define "sluice.gatewaySelectorLabels" -}}
app.kubernetes.io/name: sluice-gateway
app.kubernetes.io/managed-by: sluice-operator
{{- end -}}

{{- define "sluice.tag" -}}
{{- .Values.image.tag | default .Chart.AppVersion -}}
{{- end -}}

{{/* An image reference; call with (dict "ctx" $ "name" "sluice-operator"). */}}
{{- define "sluice.image" -}}
{{- $registry := .ctx.Values.image.registry -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" $registry .name (include "sluice.tag" .ctx) -}}
{{- else -}}
{{- printf "%s:%s" .name (include "sluice.tag" .ctx) -}}
{{- end -}}
{{- end -}}

{{/* "true" when the bundled PostgreSQL is deployed. */}}
{{- define "sluice.bundledPostgres" -}}
{{- if and .Values.ledger.postgres.enabled (not .Values.ledger.url) (not .Values.ledger.existingSecret) -}}true{{- end -}}
{{- end -}}

{{/* The Secret (key `url`) the operator reads its ledger URL from. */}}
{{- define "sluice.ledgerSecretName" -}}
{{- if .Values.ledger.existingSecret -}}
{{- .Values.ledger.existingSecret -}}
{{- else if .Values.ledger.url -}}
{{- include "sluice.ledgerUrlSecretName" . -}}
{{- else -}}
{{- include "sluice.postgresName" . -}}
{{- end -}}
{{- end -}}

{{/*
cache.maxBytes as the gateways' SLUICE_CACHE_MAX_BYTES: empty when it is the gateway's own
default (134217728, DEFAULT_MAX_BYTES in gateway/src/cache.rs), so that the default values
leave the gateway pods as they were. int64: a number read from YAML is a float64, which
toString would print as 1.34217728e+08.
*/}}
{{- define "sluice.cacheMaxBytes" -}}
{{- $cache := .Values.cache | default dict -}}
{{- if and (hasKey $cache "maxBytes") (ne (int64 $cache.maxBytes) 134217728) -}}
{{- int64 $cache.maxBytes -}}
{{- end -}}
{{- end -}}

{{/*
Cross-field checks the schema cannot express well; each names the values to change.
Included once, from the operator Deployment.
*/}}
{{- define "sluice.validate" -}}
{{- $l := .Values.ledger -}}
{{- if and $l.url $l.existingSecret -}}
{{- fail "ledger.url and ledger.existingSecret are both set: choose one (the chart writes ledger.url into a Secret; ledger.existingSecret names a Secret you manage)" -}}
{{- end -}}
{{- if and (or $l.url $l.existingSecret) $l.postgres.enabled -}}
{{- fail "an external ledger (ledger.url or ledger.existingSecret) is set while the bundled PostgreSQL is enabled: add --set ledger.postgres.enabled=false" -}}
{{- end -}}
{{- if not (or $l.url $l.existingSecret $l.postgres.enabled) -}}
{{- fail "no ledger: set ledger.url, ledger.existingSecret, or ledger.postgres.enabled=true" -}}
{{- end -}}
{{- if eq $l.existingSecret "sluice-ledger" -}}
{{- fail "ledger.existingSecret must not be named sluice-ledger: the operator owns Secrets of that name in every gateway namespace; rename yours (for example sluice-ledger-external)" -}}
{{- end -}}
{{- if and (gt (int .Values.operator.replicas) 1) (not .Values.operator.leaderElection.enabled) -}}
{{- fail "operator.replicas > 1 needs operator.leaderElection.enabled=true: without it every replica reconciles and writes status" -}}
{{- end -}}
{{- if and .Values.statusPage.ingress.enabled (not .Values.statusPage.enabled) -}}
{{- fail "statusPage.ingress.enabled needs statusPage.enabled=true: the Ingress routes to the operator's status page" -}}
{{- end -}}
{{- $redis := (.Values.cache | default dict).redis | default dict -}}
{{- if and $redis.url $redis.existingSecret -}}
{{- fail "cache.redis.url and cache.redis.existingSecret are both set: choose one (cache.redis.url is written in plain text into the Deployments; cache.redis.existingSecret names a Secret, in every gateway namespace, holding the URL)" -}}
{{- end -}}
{{- $cacheMaxBytes := include "sluice.cacheMaxBytes" . -}}
{{- range .Values.gateway.env | default list -}}
{{- if and (eq .name "SLUICE_CACHE_REDIS_URL") (or $redis.url $redis.existingSecret) -}}
{{- fail "gateway.env sets SLUICE_CACHE_REDIS_URL while cache.redis.url or cache.redis.existingSecret sets it too: keep only the cache.redis value" -}}
{{- end -}}
{{- if and (eq .name "SLUICE_CACHE_MAX_BYTES") $cacheMaxBytes -}}
{{- fail "gateway.env sets SLUICE_CACHE_MAX_BYTES while cache.maxBytes sets it too: keep only cache.maxBytes" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The restricted Pod Security Standard, for every container of the chart. */}}
{{- define "sluice.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end -}}
