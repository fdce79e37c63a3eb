"""ECS RPC actions: parse query parameters the way ECS does and answer with ECS-shaped JSON.

Each handler takes the flat parameter map (``Tag.1.Key``, ``NetworkInterfaceId.2``, JSON
lists such as ``InstanceIds``) and returns the response body without ``RequestId``.
Missing or malformed parameters produce the ECS error codes, naming the parameter.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from tests.fakes.ecs.state import EcsApiError, EcsWorld, EniRecord, InstanceRecord

Params = Mapping[str, str]
Body = dict[str, Any]


def required(params: Params, name: str) -> str:
    """A mandatory parameter, or ``MissingParameter`` naming it."""
    value = params.get(name, "")
    if not value:
        raise EcsApiError(
            "MissingParameter",
            f'The input parameter "{name}" that is mandatory for processing this request '
            "is not supplied.",
        )
    return value


def integer(params: Params, name: str, default: int, low: int, high: int) -> int:
    """An integer parameter within ``[low, high]``."""
    raw = params.get(name, "")
    if raw == "":
        return default
    if not raw.lstrip("-").isdigit() or not low <= int(raw) <= high:
        raise EcsApiError(
            f"InvalidParameter.{name}",
            f"The parameter {name} {raw!r} is invalid; expected an integer in [{low}, {high}].",
        )
    return int(raw)


def repeated(params: Params, name: str) -> list[str]:
    """``Name.1``, ``Name.2``, ... in index order."""
    pattern = re.compile(rf"^{re.escape(name)}\.(\d+)$")
    found = sorted((int(m.group(1)), v) for k, v in params.items() if (m := pattern.match(k)))
    return [v for _, v in found]


def tags(params: Params, name: str = "Tag") -> dict[str, str]:
    """``Tag.N.Key``/``Tag.N.Value`` pairs."""
    pattern = re.compile(rf"^{re.escape(name)}\.(\d+)\.Key$")
    keys = {m.group(1): v for k, v in params.items() if (m := pattern.match(k))}
    return {key: params.get(f"{name}.{n}.Value", "") for n, key in keys.items()}


def json_list(params: Params, name: str) -> list[str]:
    """A JSON-array parameter such as ``InstanceIds='["i-1"]'``."""
    raw = params.get(name, "")
    if not raw:
        return []
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise EcsApiError(
            f"InvalidParameter.{name}", f"{name} must be a JSON array of strings, got {raw!r}."
        )
    return value


def at_most(name: str, values: list[str], limit: int) -> list[str]:
    """A list parameter ECS caps at ``limit`` entries per request."""
    if len(values) > limit:
        raise EcsApiError(
            f"InvalidParameter.{name}",
            f"The parameter {name} has {len(values)} entries; at most {limit} are accepted.",
        )
    return values


def check_region(world: EcsWorld, params: Params) -> None:
    """``RegionId`` must name the emulated region."""
    region = required(params, "RegionId")
    if region != world.region:
        raise EcsApiError("InvalidRegionId.NotFound", f"The region {region} does not exist.", 404)


def _instance_body(world: EcsWorld, inst: InstanceRecord) -> Body:
    """One instance; ``NetworkInterfaces`` lists every ENI attached (or attaching), as ECS does."""
    return {
        "InstanceId": inst.id,
        "InstanceType": inst.instance_type,
        "RegionId": world.region,
        "ZoneId": inst.zone_id,
        "Status": "Running",
        "VpcAttributes": {
            "VpcId": inst.vpc_id,
            "VSwitchId": inst.vswitch_id,
            "PrivateIpAddress": {"IpAddress": [inst.private_ip]},
        },
        "SecurityGroupIds": {"SecurityGroupId": list(inst.security_group_ids)},
        "NetworkInterfaces": {
            "NetworkInterface": [
                {
                    "NetworkInterfaceId": eni.id,
                    "Type": eni.type,
                    "MacAddress": eni.mac,
                    "PrimaryIpAddress": eni.private_ip,
                }
                for eni in world.enis_of(inst.id)
            ]
        },
    }


def _eni_body(eni: EniRecord) -> Body:
    body: Body = {
        "NetworkInterfaceId": eni.id,
        "MacAddress": eni.mac,
        "Status": eni.status,
        "Type": eni.type,
        "VSwitchId": eni.vswitch_id,
        "VpcId": eni.vpc_id,
        "ZoneId": eni.zone_id,
        "PrivateIpAddress": eni.private_ip,
        "SecurityGroupIds": {"SecurityGroupId": list(eni.security_group_ids)},
        "Tags": {"Tag": [{"TagKey": k, "TagValue": v} for k, v in eni.tags.items()]},
        "NetworkInterfaceTrafficMode": eni.traffic_mode,
        "QueuePairNumber": eni.queue_pair_number,
    }
    if eni.instance_id:
        body["InstanceId"] = eni.instance_id
        body["Attachment"] = {"InstanceId": eni.instance_id, "NetworkCardIndex": eni.card_index}
    return body


def _page(params: Params, items: list[Any]) -> tuple[list[Any], Body]:
    """Slice by NextToken/MaxResults when either is given, else by PageNumber/PageSize."""
    if "MaxResults" in params or "NextToken" in params:
        size = integer(params, "MaxResults", 10, 1, 500)
        token = params.get("NextToken", "")
        if token and not (token.startswith("nt-") and token[3:].isdigit()):
            raise EcsApiError("InvalidParameter.NextToken", f"NextToken {token!r} is invalid.")
        start = int(token[3:]) if token else 0
        end = start + size
        more = f"nt-{end}" if end < len(items) else ""
        return items[start:end], {"NextToken": more, "MaxResults": size}
    size = integer(params, "PageSize", 10, 1, 100)
    number = integer(params, "PageNumber", 1, 1, 1_000_000)
    start = (number - 1) * size
    meta = {"PageNumber": number, "PageSize": size, "TotalCount": len(items)}
    return items[start : start + size], meta


def describe_instances(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    ids = at_most("InstanceIds", json_list(params, "InstanceIds"), 100)
    ips = at_most("PrivateIpAddresses", json_list(params, "PrivateIpAddresses"), 100)
    found = [
        inst
        for inst in world.instances.values()
        if (not ids or inst.id in ids) and (not ips or inst.private_ip in ips)
    ]
    page, meta = _page(params, found)
    body = [_instance_body(world, inst) for inst in page]
    return {**meta, "TotalCount": len(found), "Instances": {"Instance": body}}


def describe_instance_types(world: EcsWorld, params: Params) -> Body:
    names = repeated(params, "InstanceTypes")
    found = [t for t in world.instance_types.values() if not names or t.name in names]
    return {
        "InstanceTypes": {
            "InstanceType": [
                {
                    "InstanceTypeId": t.name,
                    "EriQuantity": t.eri_quantity,
                    "NetworkCardQuantity": t.network_card_quantity,
                    "QueuePairNumber": t.queue_pair_number,
                    "GPUAmount": t.gpu_amount,
                    "EniQuantity": t.eni_quantity,
                }
                for t in found
            ]
        }
    }


def describe_instance_attribute(world: EcsWorld, params: Params) -> Body:
    inst = world.instance(required(params, "InstanceId"))
    return {**_instance_body(world, inst), "EnableJumboFrame": inst.jumbo_frame}


def describe_network_interfaces(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    world.settle()
    instance_id = params.get("InstanceId", "")
    ids = at_most("NetworkInterfaceId", repeated(params, "NetworkInterfaceId"), 100)
    want = tags(params)
    status = params.get("Status", "")
    found = [
        eni
        for eni in world.enis.values()
        if (not instance_id or eni.instance_id == instance_id)
        and (not ids or eni.id in ids)
        and (not status or eni.status == status)
        and all(eni.tags.get(k) == v for k, v in want.items())
    ]
    page, meta = _page(params, found)
    body = [_eni_body(eni) for eni in page]
    return {**meta, "TotalCount": len(found), "NetworkInterfaceSets": {"NetworkInterfaceSet": body}}


def create_network_interface(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    groups = repeated(params, "SecurityGroupIds") or [required(params, "SecurityGroupId")]
    eni = world.create_eni(
        vswitch_id=required(params, "VSwitchId"),
        security_group_ids=groups,
        traffic_mode=params.get("NetworkInterfaceTrafficMode", "Standard"),
        queue_pair_number=integer(params, "QueuePairNumber", 0, 0, 1024),
        tags=tags(params),
        client_token=params.get("ClientToken", ""),
    )
    return _eni_body(eni)


def attach_network_interface(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    world.attach(
        required(params, "NetworkInterfaceId"),
        required(params, "InstanceId"),
        integer(params, "NetworkCardIndex", 0, 0, 64),
    )
    return {}


def detach_network_interface(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    world.detach(required(params, "NetworkInterfaceId"), required(params, "InstanceId"))
    return {}


def delete_network_interface(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    world.delete(required(params, "NetworkInterfaceId"))
    return {}


def modify_network_interface_attribute(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    eni_id = required(params, "NetworkInterfaceId")
    mode = params.get("NetworkInterfaceTrafficConfig.NetworkInterfaceTrafficMode")
    if mode is not None and world.traffic_config_refusal is not None:
        raise world.traffic_config_refusal
    if mode is not None:
        qp = integer(params, "NetworkInterfaceTrafficConfig.QueuePairNumber", 0, 0, 1024)
        world.set_traffic_mode(eni_id, mode, qp)
    else:
        world.eni(eni_id)
    return {}


def tag_resources(world: EcsWorld, params: Params) -> Body:
    check_region(world, params)
    kind = required(params, "ResourceType")
    if kind.lower() != "eni":
        raise EcsApiError(
            "InvalidResourceType.NotSupported",
            f"ResourceType {kind!r} is not supported here; the emulator tags 'eni' only.",
        )
    ids = at_most("ResourceId", repeated(params, "ResourceId"), 50)
    if not ids:
        required(params, "ResourceId.1")
    new = tags(params)
    if not new:
        required(params, "Tag.1.Key")
    world.tag(ids, new)
    return {}


ACTIONS: dict[str, Callable[[EcsWorld, Params], Body]] = {
    "DescribeInstances": describe_instances,
    "DescribeInstanceTypes": describe_instance_types,
    "DescribeInstanceAttribute": describe_instance_attribute,
    "DescribeNetworkInterfaces": describe_network_interfaces,
    "CreateNetworkInterface": create_network_interface,
    "AttachNetworkInterface": attach_network_interface,
    "DetachNetworkInterface": detach_network_interface,
    "DeleteNetworkInterface": delete_network_interface,
    "ModifyNetworkInterfaceAttribute": modify_network_interface_attribute,
    "TagResources": tag_resources,
}
