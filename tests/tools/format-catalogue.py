#!/usr/bin/env python3
"""Format the records of tu_catalogue() as docs/bad-inputs.md (see
bad-input-catalogue.sh). Paths become <tmp>, <fixtures>, <src>; the first
record of each (area, case) is kept; areas and cases keep the tests' order."""
import re
import sys

records, fixtures, src = sys.argv[1], sys.argv[2].rstrip('/'), sys.argv[3].rstrip('/')
STATUS = {}
for line in open(src + '/include/dsv4/dsv4.h', encoding='utf-8'):
    m = re.match(r'\s*(DSV4_[A-Z0-9_]+) = (-?\d+)', line)
    if m:
        STATUS.setdefault(int(m.group(2)), m.group(1))


def clean(msg):
    msg = msg.replace(fixtures, '<fixtures>').replace(src, '<src>')
    msg = re.sub(r'/tmp/dsv4-test-[A-Za-z0-9]+', '<tmp>', msg)
    return msg.replace('|', '\\|')


areas, seen = {}, set()
for line in open(records, encoding='utf-8', errors='replace'):
    area, case, status, msg = line.rstrip('\n').split('\t', 3)
    if (area, case) in seen:
        continue
    seen.add((area, case))
    areas.setdefault(area, []).append((case, STATUS.get(int(status), status), clean(msg)))

out = ['# Bad-input catalogue', '',
       'Every bad input the tests below feed the library, with the status and message it gets.',
       'Generated from the tests, never edited by hand: `tests/tools/bad-input-catalogue.sh SRC BUILD',
       '--write` runs test_safetensors, test_checkpoint, test_config, test_model_api, test_tokenizer,',
       'test_engine_guard and test_api_soak (400 calls, seed 1) with DSV4_CATALOGUE set; the unit test',
       '`bad_input_catalogue` fails when this file differs from what the tests produce. Paths: `<tmp>` a',
       'scratch directory, `<fixtures>` the golden fixtures, `<src>` the source tree.', '']
for area, rows in areas.items():
    out += ['## ' + area, '', '| case | status | message |', '|---|---|---|']
    out += ['| %s | %s | %s |' % (c, s, m) for c, s, m in rows]
    out.append('')
sys.stdout.write('\n'.join(out))
