#!/usr/bin/env python3
"""Test vectors for the safetensors reader: small shards, each with the verdict
of the reference reader (the `safetensors` package from PyPI, version recorded
in vectors.json). test_safetensors.c checks that dsv4i_st_open accepts exactly
the accepted ones (except the refusals listed there on purpose).
Regenerate: python3 -m venv v && v/bin/pip install safetensors && v/bin/python generate.py
"""
import base64, json, struct, sys
import safetensors
from safetensors import deserialize


def entry(dt, shape, offs):
    return '{"dtype":"%s","shape":%s,"data_offsets":%s}' % (dt, json.dumps(shape), json.dumps(offs))


def hdr(**tensors):
    return '{' + ','.join('"%s":%s' % (k, v) for k, v in tensors.items()) + '}'


def shard(header, payload, pad_to=None):
    h = header.encode() if isinstance(header, str) else header
    if pad_to:
        h += b' ' * ((-(8 + len(h))) % pad_to)
    return struct.pack('<Q', len(h)) + h + payload


E = entry
CASES = [
    # alignment: the reference reader requires none
    ("aligned_padded", shard(hdr(a=E("F32", [2], [0, 8])), b'\1' * 8, pad_to=8)),
    ("odd_header_unpadded", shard(hdr(a=E("F32", [2], [0, 8])) + ' ', b'\1' * 8)),
    ("f32_after_i8", shard(hdr(a=E("I8", [1], [0, 1]), b=E("F32", [1], [1, 5])), b'\2' * 5, pad_to=8)),
    ("bf16_at_odd", shard(hdr(a=E("I8", [3], [0, 3]), b=E("BF16", [2], [3, 7]), c=E("I64", [1], [7, 15])),
                         b'\3' * 15)),
    ("mixed_unaligned", shard(hdr(x=E("F8_E4M3", [5], [0, 5]), y=E("I32", [2, 2], [5, 21]),
                                  z=E("F16", [3], [21, 27]), w=E("F8_E8M0", [1], [27, 28])), b'\4' * 28)),
    # coverage: the tensors must tile the data area exactly
    ("gap_between", shard(hdr(a=E("I8", [1], [0, 1]), b=E("I8", [1], [2, 3])), b'\0' * 3)),
    ("gap_at_start", shard(hdr(a=E("I8", [1], [1, 2])), b'\0' * 2)),
    ("bytes_after_last", shard(hdr(a=E("I8", [1], [0, 1])), b'\0' * 2)),
    ("bytes_no_tensors", shard('{}', b'\0')),
    ("overlap", shard(hdr(a=E("I8", [2], [0, 2]), b=E("I8", [2], [1, 3])), b'\0' * 3)),
    ("same_range_twice", shard(hdr(a=E("I8", [2], [0, 2]), b=E("I8", [2], [0, 2])), b'\0' * 2)),
    ("empty_at_boundary", shard(hdr(a=E("I8", [1], [0, 1]), z=E("I8", [0], [1, 1]), b=E("I8", [1], [1, 2])),
                               b'\0' * 2)),
    ("empty_at_end", shard(hdr(a=E("I8", [1], [0, 1]), z=E("BF16", [0, 4], [1, 1])), b'\0')),
    ("empty_past_end", shard(hdr(a=E("I8", [1], [0, 1]), z=E("I8", [0], [5, 5])), b'\0')),
    ("empty_inside", shard(hdr(a=E("I8", [4], [0, 4]), z=E("I8", [0], [2, 2])), b'\0' * 4)),
    ("no_tensors", shard('{}', b'')),
    ("truncated_data", shard(hdr(a=E("F32", [2], [0, 8])), b'\0' * 4)),
    ("size_mismatch", shard(hdr(a=E("F32", [2], [0, 4])), b'\0' * 4)),
    ("reversed_offsets", shard(hdr(a=E("I8", [0], [4, 0])), b'\0' * 4)),
    # header text
    ("leading_space", shard(' ' + hdr(a=E("I8", [1], [0, 1])), b'\0')),
    ("trailing_spaces", shard(hdr(a=E("I8", [1], [0, 1])) + '      ', b'\0')),
    ("trailing_nul", shard(hdr(a=E("I8", [1], [0, 1])).encode() + b'\0', b'\0')),
    ("not_json", shard('{"a": nope}', b'')),
    ("empty_header", shard('', b'')),
    ("header_array", shard('[]', b'')),
    ("header_len_past_end", struct.pack('<Q', 100) + b'{}'),
    ("file_too_short", b'\2\0\0\0'),
    ("bad_utf8_name", shard(b'{"a\xff":' + E("I8", [1], [0, 1]).encode() + b'}', b'\0')),
    ("unicode_name", shard(hdr(**{"\u00e9": E("I8", [1], [0, 1])}), b'\0')),
    ("empty_name", shard('{"":' + E("I8", [1], [0, 1]) + '}', b'\0')),
    ("unknown_entry_key", shard('{"a":{"dtype":"I8","shape":[1],"data_offsets":[0,1],"x":[1]}}', b'\0')),
    ("entry_null", shard('{"a":null}', b'')),
    ("missing_dtype", shard('{"a":{"shape":[1],"data_offsets":[0,1]}}', b'\0')),
    ("shape_negative", shard(hdr(a=E("I8", [-1], [0, 0])), b'')),
    ("shape_real", shard('{"a":{"dtype":"I8","shape":[1.0],"data_offsets":[0,1]}}', b'\0')),
    ("offsets_three", shard(hdr(a=E("I8", [1], [0, 1, 2])), b'\0')),
    ("shape_overflow", shard(hdr(a=E("F32", [4294967296, 4294967296], [0, 0])), b'')),
    ("metadata", shard('{"__metadata__":{"format":"pt"},"a":' + E("I8", [1], [0, 1]) + '}', b'\0')),
    ("metadata_null", shard('{"__metadata__":null}', b'')),
    ("metadata_not_string", shard('{"__metadata__":{"n":1}}', b'')),
    ("metadata_array", shard('{"__metadata__":[]}', b'')),
    ("unknown_dtype", shard(hdr(a=E("F5", [1], [0, 1])), b'\0')),
    # accepted by the reference, refused by libdsv4 on purpose (test_safetensors.c lists why)
    ("dtype_u8", shard(hdr(a=E("U8", [2], [0, 2])), b'\0' * 2)),
    ("dtype_bool", shard(hdr(a=E("BOOL", [1], [0, 1])), b'\0')),
    ("dtype_f4", shard(hdr(a=E("F4", [2], [0, 1])), b'\0')),
    ("dims_9", shard(hdr(a=E("I8", [1] * 9, [0, 1])), b'\0')),
    ("duplicate_name_same_entry", shard('{"a":' + E("I8", [1], [0, 1]) + ',"a":' + E("I8", [1], [0, 1]) + '}',
                                        b'\0')),
    ("duplicate_metadata_key", shard('{"__metadata__":{"k":"a","k":"b"}}', b'')),
    # a duplicate the reference refuses too (the last entry leaves a gap)
    ("duplicate_name_gap", shard('{"a":' + E("I8", [1], [0, 1]) + ',"a":' + E("I8", [1], [1, 2]) + '}',
                                 b'\0' * 2)),
]


def main():
    out = []
    for name, data in CASES:
        try:
            deserialize(data)
            verdict, why = "accept", ""
        except Exception as e:  # the reference's SafetensorError
            verdict, why = "reject", str(e)
        out.append({"name": name, "reference": verdict, "reference_error": why,
                    "bytes_b64": base64.b64encode(data).decode()})
    doc = {"generator": "tests/data/safetensors-reference/generate.py",
           "reference": "safetensors %s (PyPI)" % safetensors.__version__, "vectors": out}
    json.dump(doc, sys.stdout, indent=1, ensure_ascii=True)
    sys.stdout.write("\n")


main()
