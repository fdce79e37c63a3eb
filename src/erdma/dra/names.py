"""Names the DRA driver shares with kubelet, the scheduler and the chart (no dependencies).

Kubelet finds DRA plugins through its plugin watcher: a registration socket in
`plugins_registry/` answers GetInfo with type "DRAPlugin", the driver name, the DRA socket and
the gRPC services it serves. The service names are what kubelet matches, not semantic versions:
1.34+ prefers "v1.DRAPlugin", 1.32-1.33 only know "v1beta1.DRAPlugin".
"""

from __future__ import annotations

#: the default driver name: ResourceSlice.spec.driver, DeviceClass selectors, attribute domain
DRIVER_NAME = "erdma.aliyun.com"
#: pluginregistration v1 PluginInfo.type for DRA drivers
PLUGIN_TYPE = "DRAPlugin"
SERVICE_V1 = "v1.DRAPlugin"
SERVICE_V1BETA1 = "v1beta1.DRAPlugin"
#: the device health stream: 1.34-1.36 call v1alpha1 (gate ResourceHealthStatus); later
#: kubelets pick the newest listed. Unknown names are skipped by kubelet, never refused.
HEALTH_SERVICE_V1 = "v1.DRAResourceHealth"
HEALTH_SERVICE_V1ALPHA1 = "v1alpha1.DRAResourceHealth"
#: what GetInfo offers, best first (kubelet picks the newest it knows of each service)
SUPPORTED_SERVICES = (SERVICE_V1, SERVICE_V1BETA1, HEALTH_SERVICE_V1, HEALTH_SERVICE_V1ALPHA1)

#: kubelet's plugin-watcher directory and the per-driver directory, under the kubelet root
PLUGINS_REGISTRY_DIR = "plugins_registry"
PLUGINS_DIR = "plugins"
CHECKPOINT_FILE = "checkpoint.json"

#: the standard attribute schedulers align on (KEP-5491): the PCIe root complex, "pci0000:00"
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
#: the consumable-capacity dimension that stands for the device plugin's 200 slots
SLOTS_CAPACITY = "slots"
#: ResourceSlice limits of resource.k8s.io/v1
MAX_DEVICES_PER_SLICE = 128
MAX_ATTRIBUTE_STRING = 64
