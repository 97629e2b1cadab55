"""moto's server, made to do what EC2 does where the project depends on it.

    python3 scripts/moto_server.py -H 127.0.0.1 -p 5000

Same arguments as `moto_server`. What it changes (moto 5.2.1):

- CreateFleet puts the launch template's security groups on the instances it launches
  (`SecurityGroupIds`, or the groups of the template's first network interface), as EC2
  does. moto leaves them off and attaches the default VPC's `default` group, so every node
  would look drifted (SecurityGroupDrift) to the first drift check.
- The AWS Price List Query API's GetProducts (moto has no Pricing service): EC2 products
  with AWS's item shape (product attributes, OnDemand terms with price dimensions), filtered
  by TERM_MATCH on any attribute, paginated by MaxResults/NextToken. Linux, shared-tenancy
  (dedicated for bare metal), capacity status `Used` items carry the prices; beside each one
  stand items filters must leave out (Windows, unused capacity reservations, dedicated
  tenancy, RHEL with its licence added). Prices come from the CSV named by
  MOTO_PRICING_CSV (region,instance_type,usd_per_hour) and from
  `POST /_karpenter/pricing` (`{"region": R, "prices": {type: usd} | null}`, null goes back
  to the CSV's; `{"fail": CODE | null}` makes every GetProducts fail with CODE), which
  `/moto-api/reset` undoes.
- EC2 capacity reservations and Capacity Blocks, and CreateFleet launching into them
  (moto_reservations.py beside this file says what is served).
- S3 checks the checksum a PutObject or UploadPart gives (`Content-MD5`,
  `x-amz-checksum-sha256`, `-sha1` or `-crc32`, as a header or an aws-chunked trailer)
  against the body it received and refuses a mismatch with 400 `BadDigest`, keeping
  nothing, as S3 does; moto stores the object whatever its body. (`-crc32c` and
  `-crc64nvme` are not checked.)
"""

import base64
import csv
import hashlib
import io
import json
import os
import sys
import threading
import zlib

import moto.ec2.models.fleets as fleets
import moto_reservations
import moto.server as server
from moto.server import main
from werkzeug.wrappers import Request, Response

_current = threading.local()


def _template_groups(template_id, version):
    backend = getattr(_current, "backend", None)
    template = backend.launch_templates.get(template_id) if backend else None
    if template is None:
        return []
    data = template.get_version(version or template.default_version_number).data
    groups = list(data.get("SecurityGroupIds") or [])
    if not groups:
        interfaces = data.get("NetworkInterfaces") or []
        if interfaces:
            groups = list(interfaces[0].get("Groups") or [])
    return groups


class _LaunchSpec(fleets.SpotFleetLaunchSpec):
    def __init__(self, **kwargs):
        spec = kwargs.get("launch_template_spec") or {}
        if not kwargs.get("group_set") and spec.get("LaunchTemplateId"):
            kwargs["group_set"] = _template_groups(spec["LaunchTemplateId"], spec.get("Version"))
        super().__init__(**kwargs)


_fleet_init = fleets.Fleet.__init__


def _init_fleet(self, ec2_backend, *args, **kwargs):
    _current.backend = ec2_backend
    try:
        _fleet_init(self, ec2_backend, *args, **kwargs)
    finally:
        _current.backend = None


fleets.SpotFleetLaunchSpec = _LaunchSpec
fleets.Fleet.__init__ = _init_fleet

_pricing_lock = threading.Lock()
_base_prices = {}
_override_prices = {}
_pricing_failure = [None]


def _load_prices():
    path = os.environ.get("MOTO_PRICING_CSV")
    if not path:
        return
    with open(path) as f:
        for row in csv.DictReader(f):
            _base_prices.setdefault(row["region"], {})[row["instance_type"]] = row["usd_per_hour"]


def _prices(region):
    with _pricing_lock:
        if region in _override_prices:
            return dict(_override_prices[region])
        return dict(_base_prices.get(region, {}))


