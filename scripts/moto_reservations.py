"""EC2 capacity reservations for moto 5.2.1, which has none. Imported by moto_server.py.

- CreateCapacityReservation, DescribeCapacityReservations (ids, filters, MaxResults and
  NextToken) and CancelCapacityReservation, in AWS's documented request and response
  shapes. AvailableInstanceCount is counted from the instances running in a reservation,
  so a terminated instance gives its place back.
- Capacity Blocks cannot be made with CreateCapacityReservation (AWS sells them through
  PurchaseCapacityBlock): `POST /_karpenter/capacity-block` with
  `{"region", "instanceType", "availabilityZone", "count", "endDate" (epoch seconds),
  "tags": {k: v}}` makes one (ReservationType capacity-block, InstanceMatchCriteria
  targeted) and answers its id.
- CreateFleet launches into them as EC2 does: a launch template whose
  CapacityReservationSpecification targets a reservation by id launches only into it (the
  instance type and zone must match; a full reservation is the override's
  ReservationCapacityExceeded error, a missing one InvalidCapacityReservationId.NotFound);
  a Capacity Block also needs InstanceMarketOptions.MarketType capacity-block and the
  fleet's target capacity type `capacity-block`; an on-demand launch without a target
  lands in a matching `open` reservation with room unless the template's
  CapacityReservationPreference is `none`. Overrides are tried in priority order; each one
  that failed is listed in the answer's Errors, as EC2 lists them. Instances carry
  CapacityReservationId (and InstanceLifecycle capacity-block on a block).
"""

import datetime
import json
import secrets
import threading

import moto.ec2.models.fleets as fleets
import moto.ec2.responses as ec2_responses
import moto.ec2.responses.fleets as fleet_responses
from moto.core.responses import ActionResult
from moto.ec2.exceptions import EC2ClientError
from moto.ec2.models import ec2_backends
from werkzeug.wrappers import Response

_lock = threading.Lock()
_LIVE = ("pending", "running", "stopping", "stopped")


def _store(backend):
    store = getattr(backend, "_karpenter_reservations", None)
    if store is None:
        store = backend._karpenter_reservations = {}
    return store


def _in_use(backend, reservation_id):
    return sum(
        1
        for instance in backend.all_instances()
        if getattr(instance, "capacity_reservation_id", None) == reservation_id
        and instance._state.name in _LIVE
    )


def _now():
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


def _record(backend, reservation):
    """The reservation as DescribeCapacityReservations answers it."""
    out = dict(reservation)
    out["AvailableInstanceCount"] = max(
        0, out["TotalInstanceCount"] - _in_use(backend, out["CapacityReservationId"])
    )
    end = out.get("EndDate")
    if end is not None and end <= _now():
        out["State"] = "expired"
        out["AvailableInstanceCount"] = 0
    out["Tags"] = [{"Key": k, "Value": v} for k, v in sorted(out["Tags"].items())]
    return out


def _new(backend, instance_type, zone, count, platform, criteria, end, end_type, tags, kind):
    if not instance_type:
        raise EC2ClientError("MissingParameter", "The request must contain the parameter InstanceType")
    if not platform:
        raise EC2ClientError("MissingParameter", "The request must contain the parameter InstancePlatform")
    if not zone:
        raise EC2ClientError("MissingParameter", "The request must contain the parameter AvailabilityZone")
    zones = {z.name: z for z in backend.describe_availability_zones()}
    if zone not in zones:
        raise EC2ClientError("InvalidParameterValue", f"Invalid availability zone: [{zone}]")
    try:
        count = int(count)
    except (TypeError, ValueError):
        raise EC2ClientError("MissingParameter", "The request must contain the parameter InstanceCount")
    if count < 1:
        raise EC2ClientError("InvalidParameterValue", f"InstanceCount {count} must be at least 1")
    if criteria not in ("open", "targeted"):
        raise EC2ClientError("InvalidParameterValue", f"InstanceMatchCriteria {criteria!r}: open or targeted")
    if end_type == "limited" and end is None:
        raise EC2ClientError("InvalidParameterCombination", "EndDate is required when EndDateType is limited")
    reservation_id = "cr-" + secrets.token_hex(9)[:17]
    reservation = {
        "CapacityReservationId": reservation_id,
        "OwnerId": backend.account_id,
        "CapacityReservationArn": f"arn:aws:ec2:{backend.region_name}:{backend.account_id}:capacity-reservation/{reservation_id}",
        "AvailabilityZoneId": zones[zone].zone_id,
        "InstanceType": instance_type,
        "InstancePlatform": platform,
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": count,
        "EbsOptimized": False,
        "EphemeralStorage": False,
        "State": "active",
        "StartDate": _now(),
        "EndDateType": end_type,
        "InstanceMatchCriteria": criteria,
        "CreateDate": _now(),
        "Tags": dict(tags),
        "ReservationType": kind,
        "DeliveryPreference": "fixed",
    }
    if end is not None:
        reservation["EndDate"] = end
    with _lock:
        _store(backend)[reservation_id] = reservation
    return reservation


