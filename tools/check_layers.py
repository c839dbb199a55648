#!/usr/bin/env python3
"""Checks every #include "..." under src/ and include/dtensor/ against src/layers.txt, and,
given a build directory, every symbol a layer's library uses from another layer's.

usage: check_layers.py SOURCE_ROOT [BUILD_DIR]
Prints one line per include or symbol that crosses the table and exits 1 when there is any;
prints what it checked otherwise. The symbol check reads each layer's static library
(BUILD_DIR/src/<layer>/libdt_<layer>.a) with nm: a call that reaches a higher layer through a
public header includes nothing it may not, but it does not link in the table's order."""
import os
import re
import subprocess
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


def object_layer(layer, obj):
    """The layer of an object of layer's library: a kernel object of ops is ops/cpu or
    ops/cuda (meson names it after its path under the library's folder)."""
    if layer == 'ops':
        for sub in ('cpu', 'cuda'):
            if obj.startswith(sub + '_'):
                return 'ops/' + sub
    return layer


def nm_symbols(lib):
    """{object: (defined symbols, undefined symbols)} of a static library."""
    out = subprocess.run(['nm', '-A', lib], check=True, capture_output=True, text=True).stdout
    objs = {}
    for line in out.splitlines():
        # lib.a:object.o:ADDRESS T name   or   lib.a:object.o:         U name
        head, _, rest = line.rpartition(':')
        obj = head.split(':', 1)[1] if ':' in head else head
        parts = rest.split()
        if len(parts) < 2:
            continue
        kind, name = parts[-2], parts[-1]
        d, u = objs.setdefault(obj, (set(), set()))
        if kind == 'U':
            u.add(name)
        elif kind in 'TDBRVWiGS':
            d.add(name)
    return objs


def check_symbols(build, allowed):
    """The lines for symbols a layer's objects use from a layer they may not include."""
    where, used = {}, []
    layers = [l for l in allowed if '/' not in l]
    for layer in layers:
        lib = os.path.join(build, 'src', layer, 'libdt_%s.a' % layer)
        if not os.path.exists(lib):
            return ['%s: missing (is %s a build directory of this tree?)' % (lib, build)], 0
        for obj, (defined, undefined) in nm_symbols(lib).items():
            ol = object_layer(layer, obj)
            for name in defined:
                where[name] = (ol, obj)
            used.append((ol, obj, undefined))
    bad, n = [], 0
    for ol, obj, undefined in used:
        may = allowed[ol] | {ol}
        # a kernel folder may use the code behind the single headers it may include
        may_objs = {h.split('/')[-1][:-2] + '.c.o' for h in may if h.endswith('.h')}
        for name in sorted(undefined):
            if name not in where:
                continue  # the C library, OpenBLAS, UCX, CUDA
            tl, tobj = where[name]
            n += 1
            if tl in may or any(tl.startswith(l + '/') for l in may) or tobj in may_objs:
                continue
            bad.append('%s (layer %s) uses %s of layer %s' % (obj, ol, name, tl))
    return bad, n


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
    nbad_inc = len(bad)
    nsym = None
    if len(sys.argv) > 2:
        sym_bad, nsym = check_symbols(os.path.abspath(sys.argv[2]), allowed)
        bad += sym_bad
    for b in bad:
        print(b)
    if bad:
        print('%d includes and %d symbol uses cross src/layers.txt' %
              (nbad_inc, len(bad) - nbad_inc))
        return 1
    print('%d files, %d includes%s: every one within src/layers.txt' %
          (files, incs, '' if nsym is None else ', %d uses of other layers\' symbols' % nsym))
    return 0


if __name__ == '__main__':
    sys.exit(main())