def _price_item(region, instance_type, usd, **overrides):
    metal = "metal" in instance_type
    attributes = {
        "servicecode": "AmazonEC2",
        "regionCode": region,
        "instanceType": instance_type,
        "instanceFamily": "General purpose",
        "operatingSystem": "Linux",
        "tenancy": "Dedicated" if metal else "Shared",
        "preInstalledSw": "NA",
        "licenseModel": "No License required",
        "capacitystatus": "Used",
        "marketoption": "OnDemand",
        "operation": "RunInstances",
        "usagetype": f"BoxUsage:{instance_type}",
    }
    attributes.update(overrides)
    family = "Compute Instance (bare metal)" if metal else "Compute Instance"
    key = json.dumps([region, instance_type, sorted(overrides.items())])
    sku = hashlib.sha1(key.encode()).hexdigest()[:16].upper()
    term = f"{sku}.JRTCKXETXF"
    return json.dumps({
        "product": {"productFamily": family, "attributes": attributes, "sku": sku},
        "serviceCode": "AmazonEC2",
        "terms": {"OnDemand": {term: {
            "priceDimensions": {f"{term}.6YS6EN2CT7": {
                "unit": "Hrs", "endRange": "Inf", "beginRange": "0", "appliesTo": [],
                "rateCode": f"{term}.6YS6EN2CT7",
                "description": f"${usd} per On Demand {attributes['operatingSystem']} {instance_type} Instance Hour",
                "pricePerUnit": {"USD": f"{float(usd):.10f}"},
            }},
            "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "offerTermCode": "JRTCKXETXF",
            "termAttributes": {},
        }}},
        "version": "20261101000000",
        "publicationDate": "2026-11-01T00:00:00Z",
    })


_product_cache = {}


def _products(region):
    """(filterable fields, item) of every EC2 product of the region, built once per price set."""
    prices = _prices(region)
    key = json.dumps(sorted(prices.items()))
    cached = _product_cache.get(region)
    if cached and cached[0] == key:
        return cached[1]
    out = []
    for instance_type, usd in sorted(prices.items()):
        usd = float(usd)
        dedicated = "Host" if "metal" in instance_type else "Dedicated"
        for item in (
            _price_item(region, instance_type, usd),
            _price_item(region, instance_type, usd * 1.8, operatingSystem="Windows", licenseModel="License Included"),
            _price_item(region, instance_type, usd, capacitystatus="UnusedCapacityReservation"),
            _price_item(region, instance_type, usd * 1.1, tenancy=dedicated),
            _price_item(region, instance_type, usd + 0.06, operatingSystem="RHEL", licenseModel="License Included"),
        ):
            doc = json.loads(item)
            fields = dict(doc["product"]["attributes"])
            fields["productFamily"] = doc["product"]["productFamily"]
            fields["serviceCode"] = doc["serviceCode"]
            out.append((fields, item))
    _product_cache[region] = (key, out)
    return out


def _json_error(status, code, message):
    body = json.dumps({"__type": code, "message": message})
    return Response(body, status=status, content_type="application/x-amz-json-1.1",
                    headers={"x-amzn-ErrorType": code})


def _get_products(request):
    if _pricing_failure[0]:
        return _json_error(400, _pricing_failure[0], "injected by the test")
    try:
        body = json.loads(request.get_data() or b"{}")
    except ValueError:
        return _json_error(400, "SerializationException", "the request body is not JSON")
    if body.get("ServiceCode") != "AmazonEC2":
        return _json_error(400, "InvalidParameterException", "ServiceCode: only AmazonEC2 is served")
    filters = body.get("Filters") or []
    region = None
    for f in filters:
        if f.get("Type") != "TERM_MATCH" or "Field" not in f or "Value" not in f:
            return _json_error(400, "InvalidParameterException", f"Filters: {f} is not a TERM_MATCH filter")
        if f["Field"] == "regionCode":
            region = f["Value"]
    if region is None:
        return _json_error(400, "InvalidParameterException", "Filters: a regionCode filter is needed here")
    max_results = int(body.get("MaxResults") or 100)
    if not 1 <= max_results <= 100:
        return _json_error(400, "InvalidParameterException", "MaxResults must be between 1 and 100")
    selected = [
        item for fields, item in _products(region)
        if all(fields.get(f["Field"]) == f["Value"] for f in filters)
    ]
    start = 0
    if body.get("NextToken"):
        try:
            start = int(body["NextToken"].split(":", 1)[1])
        except (IndexError, ValueError):
            return _json_error(400, "InvalidNextTokenException", "NextToken is not one this API gave")
    page = selected[start:start + max_results]
    answer = {"FormatVersion": "aws_v1", "PriceList": page}
    if start + max_results < len(selected):
        answer["NextToken"] = f"page:{start + max_results}"
    return Response(json.dumps(answer), content_type="application/x-amz-json-1.1")


