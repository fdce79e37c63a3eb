{{/* Base of every object name: fullnameOverride, else nameOverride, else the name ACK users know. */}}
{{- define "erdma.fullname" -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default "alibabacloud-erdma" | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "erdma.controllerName" -}}{{ include "erdma.fullname" . }}-controller{{- end -}}
{{- define "erdma.agentName" -}}{{ include "erdma.fullname" . }}-agent{{- end -}}
{{- define "erdma.driverName" -}}{{ include "erdma.fullname" . }}-driver{{- end -}}
{{- define "erdma.cdiSpecDir" -}}/var/run/cdi{{- end -}}

{{/* The reference controller's leader-election Lease. */}}
{{- define "erdma.leaseName" -}}26dc1c71.alibabacloud.com{{- end -}}
{{- define "erdma.webhookCertSecret" -}}{{ include "erdma.controllerName" . }}-webhook-cert{{- end -}}

{{- define "erdma.controllerServiceAccount" -}}
{{- .Values.serviceAccount.name | default (include "erdma.controllerName" .) -}}
{{- end -}}
{{- define "erdma.agentServiceAccount" -}}
{{- .Values.serviceAccount.agentName | default (include "erdma.agentName" .) -}}
{{- end -}}
{{- define "erdma.driverServiceAccount" -}}
{{- .Values.serviceAccount.driverName | default (include "erdma.driverName" .) -}}
{{- end -}}

{{/* Labels on every object; "component" tells the programs apart. */}}
{{- define "erdma.labels" -}}
{{ include "erdma.podLabels" . }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{/* The reference chart's app.kubernetes.io/name (its chart name, or the top-level
     nameOverride): part of every selector below. */}}
{{- define "erdma.appName" -}}
{{- .Values.nameOverride | default "alibabacloud-erdma-controller" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Selectors are immutable, so they are exactly the reference chart's (name, instance, tier):
     `helm upgrade` of a release installed from that chart is accepted (docs/migration.md). */}}
{{- define "erdma.selector" -}}
app.kubernetes.io/name: {{ include "erdma.appName" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
tier: {{ .component }}
{{- end -}}

{{/* Pod labels: the selector's, plus the component in the recommended key. */}}
{{- define "erdma.podLabels" -}}
{{ include "erdma.selector" . }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* An image reference: repository@digest when a digest is set (the digest alone decides
     what runs), else repository:tag. */}}
{{- define "erdma.imageRef" -}}
{{- if .digest }}{{ printf "%s@%s" .repository .digest }}{{ else }}{{ printf "%s:%s" .repository .tag }}{{ end -}}
{{- end -}}

{{- define "erdma.agentImage" -}}
{{- $img := .Values.agent.image -}}
{{- include "erdma.imageRef" (dict "repository" $img.repository "tag" ($img.tag | default .Chart.AppVersion) "digest" $img.digest) -}}
{{- end -}}

{{/* The controller runs the agent's image unless controller.image names another repository,
     tag or digest (the agent's digest pins the agent's repository and tag only). */}}
{{- define "erdma.controllerImage" -}}
{{- $img := .Values.controller.image -}}
{{- if or $img.repository $img.tag $img.digest -}}
{{- $tag := $img.tag | default .Values.agent.image.tag | default .Chart.AppVersion -}}
{{- include "erdma.imageRef" (dict "repository" ($img.repository | default .Values.agent.image.repository) "tag" $tag "digest" $img.digest) -}}
{{- else -}}
{{- include "erdma.agentImage" . -}}
{{- end -}}
{{- end -}}

{{/* toJson of .from.<key>, or of .default when the key is absent: a release installed from an
     earlier chart version lacks the keys added since (`helm upgrade --reuse-values` keeps
     that version's values in place of this values.yaml). */}}
{{- define "erdma.orDefault" -}}
{{- toJson (ternary (index .from .key) .default (hasKey .from .key)) -}}
{{- end -}}

{{/* Tolerations: the component's own (.from.tolerations; .default when absent), then the
     top-level ones. With .noBlanket (the controller's pods) a top-level toleration of every
     taint (no key, operator Exists: the reference chart's `[{operator: Exists}]`) is left out,
     so only the component's own list can give it; NOTES warn (erdma.warnings). */}}
{{- define "erdma.tolerations" -}}
{{- $own := include "erdma.orDefault" (dict "from" .from "key" "tolerations" "default" .default) | fromJsonArray -}}
{{- $added := list -}}
{{- range (.root.Values.tolerations | default list) -}}
{{- if not (and $.noBlanket (include "erdma.blanketToleration" .)) }}{{ $added = append $added . }}{{ end -}}
{{- end -}}
{{- with concat $own $added -}}
tolerations: {{- toYaml . | nindent 2 }}
{{- end -}}
{{- end -}}

{{/* "true" for a toleration of every taint (of every effect, or of one effect on every key). */}}
{{- define "erdma.blanketToleration" -}}
{{- if and (not .key) (eq (toString .operator) "Exists") }}true{{ end -}}
{{- end -}}

{{/* A pod's imagePullSecrets: the top-level ones, then agent.imagePullSecrets (every program
     runs the agent's image unless controller.image names another), then .own (the component's
     own: controller.imagePullSecrets for the controller's pods); each Secret once, where it
     first appears. Any of them may be absent (--reuse-values of an earlier chart version). */}}
{{- define "erdma.imagePullSecrets" -}}
{{- $all := concat (.root.Values.imagePullSecrets | default list) (.root.Values.agent.imagePullSecrets | default list) (.own | default list) -}}
{{- $names := list -}}
{{- range $all -}}
{{- if not (has .name $names) }}{{ $names = append $names .name }}{{ end -}}
{{- end -}}
{{- with $names -}}
imagePullSecrets:
{{- range . }}
  - name: {{ . | quote }}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "erdma.webhookEnabled" -}}
{{- if and (or .Values.config.enableWebhook (eq (include "erdma.smcrMode" .) "webhook")) (not .Values.config.localERIDiscovery) }}true{{ end -}}
{{- end -}}

{{/* CEL: some container or init container requests or limits the resource named by the argument. */}}
{{- define "erdma.celRequests" -}}
{{- $one := printf "c, has(c.resources) && ((has(c.resources.limits) && '%s' in c.resources.limits) || (has(c.resources.requests) && '%s' in c.resources.requests))" . . -}}
{{- printf "object.spec.containers.exists(%s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(%s))" $one $one -}}
{{- end -}}

{{/* Both node DaemonSets' rollout; a release from before these values gets their defaults. */}}
{{- define "erdma.agentUpdateStrategy" -}}
{{- $default := dict "type" "RollingUpdate" "rollingUpdate" (dict "maxUnavailable" "10%") -}}
{{- toYaml (.Values.agent.updateStrategy | default $default) -}}
{{- end }}

{{- define "erdma.agentMinReadySeconds" -}}
{{- if hasKey .Values.agent "minReadySeconds" }}{{ .Values.agent.minReadySeconds }}{{ else }}10{{ end -}}
{{- end }}