def _tags_of(specifications):
    tags = {}
    for spec in specifications or []:
        if spec.get("ResourceType") == "capacity-reservation":
            for tag in spec.get("Tags") or []:
                tags[tag["Key"]] = tag.get("Value", "")
    return tags


def create_capacity_reservation(self):
    self.error_on_dryrun()
    end = self._get_param("EndDate")
    if isinstance(end, str):
        end = datetime.datetime.fromisoformat(end.replace("Z", "+00:00"))
    reservation = _new(
        self.ec2_backend,
        self._get_param("InstanceType"),
        self._get_param("AvailabilityZone"),
        self._get_param("InstanceCount"),
        self._get_param("InstancePlatform"),
        self._get_param("InstanceMatchCriteria") or "open",
        end,
        self._get_param("EndDateType") or ("limited" if end else "unlimited"),
        _tags_of(self._get_param("TagSpecifications", [])),
        "default",
    )
    return ActionResult({"CapacityReservation": _record(self.ec2_backend, reservation)})


_FILTERS = {
    "instance-type": "InstanceType",
    "owner-id": "OwnerId",
    "availability-zone": "AvailabilityZone",
    "instance-platform": "InstancePlatform",
    "tenancy": "Tenancy",
    "state": "State",
    "end-date-type": "EndDateType",
    "instance-match-criteria": "InstanceMatchCriteria",
    "reservation-type": "ReservationType",
}


def _matches(record, filters):
    tags = {t["Key"]: t["Value"] for t in record["Tags"]}
    for name, values in filters.items():
        if name.startswith("tag:"):
            if tags.get(name[4:]) not in values:
                return False
        elif name == "tag-key":
            if not any(v in tags for v in values):
                return False
        elif name in _FILTERS:
            if str(record.get(_FILTERS[name])) not in values:
                return False
        else:
            raise EC2ClientError("InvalidParameterValue", f"The filter '{name}' is invalid")
    return True


def describe_capacity_reservations(self):
    self.error_on_dryrun()
    backend = self.ec2_backend
    ids = self._get_param("CapacityReservationIds", [])
    filters = self._filters_from_querystring()
    with _lock:
        store = dict(_store(backend))
    for wanted in ids:
        if wanted not in store:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{wanted}' does not exist",
            )
    chosen = [store[i] for i in ids] if ids else [store[k] for k in sorted(store)]
    records = [r for r in (_record(backend, c) for c in chosen) if _matches(r, filters)]
    max_results = self._get_param("MaxResults")
    start = 0
    token = self._get_param("NextToken")
    if token:
        try:
            start = int(token.split(":", 1)[1])
        except (IndexError, ValueError):
            raise EC2ClientError("InvalidParameterValue", "NextToken is not one this API gave")
    answer = {"CapacityReservations": records[start:]}
    if max_results is not None:
        max_results = int(max_results)
        if ids:
            raise EC2ClientError("InvalidParameterCombination", "MaxResults cannot be used with CapacityReservationIds")
        if not 1 <= max_results <= 1000:
            raise EC2ClientError("InvalidParameterValue", "MaxResults must be between 1 and 1000")
        answer["CapacityReservations"] = records[start:start + max_results]
        if start + max_results < len(records):
            answer["NextToken"] = f"page:{start + max_results}"
    return ActionResult(answer)


