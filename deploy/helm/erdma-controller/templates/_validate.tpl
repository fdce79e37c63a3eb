{{/* Checks that a schema cannot express; each message names the keys and the fix. */}}
{{- define "erdma.validate" -}}
{{- $c := .Values.config -}}
{{- if and $c.localERIDiscovery $c.enableWebhook -}}
{{- fail "config.enableWebhook=true needs the controller, which Local mode (config.localERIDiscovery=true) does not run: set config.enableWebhook=false" -}}
{{- end -}}
{{- include "erdma.validateImages" . -}}
{{- if and .Values.agent.driverInstallCommand (include "erdma.driverInstallCommandSecret" .) -}}
{{- fail (printf "agent.driverInstallCommand and agent.driverInstallCommandSecret.name=%s both give the install command: keep only the Secret (the command then stays out of the ConfigMap and the release's values)" .Values.agent.driverInstallCommandSecret.name) -}}
{{- end -}}
{{- include "erdma.validateSmcr" . -}}
{{- include "erdma.validateCredentials" . -}}
{{- include "erdma.validateKubeVersion" . -}}
{{- include "erdma.validateCrdKept" . -}}
{{- if and .Values.metrics.serviceMonitor.enabled (eq (int .Values.agent.metrics.port) 0) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs agent.metrics.port other than 0" -}}
{{- end -}}
{{- if and .Values.sharedRdma.enabled (eq (int .Values.sharedRdma.metrics.port) (int .Values.agent.metrics.port)) (ne (int .Values.agent.metrics.port) 0) -}}
{{- fail (printf "sharedRdma.metrics.port and agent.metrics.port are both %v: both DaemonSets can run on one node, so use different ports" .Values.agent.metrics.port) -}}
{{- end -}}
{{- end -}}

{{/* Lines for Helm's NOTES (templates/NOTES.txt includes this): values that render, but not
     as a values file written for the reference chart meant them. */}}
{{- define "erdma.warnings" -}}
{{- if not .Values.config.localERIDiscovery -}}
{{- $blanket := list -}}
{{- range (.Values.tolerations | default list) -}}
{{- if include "erdma.blanketToleration" . }}{{ $blanket = append $blanket . }}{{ end -}}
{{- end -}}
{{- $ownBlanket := false -}}
{{- range ((.Values.controller | default dict).tolerations | default list) -}}
{{- if include "erdma.blanketToleration" . }}{{ $ownBlanket = true }}{{ end -}}
{{- end -}}
{{- if and $blanket (not $ownBlanket) }}
WARNING: the top-level tolerations: {{ $blanket | toJson | replace "\"" "" | replace ":" ": " | replace "," ", " }} tolerates every taint (the reference chart gave it to the controller too): the node agents get it, the controller does not get it, so the controller stays off tainted nodes (GPU nodes, unreachable nodes). To give it to the controller anyway, set controller.tolerations; to silence this, move it to agent.tolerations (whose default already tolerates every taint).
{{- end -}}
{{- end -}}
{{- end -}}

{{/* What the cluster's version (the API server's, or `helm template --kube-version`) cannot
     serve: DRA's DeviceClass is resource.k8s.io/v1, served from Kubernetes 1.34 on. */}}
{{- define "erdma.validateKubeVersion" -}}
{{- $version := .Capabilities.KubeVersion.Version -}}
{{- if and (.Values.dra | default dict).enabled (not (semverCompare ">=1.34.0-0" $version)) -}}
{{- fail (printf "dra.enabled=true needs Kubernetes 1.34 or later (its DeviceClasses are resource.k8s.io/v1), and the cluster is %s: upgrade the cluster or set dra.enabled=false (helm template: give --kube-version)" $version) -}}
{{- end -}}
{{- end -}}

{{/* The reference chart installs the ERdmaDevice CRD as a template of its release; this chart
     keeps it in crds/, outside the release, so upgrading such a release deletes the CRD, and
     every ERdmaDevice with it, unless the live CRD carries helm.sh/resource-policy: keep
     (docs/migration.md, step 1). `lookup` sees the cluster in helm install and upgrade only;
     under helm template it finds nothing, and nothing is deleted there either. */}}
{{- define "erdma.validateCrdKept" -}}
{{- $name := "erdmadevices.network.alibabacloud.com" -}}
{{- if .Release.IsUpgrade -}}
{{- $live := lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name | default dict -}}
{{- $ann := ($live.metadata | default dict).annotations | default dict -}}
{{- $ours := and (eq (get $ann "meta.helm.sh/release-name") .Release.Name) (eq (get $ann "meta.helm.sh/release-namespace") .Release.Namespace) -}}
{{- if and $ours (ne (get $ann "helm.sh/resource-policy") "keep") -}}
{{- fail (printf "CustomResourceDefinition %s belongs to release %s (the reference chart installs it as a template), and this upgrade would delete it and every ERdmaDevice: run `kubectl annotate crd %s helm.sh/resource-policy=keep` and `kubectl apply -f deploy/crds/` first (docs/migration.md, step 1)" $name .Release.Name $name) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* smcr.mode against Local mode, the ofed driver mode and the reference keys it replaces. */}}
{{- define "erdma.validateSmcr" -}}
{{- $c := .Values.config -}}
{{- $mode := include "erdma.smcrMode" . -}}
{{- $explicit := not (kindIs "invalid" (.Values.smcr | default dict).mode) -}}
{{- if and (eq $mode "webhook") $c.localERIDiscovery -}}
{{- fail "smcr.mode=webhook needs the controller's webhook, which Local mode (config.localERIDiscovery=true) does not run: set smcr.mode=prestart or off" -}}
{{- end -}}
{{- if and $explicit (ne $mode "off") (eq .Values.agent.preferDriver "ofed") -}}
{{- fail (printf "smcr.mode=%s with agent.preferDriver=ofed: the ofed driver mode has no SMC-R (the agent does not load smc there); set smcr.mode=off or another agent.preferDriver" $mode) -}}
{{- end -}}
{{- if and (eq $mode "webhook") (not (include "erdma.legacyInject" .)) -}}
{{- fail "smcr.mode=webhook injects smcr-init, which config.enableInitContainerInject=false or config.enableDevicePlugin=false forbids: remove those keys (smcr.mode replaces them)" -}}
{{- end -}}
{{- if and $explicit (ne $mode "webhook") $c.enableWebhook (eq (toString $c.enableInitContainerInject) "true") (include "erdma.legacyInject" .) -}}
{{- fail (printf "config.enableWebhook=true with config.enableInitContainerInject=true asks for the smcr-init injection, which smcr.mode (%q) now chooses: set smcr.mode=webhook, or drop config.enableInitContainerInject to serve only the rdma/hca check" $mode) -}}
{{- end -}}
{{- end -}}

{{- define "erdma.validateCredentials" -}}
{{- $cred := .Values.credentials | default dict -}}
{{- $type := $cred.type | default "" -}}
{{- $keys := or $cred.accessKeyID $cred.accessKeySecret -}}
{{- if and $cred.existingSecret (not (has $type (list "" "access_key"))) -}}
{{- fail (printf "credentials.existingSecret holds an AccessKey, which credentials.type=%q does not use: set credentials.type=access_key or remove credentials.existingSecret" $type) -}}
{{- end -}}
{{- if and $cred.existingSecret $keys -}}
{{- fail "credentials.existingSecret and credentials.accessKeyID/accessKeySecret both give the AccessKey: keep only credentials.existingSecret" -}}
{{- end -}}
{{- if not .Values.config.localERIDiscovery -}}
{{- if and (has $type (list "" "access_key")) (not $cred.existingSecret) (not (and $cred.accessKeyID $cred.accessKeySecret)) -}}
{{- fail (printf "credentials.type=%q needs credentials.existingSecret (a Secret with keys accessKeyID and accessKeySecret) or credentials.accessKeyID and credentials.accessKeySecret in Regular mode; or set credentials.type to oidc_role_arn (RRSA), ecs_ram_role or ram_role_sts, or config.localERIDiscovery=true" $type) -}}
{{- end -}}
{{- if and (eq $type "oidc_role_arn") (not $cred.roleName) (not (index .Values.serviceAccount.annotations "pod-identity.alibabacloud.com/role-name")) -}}
{{- fail "credentials.type=\"oidc_role_arn\" (RRSA) needs credentials.roleName: the RAM role the controller's ServiceAccount assumes" -}}
{{- end -}}
{{- if and (eq $type "ram_role_sts") (ne .Release.Namespace "kube-system") -}}
{{- fail (printf "credentials.type=\"ram_role_sts\" reads Secret addon.network.token, which ACK keeps in kube-system, and a pod mounts Secrets of its own namespace only: install the release in kube-system (not %q), or use credentials.type=oidc_role_arn (RRSA)" .Release.Namespace) -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The reference chart's images run other programs with other flags: a values file carried
     over from it must name this chart's image (docs/migration.md). */}}
{{- define "erdma.validateImages" -}}
{{- $agent := .Values.agent.image.repository | default "" -}}
{{- if regexMatch "^registry[-a-z0-9.]*\\.aliyuncs\\.com/erdma/agent$" $agent -}}
{{- fail (printf "agent.image.repository=%s is the reference chart's agent image, which does not run this chart's programs: set agent.image.repository to this chart's image (default docker.io/erdma-k8s/erdma) or remove the key from your values file" $agent) -}}
{{- end -}}
{{- $controller := (.Values.controller.image | default dict).repository | default "" -}}
{{- if regexMatch "^registry[-a-z0-9.]*\\.aliyuncs\\.com/erdma/controller$" $controller -}}
{{- fail (printf "controller.image.repository=%s is the reference chart's controller image, which does not run this chart's programs: set controller.image.repository=\"\" (the controller runs the agent's image) or remove the key from your values file" $controller) -}}
{{- end -}}
{{- $init := .Values.config.smcInitImage | default "" -}}
{{- if regexMatch "^registry[-a-z0-9.]*\\.aliyuncs\\.com/erdma/smcr_init([:@].*)?$" $init -}}
{{- fail (printf "config.smcInitImage=%s is the reference chart's smcr-init image, which does not hold `erdma smcr-init`: set config.smcInitImage=\"\" (the agent's image) or remove the key" $init) -}}
{{- end -}}
{{- end -}}
