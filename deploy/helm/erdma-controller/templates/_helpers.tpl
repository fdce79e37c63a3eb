{{/* Base of every object name: fullnameOverride, else nameOverride, else the name ACK users know. */}}
{{- define "erdma.fullname" -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default "alibabacloud-erdma" | trunc 52 | trimSuffix "-" -}}
{{- end -}}

{{- define "erdma.controllerName" -}}{{ include "erdma.fullname" . }}-controller{{- end -}}
{{- define "erdma.agentName" -}}{{ include "erdma.fullname" . }}-agent{{- end -}}
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

{{/* Labels on every object; "component" tells the programs apart. */}}
{{- define "erdma.labels" -}}
app.kubernetes.io/name: {{ include "erdma.fullname" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/component: {{ .component }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- end -}}

{{- define "erdma.selector" -}}
app.kubernetes.io/name: {{ include "erdma.fullname" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "erdma.agentImage" -}}
{{- $img := .Values.agent.image -}}
{{- printf "%s:%s" $img.repository ($img.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "erdma.controllerImage" -}}
{{- $img := .Values.controller.image -}}
{{- printf "%s:%s" ($img.repository | default .Values.agent.image.repository) ($img.tag | default .Values.agent.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{- define "erdma.webhookEnabled" -}}
{{- if and .Values.config.enableWebhook (not .Values.config.localERIDiscovery) }}true{{ end -}}
{{- end -}}

{{/* SMC-R in PreStartContainer: the reference's path when the webhook does not inject the
     init container; ofed mode has no SMC-R. */}}
{{- define "erdma.prestart" -}}
{{- $inject := and (include "erdma.webhookEnabled" .) .Values.config.enableInitContainerInject .Values.config.enableDevicePlugin -}}
{{- if and (not $inject) (ne .Values.agent.preferDriver "ofed") }}true{{ end -}}
{{- end -}}

{{/* The agent needs the host network for netdev bring-up (Regular mode) and the host's SMC
     pnet table (every driver mode but ofed). */}}
{{- define "erdma.agentHostNetwork" -}}
{{- if or (not .Values.config.localERIDiscovery) (ne .Values.agent.preferDriver "ofed") }}true{{ end -}}
{{- end -}}

{{/* The agent's config file (`erdma agent --config`); keys are AgentConfig's. */}}
{{- define "erdma.agentConfig" -}}
{{- $a := .Values.agent -}}
version: v1
resources: [aliyun/erdma]
kubeletDir: {{ $a.kubeletDir | quote }}
preferDriver: {{ $a.preferDriver | quote }}
allocateAllDevices: {{ $a.allocateAllDevices }}
localERIDiscovery: {{ .Values.config.localERIDiscovery }}
exposedLocalERIs: {{ $a.exposedLocalERIs | toJson }}
slotsPerDevice: {{ $a.slotsPerDevice }}
prestartContainer: {{ include "erdma.prestart" . | eq "true" }}
runtimeSocket: {{ $a.runtimeSocket | quote }}
deviceListStrategy: {{ $a.deviceListStrategy }}
cdiSpecDir: {{ include "erdma.cdiSpecDir" . }}
prepareNode: {{ $a.prepareNode }}
jumboFrameMTU: {{ $a.jumboFrameMTU }}
metricsPort: {{ $a.metrics.port }}
hostNamespace: {{ $a.hostNamespace }}
driverInstallCommand: {{ $a.driverInstallCommand | quote }}
logLevel: {{ $a.logLevel }}
nccl:
  enabled: {{ $a.nccl.enabled }}
  socketIfname: {{ $a.nccl.socketIfname | quote }}
  {{- if not (kindIs "invalid" $a.nccl.gidIndex) }}
  gidIndex: {{ $a.nccl.gidIndex }}
  {{- end }}
  overrides: {{ $a.nccl.overrides | toJson }}
{{- $d := .Values.dra }}
dra:
  enabled: {{ $d.enabled }}
  driverName: {{ $d.driverName | quote }}
  deviceKinds: {{ $d.deviceKinds | toJson }}
  devices: {{ $d.devices | toJson }}
  unhealthy: {{ $d.unhealthy }}
  consumableCapacity: {{ $d.consumableCapacity }}
  slotsPerDevice: {{ $d.slotsPerDevice }}
  deleteSlicesOnStop: {{ $d.deleteSlicesOnStop }}
{{- end -}}

{{/* The shared DaemonSet's config file: only the shared plugin. */}}
{{- define "erdma.sharedConfig" -}}
{{- $s := .Values.sharedRdma -}}
version: v1
resources: [shared]
# Serving shared HCAs needs neither the erdma driver nor this node's ERdmaDevice.
prepareNode: false
localERIDiscovery: true
kubeletDir: {{ .Values.agent.kubeletDir | quote }}
metricsPort: {{ $s.metrics.port }}
logLevel: {{ .Values.agent.logLevel }}
nonHostNetworkRdma: {{ $s.nonHostNetworkRdma }}
sharedResources:
  - name: {{ $s.resourceName }}
    capacity: {{ $s.capacity }}
    requiredCharDevices: {{ $s.requiredCharDevices | toJson }}
    selectors: {{ $s.selectors | toJson }}
{{- end -}}

{{/* Volumes every agent-style pod has: plugin sockets, sysfs and /dev of the host, and a
     writable /tmp under the read-only root filesystem. */}}
{{- define "erdma.nodeVolumes" -}}
- name: device-plugins
  hostPath: {path: {{ printf "%s/device-plugins" .Values.agent.kubeletDir }}, type: Directory}
- name: sys
  hostPath: {path: /sys, type: Directory}
- name: dev
  hostPath: {path: /dev, type: Directory}
- name: tmp
  emptyDir: {medium: Memory, sizeLimit: 16Mi}
{{- end -}}

{{- define "erdma.nodeVolumeMounts" -}}
- {name: device-plugins, mountPath: {{ printf "%s/device-plugins" .Values.agent.kubeletDir }}}
- {name: sys, mountPath: /sys, readOnly: true}
- {name: dev, mountPath: /dev, readOnly: true, mountPropagation: HostToContainer}
- {name: tmp, mountPath: /tmp}
{{- end -}}

{{/* Checks that a schema cannot express; each message names the keys and the fix. */}}
{{- define "erdma.validate" -}}
{{- $c := .Values.config -}}
{{- if and $c.localERIDiscovery $c.enableWebhook -}}
{{- fail "config.enableWebhook=true needs the controller, which Local mode (config.localERIDiscovery=true) does not run: set config.enableWebhook=false (SMC-R then runs in PreStartContainer)" -}}
{{- end -}}
{{- if and (not $c.localERIDiscovery) (has .Values.credentials.type (list "" "access_key")) -}}
{{- if not (and .Values.credentials.accessKeyID .Values.credentials.accessKeySecret) -}}
{{- fail (printf "credentials.type=%q needs credentials.accessKeyID and credentials.accessKeySecret in Regular mode; or set credentials.type to ecs_ram_role or oidc_role_arn, or config.localERIDiscovery=true" .Values.credentials.type) -}}
{{- end -}}
{{- end -}}
{{- if and (eq .Values.credentials.type "oidc_role_arn") (not .Values.credentials.roleName) (not (index .Values.serviceAccount.annotations "pod-identity.alibabacloud.com/role-name")) -}}
{{- fail "credentials.type=\"oidc_role_arn\" (RRSA) needs credentials.roleName: the RAM role the controller's ServiceAccount assumes" -}}
{{- end -}}
{{- with .Values.agent.runtimeSocket -}}
{{- if not (hasPrefix (printf "%s/" $.Values.agent.criSocketDir) .) -}}
{{- fail (printf "agent.runtimeSocket %q is not inside agent.criSocketDir %q, the only host directory the agent mounts for it" . $.Values.agent.criSocketDir) -}}
{{- end -}}
{{- end -}}
{{- if and .Values.metrics.serviceMonitor.enabled (eq (int .Values.agent.metrics.port) 0) -}}
{{- fail "metrics.serviceMonitor.enabled=true needs agent.metrics.port other than 0" -}}
{{- end -}}
{{- if and .Values.sharedRdma.enabled (eq (int .Values.sharedRdma.metrics.port) (int .Values.agent.metrics.port)) (ne (int .Values.agent.metrics.port) 0) -}}
{{- fail (printf "sharedRdma.metrics.port and agent.metrics.port are both %v: both DaemonSets can run on one node, so use different ports" .Values.agent.metrics.port) -}}
{{- end -}}
{{- end -}}

{{/* CEL: some container or init container requests or limits the resource named by the argument. */}}
{{- define "erdma.celRequests" -}}
{{- $one := printf "c, has(c.resources) && ((has(c.resources.limits) && '%s' in c.resources.limits) || (has(c.resources.requests) && '%s' in c.resources.requests))" . . -}}
{{- printf "object.spec.containers.exists(%s) || (has(object.spec.initContainers) && object.spec.initContainers.exists(%s))" $one $one -}}
{{- end -}}