def cancel_capacity_reservation(self):
    self.error_on_dryrun()
    wanted = self._get_param("CapacityReservationId")
    with _lock:
        reservation = _store(self.ec2_backend).get(wanted)
        if reservation is None:
            raise EC2ClientError(
                "InvalidCapacityReservationId.NotFound",
                f"The capacity reservation ID '{wanted}' does not exist",
            )
        reservation["State"] = "cancelled"
        reservation["TotalInstanceCount"] = 0
    return ActionResult({"Return": True})


for _handler in (create_capacity_reservation, describe_capacity_reservations, cancel_capacity_reservation):
    setattr(ec2_responses.EC2Response, _handler.__name__, _handler)


def capacity_block_hook(request):
    """`POST /_karpenter/capacity-block`: a Capacity Block, as PurchaseCapacityBlock makes."""
    try:
        body = json.loads(request.get_data() or b"{}")
        region = body["region"]
        backend = ec2_backends[body.get("account", "123456789012")][region]
        end = datetime.datetime.fromtimestamp(int(body["endDate"]), datetime.timezone.utc)
        reservation = _new(
            backend, body["instanceType"], body["availabilityZone"], body["count"], "Linux/UNIX",
            "targeted", end, "limited", body.get("tags") or {}, "capacity-block",
        )
    except (KeyError, ValueError, TypeError) as e:
        return Response(json.dumps({"error": f"bad request: {e}"}), status=400, content_type="application/json")
    except EC2ClientError as e:
        return Response(json.dumps({"error": str(e)}), status=400, content_type="application/json")
    return Response(json.dumps({"id": reservation["CapacityReservationId"]}), content_type="application/json")


def _template_data(backend, spec):
    lt = spec.launch_template_spec or {}
    template = backend.launch_templates.get(lt.get("LaunchTemplateId")) if lt.get("LaunchTemplateId") else None
    if template is None:
        return {}
    return template.get_version(lt.get("Version") or template.default_version_number).data or {}


def _zone_of(backend, spec):
    if spec.overrides and spec.overrides.get("AvailabilityZone"):
        return spec.overrides["AvailabilityZone"]
    if spec.subnet_id:
        return backend.get_subnet(spec.subnet_id).availability_zone
    return None


def _placement(backend, spec, target):
    """(reservation or None, error code, message) for one override."""
    data = _template_data(backend, spec)
    capacity = data.get("CapacityReservationSpecification") or {}
    wanted = (capacity.get("CapacityReservationTarget") or {}).get("CapacityReservationId")
    market = (data.get("InstanceMarketOptions") or {}).get("MarketType")
    zone = _zone_of(backend, spec)
    store = _store(backend)
    if wanted:
        reservation = store.get(wanted)
        if reservation is None:
            return None, "InvalidCapacityReservationId.NotFound", f"The capacity reservation ID '{wanted}' does not exist"
        record = _record(backend, reservation)
        block = reservation["ReservationType"] == "capacity-block"
        if block != (market == "capacity-block") or block != (target == "capacity-block"):
            return None, "InvalidParameterCombination", (
                f"Capacity Block {wanted} needs InstanceMarketOptions.MarketType capacity-block and the target capacity type capacity-block"
                if block else f"{wanted} is not a Capacity Block")
        if record["InstanceType"] != spec.instance_type or record["AvailabilityZone"] != zone:
            return None, "InvalidParameterValue", (
                f"The instance type {spec.instance_type} in {zone} does not match capacity reservation {wanted} "
                f"({record['InstanceType']} in {record['AvailabilityZone']})")
        if record["State"] != "active" or record["AvailableInstanceCount"] < 1:
            return None, "ReservationCapacityExceeded", f"Insufficient capacity in the Capacity Reservation {wanted}"
        return reservation, None, None
    if target == "capacity-block":
        return None, "InvalidParameterCombination", "a capacity-block fleet needs a launch template that targets a Capacity Block"
    if capacity.get("CapacityReservationPreference") != "none":
        for reservation in store.values():
            if (reservation["InstanceMatchCriteria"] != "open"
                    or reservation["ReservationType"] != "default"
                    or reservation["InstanceType"] != spec.instance_type
                    or reservation["AvailabilityZone"] != zone):
                continue
            record = _record(backend, reservation)
            if record["State"] == "active" and record["AvailableInstanceCount"] > 0:
                return reservation, None, None
    return None, None, None