def _pricing_hook(request):
    body = json.loads(request.get_data() or b"{}")
    with _pricing_lock:
        if "fail" in body:
            _pricing_failure[0] = body["fail"]
        if "region" in body:
            if body.get("prices") is None:
                _override_prices.pop(body["region"], None)
            else:
                _override_prices[body["region"]] = body["prices"]
    return Response("{}", content_type="application/json")


def _aws_chunked(body):
    """The payload and trailing headers of an aws-chunked body, or None if it is not one."""
    payload, at = bytearray(), 0
    while True:
        end = body.find(b"\r\n", at)
        if end < 0:
            return None
        try:
            size = int(body[at:end].split(b";", 1)[0], 16)
        except ValueError:
            return None
        at = end + 2
        if size == 0:
            break
        payload += body[at:at + size]
        at += size + 2
    trailers = {}
    for line in body[at:].split(b"\r\n"):
        if b":" in line:
            name, value = line.split(b":", 1)
            trailers[name.strip().lower().decode()] = value.strip().decode()
    return bytes(payload), trailers


_DIGESTS = {
    "x-amz-checksum-sha256": lambda b: base64.b64encode(hashlib.sha256(b).digest()).decode(),
    "x-amz-checksum-sha1": lambda b: base64.b64encode(hashlib.sha1(b).digest()).decode(),
    "x-amz-checksum-crc32": lambda b: base64.b64encode(zlib.crc32(b).to_bytes(4, "big")).decode(),
    "content-md5": lambda b: base64.b64encode(hashlib.md5(b).digest()).decode(),
}


def _s3_bad_digest(environ):
    """A 400 BadDigest response when an S3 upload's body does not match the checksum it
    gives; None otherwise. Leaves the body readable for moto."""
    if environ.get("REQUEST_METHOD") != "PUT" or "/s3/aws4_request" not in environ.get("HTTP_AUTHORIZATION", ""):
        return None
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    environ["wsgi.input"] = io.BytesIO(body)
    given = {"content-md5": environ.get("HTTP_CONTENT_MD5")}
    for name in _DIGESTS:
        if name.startswith("x-amz-"):
            given[name] = environ.get("HTTP_" + name.upper().replace("-", "_"))
    payload = body
    streaming = environ.get("HTTP_X_AMZ_CONTENT_SHA256", "").startswith("STREAMING-")
    if streaming or "aws-chunked" in environ.get("HTTP_CONTENT_ENCODING", ""):
        decoded = _aws_chunked(body)
        if decoded is None:
            return _s3_error(400, "IncompleteBody", "the aws-chunked body is cut short")
        payload, trailers = decoded
        for name, value in trailers.items():
            if name in _DIGESTS:
                given[name] = value
    for name, value in given.items():
        if value and _DIGESTS[name](payload) != value:
            return _s3_error(400, "BadDigest", f"the {name} you specified did not match the calculated checksum")
    return None


def _s3_error(status, code, message):
    body = f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}</Message></Error>'
    return Response(body, status=status, content_type="application/xml")


class _Dispatcher(server.DomainDispatcherApplication):
    def __call__(self, environ, start_response):
        target = environ.get("HTTP_X_AMZ_TARGET", "")
        path = environ.get("PATH_INFO", "")
        refused = _s3_bad_digest(environ)
        if refused is not None:
            return refused(environ, start_response)
        if target == "AWSPriceListService.GetProducts":
            return _get_products(Request(environ))(environ, start_response)
        if target.startswith("AWSPriceListService."):
            response = _json_error(400, "UnknownOperationException", f"{target} is not served here")
            return response(environ, start_response)
        if path == "/_karpenter/pricing" and environ.get("REQUEST_METHOD") == "POST":
            return _pricing_hook(Request(environ))(environ, start_response)
        if path == "/_karpenter/capacity-block" and environ.get("REQUEST_METHOD") == "POST":
            return moto_reservations.capacity_block_hook(Request(environ))(environ, start_response)
        if path == "/moto-api/reset":
            with _pricing_lock:
                _override_prices.clear()
                _pricing_failure[0] = None
        return super().__call__(environ, start_response)


_load_prices()
server.DomainDispatcherApplication = _Dispatcher

if __name__ == "__main__":
    main(sys.argv[1:])
