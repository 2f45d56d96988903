"""The ctypes structs have the C layout: sizeof and every field's offset, as
the C compiler sees dsv4.h (compiled here with cc)."""
import ctypes
import os
import subprocess
import tempfile
import unittest

from common import BUILD, SOURCE

from dsv4 import _ffi


class Layout(unittest.TestCase):
    def test_structs_match_the_header(self):
        lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "dsv4/dsv4.h"',
                 'int main(void) {']
        for s in _ffi.STRUCTS:
            c = _ffi.C_NAMES[s]
            lines.append(f'  printf("{c} %zu\\n", sizeof({c}));')
            for f, _ in s._fields_:
                lines.append(f'  printf("{c}.{f} %zu\\n", offsetof({c}, {f}));')
        lines += ['  return 0;', '}']
        with tempfile.TemporaryDirectory() as d:
            src, exe = os.path.join(d, "layout.c"), os.path.join(d, "layout")
            with open(src, "w") as f:
                f.write("\n".join(lines))
            cc = os.environ.get("CC", "cc")
            subprocess.run([cc, "-std=c99", "-I", os.path.join(SOURCE, "include"), "-I",
                            os.path.join(BUILD, "include"), "-o", exe, src], check=True)
            want = dict(line.split() for line in
                        subprocess.run([exe], check=True, capture_output=True,
                                       text=True).stdout.splitlines())
        got = {}
        for s in _ffi.STRUCTS:
            c = _ffi.C_NAMES[s]
            got[c] = str(ctypes.sizeof(s))
            for f, _ in s._fields_:
                got[f"{c}.{f}"] = str(getattr(s, f).offset)
        self.assertEqual(got, want)

    def test_every_wrapped_function_is_exported(self):
        with open(os.path.join(SOURCE, "abi", "libdsv4.map")) as f:
            mapped = {w.strip().rstrip(";") for w in f if w.strip().startswith("dsv4_")}
        self.assertEqual(sorted(set(_ffi.SIGNATURES) - mapped), [])


if __name__ == "__main__":
    unittest.main()
