#!/usr/bin/env python3
"""Checks that the op list, the public enum and docs/ADDING_AN_OP.md agree.

usage: check_op_list.py SOURCE_ROOT
- include/dtensor/ops.h gives every op an explicit value, 0, 1, 2, ... in order, and DT_OP_COUNT
  one past the last: appending an op never renumbers the ones before it;
- src/ops/op_list.h has one X(...) entry per enum value, each with as many fields as the format
  line in its header comment names;
- every X(...) entry, kernel slot line and DT_OP_<ENUM> = N line that docs/ADDING_AN_OP.md shows
  is in the code as written there, and the page's format line is the list's.
Prints one line per disagreement and exits 1 when there is any."""
import os
import re
import sys


def split_fields(text):
    """The top-level comma-separated fields of an X(...) argument list."""
    fields, depth, cur = [], 0, ''
    for ch in text:
        if ch in '([':
            depth += 1
        elif ch in ')]':
            depth -= 1
        if ch == ',' and depth == 0:
            fields.append(cur.strip())
            cur = ''
        else:
            cur += ch
    fields.append(cur.strip())
    return fields


def x_entries(text):
    """(the X(...) text with whitespace collapsed, its fields) of every entry in text."""
    flat = re.sub(r'\\\n', ' ', text)
    out = []
    for m in re.finditer(r'\bX\(([^()]*(?:\([^()]*\)[^()]*)*)\)', flat):
        inner = m.group(1)
        out.append(('X(' + ' '.join(inner.split()) + ')', split_fields(inner)))
    return out


def main():
    root = sys.argv[1]
    bad = []
    ops_h = open(os.path.join(root, 'include/dtensor/ops.h')).read()
    lst = open(os.path.join(root, 'src/ops/op_list.h')).read()
    doc = open(os.path.join(root, 'docs/ADDING_AN_OP.md')).read()

    body = re.search(r'typedef enum dt_op \{(.*?)\} dt_op;', ops_h, re.S)
    if not body:
        print('include/dtensor/ops.h: no typedef enum dt_op')
        return 1
    values = re.findall(r'DT_OP_(\w+)\s*=\s*(\d+)', body.group(1))
    names = [n for n, _ in values if n != 'COUNT']
    stated = [m.group(0) for m in re.finditer(r'DT_OP_\w+\s*(?:=\s*\d+)?\s*,?', body.group(1))]
    if len(stated) != len(values):
        bad.append('ops.h: an enum value of dt_op without an explicit number')
    for i, (n, v) in enumerate(values):
        want = i if n != 'COUNT' else len(names)
        if int(v) != want:
            bad.append('ops.h: DT_OP_%s = %s, expected %d (values run 0, 1, 2, ... in order)' %
                       (n, v, want))

    fmt = re.search(r'X\(ENUM, "name",[^)]*\)', lst)
    nfields = len(split_fields(fmt.group(0)[2:-1])) if fmt else 0
    if not fmt:
        bad.append('src/ops/op_list.h: no format line X(ENUM, "name", ...) in its comment')
    entries = [(t, f) for t, f in x_entries(lst) if not t.startswith('X(ENUM')]
    listed = set()
    for t, f in entries:
        if len(f) != nfields:
            bad.append('op_list.h: %s has %d fields, the format line names %d' % (t, len(f), nfields))
        listed.add(f[0])
    for n in sorted(set(names) - listed):
        bad.append('op_list.h: no entry for DT_OP_%s' % n)
    for n in sorted(listed - set(names)):
        bad.append('ops.h: no DT_OP_%s for the op list\'s entry' % n)

    code = {t for t, _ in entries}
    doc_fmt = re.search(r'`(X\(ENUM, "name",[^`]*\))`', doc)
    if not doc_fmt or not fmt or ' '.join(doc_fmt.group(1).split()) != ' '.join(fmt.group(0).split()):
        bad.append('ADDING_AN_OP.md: its format line is not the op list\'s (%s)' %
                   (fmt.group(0) if fmt else '?'))
    doc_x = [(t, f) for t, f in x_entries(doc) if not t.startswith('X(ENUM')]
    shown = [t for t, f in doc_x if re.fullmatch(r'[A-Z][A-Z0-9_]*', f[0])]
    slots = [t for t, f in doc_x if re.fullmatch(r'[a-z][a-z0-9_]*', f[0])]
    kernels = {t for t, _ in x_entries(open(os.path.join(root, 'src/ops/kernels.h')).read())}
    for t in slots:
        if t not in kernels:
            bad.append('ADDING_AN_OP.md: %s is not a slot of DT_KERNEL_SLOTS (src/ops/kernels.h)'
                       % t)
    if not shown:
        bad.append('ADDING_AN_OP.md: shows no entry of the list')
    for t in shown:
        if t not in code:
            bad.append('ADDING_AN_OP.md: %s is not an entry of src/ops/op_list.h' % t)
    for m in re.finditer(r'DT_OP_(\w+) = (\d+),', doc):
        if (m.group(1), m.group(2)) not in values:
            bad.append('ADDING_AN_OP.md: DT_OP_%s = %s is not in include/dtensor/ops.h' %
                       (m.group(1), m.group(2)))
    for b in bad:
        print(b)
    if bad:
        return 1
    print('%d ops, values 0..%d, %d fields each; ADDING_AN_OP.md shows %d entries of the list '
          'and %d kernel slots' % (len(names), len(names) - 1, nfields, len(shown), len(slots)))
    return 0


if __name__ == '__main__':
    sys.exit(main())
