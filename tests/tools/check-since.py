#!/usr/bin/env python3
"""The version script and the header agree: every function the header
declares (DSV4_API) is in abi/libdsv4.map and vice versa, and each sits in the
map node of the release its doc comment's @since names (DSV4_0.1 <-> @since 0.1).
Also: every function returning a dsv4_status is marked DSV4_NODISCARD.
usage: check-since.py HEADER MAP"""
import re
import sys


def header_since(path):
    text = open(path).read()
    out, errors = {}, []
    for m in re.finditer(r"DSV4_API\b[^;{]*?\b(dsv4_\w+)\s*\(", text):
        name = m.group(1)
        before = text[:m.start()]
        end = before.rfind("*/")
        start = before.rfind("/**", 0, end)
        gap = before[end + 2:] if end >= 0 else before
        if start < 0 or end < 0 or not re.fullmatch(r"\s*(DSV4_\w+(\(\"[^\"]*\"\))?\s*)*", gap):
            errors.append(f"{name}: no doc comment right before its declaration")
            continue
        since = re.findall(r"@since\s+(\d+\.\d+)", before[start:end])
        if len(since) != 1:
            errors.append(f"{name}: its doc comment has {len(since)} @since tags")
            continue
        out[name] = since[0]
    return out, errors


def unmarked_status_returns(path):
    """Functions declared to return dsv4_status without DSV4_NODISCARD on their line."""
    pat = r"(?m)^([^\n]*?)DSV4_API\s+dsv4_status\s+(dsv4_\w+)"
    return [m.group(2) for m in re.finditer(pat, open(path).read())
            if "DSV4_NODISCARD" not in m.group(1)]


def map_versions(path):
    text = re.sub(r"/\*.*?\*/", "", open(path).read(), flags=re.S)
    out = {}
    for node, body in re.findall(r"DSV4_(\d+\.\d+)\s*\{(.*?)\}", text, flags=re.S):
        glob = body.split("local:")[0]
        for name in re.findall(r"\b(dsv4_\w+)\s*;", glob):
            out[name] = node
    return out


def main():
    hdr, errors = header_since(sys.argv[1])
    mp = map_versions(sys.argv[2])
    for name in sorted(set(hdr) - set(mp)):
        errors.append(f"{name}: declared in the header, not in the map")
    for name in sorted(set(mp) - set(hdr)):
        errors.append(f"{name}: in the map, not declared in the header")
    for name in sorted(set(hdr) & set(mp)):
        if hdr[name] != mp[name]:
            errors.append(f"{name}: @since {hdr[name]} but in map node DSV4_{mp[name]}")
    for name in unmarked_status_returns(sys.argv[1]):
        errors.append(f"{name}: returns dsv4_status without DSV4_NODISCARD")
    for e in errors:
        print(e)
    print(f"{len(hdr)} declarations, {len(mp)} mapped symbols, {len(errors)} disagreements")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
