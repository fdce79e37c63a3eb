{{/* The programs' configuration files. Every value is rendered with toJson, so a value missing
     from the release's values (a values set of an earlier chart version, which `helm upgrade
     --reuse-values` keeps) is null, and erdma.pruned leaves it out: the program's own default
     applies, and no setting is rendered as an empty or zero value the program would refuse or
     misread. */}}
{{- define "erdma.pruned" -}}
{{- $out := dict -}}
{{- range $key, $value := . -}}
{{- if kindIs "map" $value -}}
{{- $_ := set $out $key (include "erdma.pruned" $value | fromYaml) -}}
{{- else if kindIs "slice" $value -}}
{{- $items := list -}}
{{- range $value -}}
{{- if kindIs "map" . }}{{ $items = append $items (include "erdma.pruned" . | fromYaml) }}{{ else }}{{ $items = append $items . }}{{ end -}}
{{- end -}}
{{- $_ := set $out $key $items -}}
{{- else if not (kindIs "invalid" $value) -}}
{{- $_ := set $out $key $value -}}
{{- end -}}
{{- end -}}
{{- toYaml $out -}}
{{- end -}}

{{/* The agent's config file (`erdma agent --config`); keys are AgentConfig's. The agent
     leaves node preparation (and its host namespace and installer) to the driver DaemonSet's
     init container, which reads erdma.driverConfig. */}}
{{- define "erdma.agentConfig" -}}
{{- $s := include "erdma.agentSettings" . | fromYaml -}}
{{- $_ := set $s "prepareNode" false -}}
{{- $_ = set $s "hostNamespace" false -}}
{{- $_ = unset $s "driverInstaller" -}}
{{- $_ = unset $s "driverInstallCommand" -}}
{{- include "erdma.pruned" $s -}}
{{- end -}}

{{/* The driver DaemonSet's config file (`erdma driver prepare --config`): the same settings,
     with the node preparation the agent leaves out. A driverInstallCommand kept in a Secret
     (agent.driverInstallCommandSecret) reaches it as an environment variable instead. */}}
{{- define "erdma.driverConfig" -}}
{{- $s := include "erdma.agentSettings" . | fromYaml -}}
{{- $_ := set $s "prepareNode" true -}}
{{- if (include "erdma.driverInstallCommandSecret" .) -}}
{{- $_ = unset $s "driverInstallCommand" -}}
{{- end -}}
{{- include "erdma.pruned" $s -}}
{{- end -}}

{{- define "erdma.sharedConfig" -}}
{{- include "erdma.sharedSettings" . | fromYaml | include "erdma.pruned" -}}
{{- end -}}

{{- define "erdma.agentSettings" -}}
{{- $a := .Values.agent -}}
{{- $m := $a.metrics | default dict -}}
{{- $n := $a.nccl | default dict -}}
{{- $i := $a.driverInstaller | default dict -}}
{{- $d := .Values.dra | default dict -}}
version: v1
resources: [aliyun/erdma]
kubeletDir: {{ $a.kubeletDir | toJson }}
preferDriver: {{ $a.preferDriver | toJson }}
allocateAllDevices: {{ $a.allocateAllDevices | toJson }}
localERIDiscovery: {{ .Values.config.localERIDiscovery | toJson }}
exposedLocalERIs: {{ $a.exposedLocalERIs | toJson }}
slotsPerDevice: {{ $a.slotsPerDevice | toJson }}
prestartContainer: {{ eq (include "erdma.smcrMode" .) "prestart" }}
runtimeSocket: {{ $a.runtimeSocket | toJson }}
deviceListStrategy: {{ $a.deviceListStrategy | toJson }}
cdiSpecDir: {{ include "erdma.cdiSpecDir" . }}
prepareNode: {{ $a.prepareNode | toJson }}
jumboFrameMTU: {{ $a.jumboFrameMTU | toJson }}
metricsPort: {{ $m.port | toJson }}
hostNamespace: {{ eq (include "erdma.driverHostNamespace" .) "true" }}
driverInstallCommand: {{ $a.driverInstallCommand | toJson }}
driverInstaller:
  enabled: {{ eq (include "erdma.driverInstaller" .) "true" }}
  version: {{ $i.version | toJson }}
  mirror: {{ $i.mirror | toJson }}
  installerSha256: {{ $i.installerSha256 | toJson }}
  envSetupSha256: {{ $i.envSetupSha256 | toJson }}
  timeoutSeconds: {{ $i.timeoutSeconds | toJson }}
logLevel: {{ $a.logLevel | toJson }}
nccl:
  enabled: {{ $n.enabled | toJson }}
  socketIfname: {{ $n.socketIfname | toJson }}
  gidIndex: {{ $n.gidIndex | toJson }}
  overrides: {{ $n.overrides | toJson }}
dra:
  enabled: {{ $d.enabled | toJson }}
  driverName: {{ $d.driverName | toJson }}
  deviceKinds: {{ $d.deviceKinds | toJson }}
  devices: {{ $d.devices | toJson }}
  unhealthy: {{ $d.unhealthy | toJson }}
  consumableCapacity: {{ $d.consumableCapacity | toJson }}
  slotsPerDevice: {{ $d.slotsPerDevice | toJson }}
  deleteSlicesOnStop: {{ $d.deleteSlicesOnStop | toJson }}
{{- end -}}

{{/* The shared DaemonSet's config file: only the shared plugin, which needs neither the erdma
     driver (prepareNode) nor this node's ERdmaDevice (localERIDiscovery). */}}
{{- define "erdma.sharedSettings" -}}
{{- $s := .Values.sharedRdma -}}
{{- $m := $s.metrics | default dict -}}
version: v1
resources: [shared]
prepareNode: false
localERIDiscovery: true
kubeletDir: {{ .Values.agent.kubeletDir | toJson }}
metricsPort: {{ $m.port | toJson }}
logLevel: {{ .Values.agent.logLevel | toJson }}
nonHostNetworkRdma: {{ $s.nonHostNetworkRdma | toJson }}
sharedResources:
  - name: {{ $s.resourceName | toJson }}
    capacity: {{ $s.capacity | toJson }}
    requiredCharDevices: {{ $s.requiredCharDevices | toJson }}
    selectors: {{ $s.selectors | toJson }}
{{- end -}}
