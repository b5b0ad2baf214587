#!/usr/bin/env python3
"""The phases of a kernel between its barriers (BAR), from profile.sh's KERNEL-sass.csv (Nsight
Compute's SASS page with stall samples): each phase's share of the samples, its top stall
reasons, and its instructions by opcode a pass (a phase's median count of executions an
instruction). Where a work-group runs alone on an SM, a phase that keeps the tensor cores idle
(decoding between barriers, say) shows here as samples without HMMA.
usage: phases.py KERNEL-sass.csv [MIN_SHARE_PERCENT]"""
import collections
import csv
import statistics
import sys


def opcode(source):
    words = source.split()
    if not words:
        return ''
    word = words[1] if words[0].startswith('@') and len(words) > 1 else words[0]
    return word.split('.')[0]


def main():
    path = sys.argv[1]
    min_share = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    rows = list(csv.reader(open(path, newline='')))
    header = rows[1]
    col = {name: i for i, name in enumerate(header)}
    stall_names = [h for h in header if h.startswith('stall_') and 'Not Issued' not in h]
    def phase_from(first):
        return {'ops': collections.Counter(), 'counts': [], 'stalls': collections.Counter(),
                'samples': 0, 'first': first}

    phases = [phase_from(0)]
    for line in rows[2:]:
        if len(line) < len(header):
            continue
        op = opcode(line[col['Source']].strip())
        if op == 'BAR':
            phases.append(phase_from(int(line[col['Address']], 16)))
        phase = phases[-1]
        executed = int(line[col['Instructions Executed']] or 0)
        phase['ops'][op] += executed
        if executed:
            phase['counts'].append(executed)
        phase['samples'] += int(line[col['Warp Stall Sampling (All Samples)']] or 0)
        for name in stall_names:
            phase['stalls'][name[len('stall_'):]] += int(line[col[name]] or 0)
    total = sum(p['samples'] for p in phases) or 1
    for i, p in enumerate(phases):
        share = 100.0 * p['samples'] / total
        if share < min_share or not p['counts']:
            continue
        passes = statistics.median(p['counts'])
        stalls = ' '.join(f'{k} {100.0 * v / total:.1f}' for k, v in p['stalls'].most_common(4))
        ops = ' '.join(f'{k} {v / passes:.0f}' for k, v in p['ops'].most_common(12))
        print(f'phase {i} (from {p["first"]:#x}): {share:.1f}% of samples ({stalls}); '
              f'{sum(p["ops"].values()) / passes:.0f} instructions a pass: {ops}')


if __name__ == '__main__':
    main()
