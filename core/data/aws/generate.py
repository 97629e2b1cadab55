#!/usr/bin/env python3
"""Regenerates the regional tables of core/data/aws from public data.

    python3 core/data/aws/generate.py [--libcloud pricing.json] [--moto moto/]

on-demand-prices.csv
    us-east-1 rows are kept as they are: upstream Karpenter's static fallback table, generated
    from the AWS Pricing API. Every other commercial region is derived from the regional list
    prices in apache-libcloud's `libcloud/data/pricing.json` (scraped from AWS's public price
    list), which are noisy: for some sizes they hold another SKU's price, a few percent off, or
    0. So a region's price of a type is its us-east-1 price times its family's ratio in that
    region, the ratio being the one most sizes of the family agree on (libcloud's regional
    price over upstream's us-east-1 price, grouped to 3 decimals; ties go to the lower group;
    the group's median ratio is used). A family
    libcloud does not list in a region gets no price there, as a type EC2 does not sell there.

offerings.csv
    Which types each zone offers, for every region moto's DescribeInstanceTypeOfferings data
    covers, one row per (region, type) with the zones' suffixes joined by `|`.

Without --libcloud, apache-libcloud==3.9.1 is fetched with pip into a temporary directory;
without --moto, the installed moto package is read.
"""

import argparse
import collections
import csv
import gzip
import json
import os
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
LIBCLOUD = "apache-libcloud==3.9.1"
ANCHOR = "us-east-1"


def libcloud_prices(path):
    if path:
        with open(path) as f:
            return json.load(f)["compute"]["ec2_linux"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", tmp, LIBCLOUD],
            check=True,
        )
        wheel = next(os.path.join(tmp, f) for f in os.listdir(tmp) if f.endswith(".whl"))
        with zipfile.ZipFile(wheel) as z:
            return json.loads(z.read("libcloud/data/pricing.json"))["compute"]["ec2_linux"]


def commercial(region):
    return not region.startswith(("us-gov-", "cn-")) and region.count("-") == 2


def family(instance_type):
    return instance_type.split(".", 1)[0]


def regional_prices(anchor, libcloud):
    """region -> type -> price, for every commercial region but the anchor's."""
    ratios = collections.defaultdict(lambda: collections.defaultdict(list))
    for name, by_region in libcloud.items():
        base = anchor.get(name)
        if not base:
            continue
        for region, price in by_region.items():
            if region != ANCHOR and commercial(region) and price and price > 0:
                ratios[region][family(name)].append(price / base)
    out = {}
    for region, families in ratios.items():
        chosen = {}
        for fam, values in families.items():
            clusters = collections.defaultdict(list)
            for value in values:
                clusters[round(value, 3)].append(value)
            best = max(len(c) for c in clusters.values())
            cluster = sorted(clusters[min(k for k, c in clusters.items() if len(c) == best)])
            chosen[fam] = cluster[(len(cluster) - 1) // 2]
        out[region] = {
            name: round(price * chosen[family(name)], 6)
            for name, price in anchor.items()
            if family(name) in chosen
        }
    return out


def write_prices(anchor, regions):
    path = os.path.join(HERE, "on-demand-prices.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["region", "instance_type", "usd_per_hour"])
        for name in sorted(anchor):
            w.writerow([ANCHOR, name, f"{anchor[name]:.6f}"])
        for region in sorted(regions):
            for name in sorted(regions[region]):
                w.writerow([region, name, f"{regions[region][name]:.6f}"])


def write_offerings(moto_dir):
    folder = os.path.join(moto_dir, "ec2", "resources", "instance_type_offerings", "availability-zone")
    path = os.path.join(HERE, "offerings.csv")
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["region", "instance_type", "zones"])
        for file in sorted(os.listdir(folder)):
            region = file.removesuffix(".json.gz")
            with gzip.open(os.path.join(folder, file)) as g:
                rows = json.load(g)
            zones = collections.defaultdict(set)
            for row in rows:
                zone = row["Location"]
                if not zone.startswith(region):
                    sys.exit(f"{file}: zone {zone} is not in {region}")
                zones[row["InstanceType"]].add(zone[len(region):])
            for name in sorted(zones):
                w.writerow([region, name, "|".join(sorted(zones[name]))])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--libcloud", help="libcloud/data/pricing.json")
    parser.add_argument("--moto", help="the moto package's directory")
    args = parser.parse_args()
    with open(os.path.join(HERE, "on-demand-prices.csv")) as f:
        anchor = {
            r["instance_type"]: float(r["usd_per_hour"])
            for r in csv.DictReader(f)
            if r["region"] == ANCHOR
        }
    regions = regional_prices(anchor, libcloud_prices(args.libcloud))
    write_prices(anchor, regions)
    moto_dir = args.moto
    if not moto_dir:
        import moto

        moto_dir = os.path.dirname(moto.__file__)
    write_offerings(moto_dir)
    print(f"{len(anchor)} types in {ANCHOR}; {len(regions)} more regions priced")


if __name__ == "__main__":
    main()