def _uses_reservations(fleet):
    target = fleet.target_capacity_specification.get("DefaultTargetCapacityType")
    return target == "capacity-block" or bool(_store(fleet.ec2_backend))


_original_on_demand = fleets.Fleet.create_on_demand_requests


def _on_demand(self, weight_to_add):
    if not _uses_reservations(self):
        return _original_on_demand(self, weight_to_add)
    backend = self.ec2_backend
    target = self.target_capacity_specification.get("DefaultTargetCapacityType") or "on-demand"
    specs = sorted(
        self.launch_specs,
        key=lambda s: float((s.overrides or {}).get("Priority", 0) or 0),
    )
    errors = getattr(self, "_karpenter_errors", [])
    for _ in range(int(weight_to_add)):
        with _lock:
            chosen = None
            for spec in specs:
                reservation, code, message = _placement(backend, spec, target)
                if code:
                    errors.append((spec, code, message))
                    continue
                chosen = (spec, reservation)
                break
            if chosen is None:
                break
            spec, reservation = chosen
            launched = backend.run_instances(
                image_id=spec.image_id,
                count=1,
                instance_type=spec.instance_type,
                is_instance_type_default=False,
                key_name=spec.key_name,
                security_group_names=spec.group_set,
                user_data=spec.user_data,
                placement=None,
                kernel_id=None,
                ramdisk_id=None,
                monitoring_enabled=spec.monitoring,
                subnet_id=spec.subnet_id,
                fleet_id=self.id,
                tags=spec.tag_specifications,
            )
            for instance in launched.instances:
                if reservation is not None:
                    instance.capacity_reservation_id = reservation["CapacityReservationId"]
                    if reservation["ReservationType"] == "capacity-block":
                        instance.instance_lifecycle = "capacity-block"
                self.on_demand_instances.append({"id": launched.id, "instance": instance, "launch_spec": spec})
            self.fulfilled_capacity += spec.weighted_capacity
    self._karpenter_errors = errors


fleets.Fleet.create_on_demand_requests = _on_demand

_original_fleet_init = fleets.Fleet.__init__


def _fleet_init(self, *args, **kwargs):
    _original_fleet_init(self, *args, **kwargs)
    target = self.target_capacity_specification.get("DefaultTargetCapacityType")
    remaining = self.target_capacity - self.fulfilled_capacity
    if target == "capacity-block" and remaining > 0:
        self.create_on_demand_requests(remaining)


fleets.Fleet.__init__ = _fleet_init

_original_create_fleet = fleet_responses.Fleets.create_fleet


def _create_fleet(self):
    answer = _original_create_fleet(self)
    result = answer.result
    fleet = self.ec2_backend.get_fleet(result.get("FleetId")) if isinstance(result, dict) else None
    failed = getattr(fleet, "_karpenter_errors", None) if fleet else None
    if failed:
        result["Errors"] = [
            {
                "LaunchTemplateAndOverrides": {
                    "LaunchTemplateSpecification": spec.launch_template_spec,
                    "Overrides": {k: v for k, v in (
                        ("InstanceType", spec.instance_type),
                        ("SubnetId", spec.subnet_id),
                        ("AvailabilityZone", _zone_of(self.ec2_backend, spec)),
                    ) if v},
                },
                "Lifecycle": "on-demand",
                "ErrorCode": code,
                "ErrorMessage": message,
            }
            for spec, code, message in failed
        ]
    return answer


fleet_responses.Fleets.create_fleet = _create_fleet
