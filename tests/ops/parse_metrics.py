#!/usr/bin/env python3
"""Parses Prometheus text from stdin with the reference parser (prometheus_client) and
prints every sample as JSON: [{"family", "type", "name", "labels", "value"}, ...].
Exits non-zero (and the test fails) when the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

out = []
for fam in text_string_to_metric_families(sys.stdin.read()):
    for s in fam.samples:
        out.append({"family": fam.name, "type": fam.type, "name": s.name,
                    "labels": s.labels, "value": s.value})
json.dump(out, sys.stdout)
