"""The ctypes structs have the C layout: every field's offset, and a size that
the C struct only ever grows past, as the C compiler sees dsv4.h (compiled here with cc)."""
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
        # Every mirrored field sits at the C offset. The structs are size-prefixed and
        # append-only: the C struct may have grown past the mirror (the library then
        # fills only the mirror's bytes), but never shrunk below it.
        for s in _ffi.STRUCTS:
            c = _ffi.C_NAMES[s]
            for f, _ in s._fields_:
                self.assertEqual(str(getattr(s, f).offset), want[f"{c}.{f}"], f"{c}.{f}")
            self.assertLessEqual(ctypes.sizeof(s), int(want[c]), c)
            if ctypes.sizeof(s) < int(want[c]):
                print(f"note: {c} has {int(want[c]) - ctypes.sizeof(s)} bytes of fields "
                      "the Python mirror does not name yet")

    def test_every_wrapped_function_is_exported(self):
        with open(os.path.join(SOURCE, "abi", "libdsv4.map")) as f:
            mapped = {w.strip().rstrip(";") for w in f if w.strip().startswith("dsv4_")}
        self.assertEqual(sorted(set(_ffi.SIGNATURES) - mapped), [])


if __name__ == "__main__":
    unittest.main()
