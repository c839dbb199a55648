#!/usr/bin/env python3
"""Checks every #include "..." under src/ and include/dtensor/ against src/layers.txt.

usage: check_layers.py SOURCE_ROOT
Prints one line per include that crosses the table and exits 1 when there is any; prints the
number of files and includes checked otherwise."""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def read_table(path):
    allowed, public = {}, {}
    for raw in open(path, encoding='utf-8'):
        line = raw.split('#', 1)[0].strip()
        if not line:
            continue
        head, _, rest = line.partition(':')
        words = rest.split()
        if head.startswith('public '):
            layer = head.split()[1]
            for h in words:
                public['dtensor/' + h] = layer
        else:
            allowed[head.strip()] = set(words)
    return allowed, public


def layer_of_src(rel, allowed):
    """The most specific layer a path under src/ belongs to (ops/cpu before ops)."""
    parts = rel.split('/')
    for n in range(len(parts) - 1, 0, -1):
        name = '/'.join(parts[:n])
        if name in allowed:
            return name
    return None


def target_layer(inc, here_dir, root, allowed, public):
    """(layer, header name as the table writes it) of an include, or (None, None) for a
    header outside src/ and include/dtensor/ (dt_config.h, cudasim's)."""
    for base in (here_dir, os.path.join(root, 'src')):
        path = os.path.normpath(os.path.join(base, inc))
        if os.path.exists(path) and path.startswith(os.path.join(root, 'src') + os.sep):
            rel = os.path.relpath(path, os.path.join(root, 'src'))
            return layer_of_src(rel, allowed), rel
    if inc in public:
        return public[inc], inc
    if inc == 'dtensor.h' or inc.startswith('dtensor/'):
        return 'unlisted', inc
    return None, None


def main():
    root = os.path.abspath(sys.argv[1])
    allowed, public = read_table(os.path.join(root, 'src', 'layers.txt'))
    bad, files, incs = [], 0, 0
    sources = []
    for d, _, names in os.walk(os.path.join(root, 'src')):
        for n in names:
            if n.endswith(('.c', '.h', '.cu', '.cuh')):
                path = os.path.join(d, n)
                rel = os.path.relpath(path, os.path.join(root, 'src'))
                sources.append((path, layer_of_src(rel, allowed), 'src/' + rel))
    pub_dir = os.path.join(root, 'include', 'dtensor')
    for n in os.listdir(pub_dir):
        if n.endswith('.h'):
            layer = public.get('dtensor/' + n)
            if layer is None:
                bad.append('include/dtensor/%s: not in src/layers.txt\'s public lines' % n)
            sources.append((os.path.join(pub_dir, n), layer, 'include/dtensor/' + n))
    for path, layer, shown in sorted(sources, key=lambda s: s[2]):
        if layer is None:
            bad.append('%s: in no layer of src/layers.txt' % shown)
            continue
        files += 1
        may = allowed[layer] | {layer}
        for lineno, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
            m = INCLUDE.match(line)
            if not m:
                continue
            incs += 1
            tl, name = target_layer(m.group(1), os.path.dirname(path), root, allowed, public)
            if tl is None:
                continue
            # a kernel folder lists single headers of ops it may see
            if tl in may or (name in may) or any(tl.startswith(l + '/') for l in may):
                continue
            bad.append('%s:%d: layer %s includes "%s" of layer %s' %
                       (shown, lineno, layer, m.group(1), tl))
    for b in bad:
        print(b)
    if bad:
        print('%d includes cross src/layers.txt' % len(bad))
        return 1
    print('%d files, %d includes: every one within src/layers.txt' % (files, incs))
    return 0


if __name__ == '__main__':
    sys.exit(main())
