"""moto's server, made to do what EC2 does where the project depends on it.

    python3 scripts/moto_server.py -H 127.0.0.1 -p 5000

Same arguments as `moto_server`. What it changes (moto 5.2.1):

- CreateFleet puts the launch template's security groups on the instances it launches
  (`SecurityGroupIds`, or the groups of the template's first network interface), as EC2
  does. moto leaves them off and attaches the default VPC's `default` group, so every node
  would look drifted (SecurityGroupDrift) to the first drift check.
"""

import sys
import threading

import moto.ec2.models.fleets as fleets
from moto.server import main

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

if __name__ == "__main__":
    main(sys.argv[1:])
