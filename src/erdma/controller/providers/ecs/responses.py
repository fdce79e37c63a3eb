"""ECS SDK response models turned into the ``CloudApi`` dataclasses (``Eni``, ``Instance``, ...).

The SDK leaves fields the response lacks as ``None``; each of them becomes the dataclass's empty
value (``""``, ``0``, no tags) rather than an error.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from erdma.controller.cloud import TRAFFIC_HIGH_PERFORMANCE, Eni, Instance, InstanceTypeCaps


def eni(item: Any) -> Eni:
    """One ``NetworkInterfaceSet`` of DescribeNetworkInterfaces."""
    tags = {t.tag_key: t.tag_value for t in (item.tags.tag if item.tags and item.tags.tag else [])}
    attachment = getattr(item, "attachment", None)
    card = attachment.network_card_index if attachment and attachment.network_card_index else 0
    instance_id = getattr(item, "instance_id", "") or (
        attachment.instance_id if attachment and attachment.instance_id else ""
    )
    return Eni(
        id=item.network_interface_id,
        mac=(item.mac_address or "").lower(),
        status=item.status or "",
        traffic_mode=getattr(item, "network_interface_traffic_mode", None) or "Standard",
        queue_pair_number=getattr(item, "queue_pair_number", None) or 0,
        card_index=int(card),
        instance_id=instance_id,
        is_primary=item.type == "Primary",
        tags=tags,
        vswitch_id=item.v_switch_id or "",
        private_ip=item.private_ip_address or "",
    )


def created_eri(
    body: Any, instance: Instance, card_index: int, queue_pair_number: int, tags: Mapping[str, str]
) -> Eni:
    """The ERI a CreateNetworkInterface ``body`` describes, completed from the request."""
    return Eni(
        id=body.network_interface_id,
        mac=(body.mac_address or "").lower(),
        status=body.status or "Available",
        traffic_mode=TRAFFIC_HIGH_PERFORMANCE,
        queue_pair_number=queue_pair_number,
        card_index=card_index,
        instance_id="",
        is_primary=False,
        tags=dict(tags),
        vswitch_id=body.v_switch_id or instance.vswitch_id,
        private_ip=body.private_ip_address or "",
    )


def instance(item: Any, region: str) -> Instance:
    """One instance of DescribeInstances; ``region`` stands in when the item has none."""
    vpc = item.vpc_attributes
    ips = vpc.private_ip_address.ip_address if vpc and vpc.private_ip_address else []
    nics = item.network_interfaces.network_interface if item.network_interfaces else []
    primary = next((n.network_interface_id for n in nics if n.type == "Primary"), "")
    groups = item.security_group_ids.security_group_id if item.security_group_ids else []
    return Instance(
        id=item.instance_id,
        region=item.region_id or region,
        instance_type=item.instance_type,
        zone_id=item.zone_id or "",
        vpc_id=vpc.vpc_id if vpc else "",
        vswitch_id=vpc.v_switch_id if vpc else "",
        security_group_ids=tuple(groups or ()),
        private_ip=ips[0] if ips else "",
        primary_eni_id=primary,
        status=item.status or "",
        eni_ids=tuple(n.network_interface_id for n in nics or [] if n.network_interface_id),
    )


def instance_type_caps(item: Any, instance_type: str) -> InstanceTypeCaps:
    """One instance type of DescribeInstanceTypes."""
    return InstanceTypeCaps(
        instance_type=instance_type,
        eri_quantity=item.eri_quantity or 0,
        network_card_quantity=item.network_card_quantity or 0,
        queue_pair_number=item.queue_pair_number or 0,
        gpu_amount=item.gpuamount or 0,
    )


def jumbo_frame(body: Any) -> bool:
    """DescribeInstanceAttribute's EnableJumboFrame, top-level or under NetworkOptions."""
    if body.enable_jumbo_frame is not None:
        return bool(body.enable_jumbo_frame)
    options = body.network_options
    return bool(options and options.enable_jumbo_frame)
