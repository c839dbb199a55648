#!/usr/bin/env python3
"""cudasim's preprocessor: rewrites each `kernel<T...><<<grid, block[, shmem[, stream]]>>>(args)`
of a .cu file into `cudasim_launch(grid, block, cudasim_bind([](auto... a) { kernel<T...>(a...); }, args), ...)`: the
arguments are evaluated at the launch, the kernel may run later (when its stream is waited for), so that a C++
compiler builds the file against cudasim.h. Usage: cu2cpp.py in.cu out.cpp"""
import sys


def split_top(s):
    """Splits s at commas outside brackets."""
    parts, depth, cur = [], 0, ''
    for ch in s:
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        if ch == ',' and depth == 0:
            parts.append(cur)
            cur = ''
        else:
            cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


def rewrite(src):
    out, pos = [], 0
    while True:
        i = src.find('<<<', pos)
        if i < 0:
            out.append(src[pos:])
            return ''.join(out)
        # the callee: an identifier, optionally followed by balanced <...> template arguments
        j = i
        if src[j - 1] == '>':
            depth = 0
            while True:
                j -= 1
                if src[j] == '>':
                    depth += 1
                elif src[j] == '<':
                    depth -= 1
                    if depth == 0:
                        break
        while j > 0 and (src[j - 1].isalnum() or src[j - 1] in '_:'):
            j -= 1
        callee = src[j:i]
        k = src.index('>>>', i)
        config = split_top(src[i + 3:k])
        # the call's arguments: balanced parentheses after >>>
        a = src.index('(', k)
        depth, b = 0, a
        while True:
            if src[b] == '(':
                depth += 1
            elif src[b] == ')':
                depth -= 1
                if depth == 0:
                    break
            b += 1
        args = src[a + 1:b]
        out.append(src[pos:j])
        out.append('cudasim_launch(dim3(%s), dim3(%s), cudasim_bind([](auto... a_) { %s(a_...); }%s)%s)'
                   % (config[0], config[1], callee, (', ' + args) if args.strip() else '',
                      ''.join(', ' + c for c in config[2:])))
        pos = b + 1


if __name__ == '__main__':
    with open(sys.argv[1]) as f:
        text = f.read()
    with open(sys.argv[2], 'w') as f:
        f.write('#line 1 "%s"\n' % sys.argv[1] + rewrite(text))
