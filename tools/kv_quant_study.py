#!/usr/bin/env python3
"""Offline screening of turboquant_block key/value codings on a model's real rows (issue 12, q3).

Reads one window dumped by `build/bench/kv_rows_dump MODEL TEXT PREFIX` (PREFIX.{k,v,q}.f32 and
PREFIX.json), codes every head's keys and values with a numpy model of turboquant_block
(seeded Hadamard rotation, block-normalized Lloyd-Max levels, MSE clip search + least-squares
refit, f16 scales, mean smoothing on rows 1..256, segment key means, an f16 sink row) or a
variant, and compares causal attention over the coded rows with attention over the exact rows
for the queries of the scored half of the window:

  attn_kl     mean KL(p || p_hat) of the attention weights (the keys' share of the damage)
  out_relmse  sum ||o - o_hat||^2 / sum ||o||^2 of the attention outputs (keys and values)

These are proxies, not the model's KL: they ignore how errors propagate through the layers. They
rank configurations: on SmolLM2 they reproduce the order of every real `eval` it was checked
against (docs/frontier.md, "q3: query-aware key split"), including a variant that looks right on
paper and measured worse (channel scaling without segment means).

Variants of the key coding (--configs names, see CONFIGS):
  groups   the head's 64 channels split into groups by a calibrated per-channel weight
           w_c = E[q_c^2] E[(k_c - mu_c)^2] (queries of the GQA group on rows 0..511, keys on rows
           1..256), each group rotated by its own Hadamard transform and coded at its own width:
           the expected score error sum_c E[q_c^2] E[e_c^2] is then spent where queries look.
  chscale  SmoothQuant-style scaling s_c = (E[q_c^2] / E[(k_c - mu_c)^2])^(1/4) before the rotation.
  log16    one-byte block scales 2^(n/16) instead of f16 ones.

  python3 tools/kv_quant_study.py PREFIX [--layers 2,8,14,20,26] [--qstride 16] [--configs a,b] [--rd]
(numpy only; e.g. the /work/venv-hf interpreter)
"""
import argparse
import functools
import json
import time

import numpy as np

CLIP = np.array([0.40, 0.45, 0.50, 0.55, 0.60, 0.65, 0.70, 0.75, 0.80, 0.85, 0.90, 0.95, 1.00, 1.05])


def hadamard(n):
    h = np.array([[1.0]])
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return h


@functools.lru_cache(None)
def rotation(n, seed):
    """Pi = H D / sqrt(n), D a seeded +-1 diagonal (not the C++ seeds: a model, not a replica);
    a Haar rotation when n is not a power of two (core::Rotation has H_12/H_20 factors instead)."""
    rng = np.random.default_rng(seed)
    if n & (n - 1):
        qm, r = np.linalg.qr(rng.standard_normal((n, n)))
        return qm * np.sign(np.diag(r))[None, :]
    d = rng.choice([-1.0, 1.0], size=n)
    return hadamard(n) * d[None, :] / np.sqrt(n)


@functools.lru_cache(None)
def block_levels(bits, block):
    """Lloyd-Max levels of Gaussian blocks divided by their absmax, rounded to f16."""
    x = np.abs(np.random.default_rng(12345).standard_normal(((1 << 19) // block, block)))
    y = np.sort((x / x.max(1, keepdims=True)).ravel())
    half = max(1, (1 << bits) // 2)
    c = y[((np.arange(half) + 0.5) / half * len(y)).astype(int)]
    prefix = np.concatenate([[0], np.cumsum(y)])
    for _ in range(300):
        idx = np.concatenate([[0], np.searchsorted(y, 0.5 * (c[:-1] + c[1:]), 'right'), [len(y)]])
        n = idx[1:] - idx[:-1]
        new = np.where(n > 0, (prefix[idx[1:]] - prefix[idx[:-1]]) / np.maximum(n, 1), c)
        done = np.max(np.abs(new - c)) < 1e-9
        c = new
        if done:
            break
    return np.concatenate([-c[::-1], c]).astype(np.float16).astype(np.float64)


def round_scale(s, mode):
    if mode == 'f16':
        return np.asarray(s, np.float16).astype(np.float64)
    if mode == 'log16':  # one byte: 2^(n/16), range assumed wide enough
        return np.exp2(np.round(np.log2(np.maximum(s, 1e-30)) * 16) / 16)
    raise ValueError(mode)


def quant_blocks(x, bits, scale_mode):
    """Blocks x [N, n]: the decoded blocks after the clip-grid search and the refit."""
    lv = block_levels(bits, max(32, x.shape[1]))
    mids = (0.5 * (lv[:-1] + lv[1:])).astype(np.float32)
    amax = np.abs(x).max(1)
    amax = np.where(amax > 0, amax, 1e-12)

    def trial(s):
        c = ((x / s[:, None]).astype(np.float32)[..., None] > mids).sum(-1)
        xh = s[:, None] * lv[c]
        return c, xh, ((x - xh) ** 2).sum(1)

    best_err = np.full(x.shape[0], np.inf)
    best, codes = np.zeros_like(x), np.zeros(x.shape, np.int64)
    for g in CLIP:
        c, xh, e = trial(round_scale(amax / lv[-1] * g, scale_mode))
        m = e < best_err
        best_err[m], best[m], codes[m] = e[m], xh[m], c[m]
    l = lv[codes]
    xl, ll = (x * l).sum(1), (l * l).sum(1)
    _, xh, e = trial(round_scale(np.where((ll > 0) & (xl > 0), xl / np.maximum(ll, 1e-30), amax), scale_mode))
    m = e < best_err
    best[m] = xh[m]
    return best


def quant_rows(y, bits, block, scale_mode):
    out = np.empty_like(y)
    for j in range(0, y.shape[1], block):
        out[:, j:j + block] = quant_blocks(y[:, j:j + block], bits, scale_mode)
    return out


def code_centered(x, spec, seed):
    """Rows x [T, D] (mean already removed) coded as spec says; returns the decoded rows."""
    scale = spec.get('scale', 'f16')
    if 'chscale' in spec:
        s = spec['chscale']
        p = rotation(x.shape[1], seed)
        return quant_rows((x * s) @ p.T, spec['bits'], spec['block'], scale) @ p / s
    if 'groups' in spec:
        out = np.zeros_like(x)
        for gi, (idx, bits, block) in enumerate(spec['groups']):
            p = rotation(len(idx), seed * 7 + gi)
            out[:, idx] = quant_rows(x[:, idx] @ p.T, bits, block, scale) @ p
        return out
    p = rotation(x.shape[1], seed)
    return quant_rows(x @ p.T, spec['bits'], spec['block'], scale) @ p


def f16(x):
    return np.asarray(x, np.float16).astype(np.float64)


def code_head(rows, spec, seed, segment, sink=1, mean_rows=256):
    """turboquant_block's row pipeline for one head: mean, segment means, sink row."""
    mu = f16(rows[1:1 + mean_rows].mean(0))
    out = np.empty_like(rows)
    if segment:
        bounds = [0] + list(range(1 + segment, rows.shape[0], segment)) + [rows.shape[0]]
        mean = mu
        for j in range(len(bounds) - 1):
            a, b = bounds[j], bounds[j + 1]
            if j > 0:  # the previous segment's decoded keys (rows from 1 on)
                mean = f16(out[max(1, bounds[j - 1]):a].mean(0))
            out[a:b] = code_centered(rows[a:b] - mean, spec, seed) + mean
    else:
        out = code_centered(rows - mu, spec, seed) + mu
    out[:sink] = rows[:sink]
    return out


def key_spec(spec, k, q, layer, head, heads, group):
    """Resolves a calibrated key variant for one head (channel groups or channel scales)."""
    if 'calibrate' not in spec:
        return spec
    mode, groups = spec['calibrate'], spec.get('groups_of', ())
    def weight(h):
        mu = k[layer, h, 1:257].mean(0)
        kv = ((k[layer, h, 1:257] - mu) ** 2).mean(0)
        qv = (q[layer, h * group:(h + 1) * group, :512] ** 2).mean((0, 1))
        return qv, kv
    qv, kv = weight(head)
    out = {x: y for x, y in spec.items() if x not in ('calibrate', 'groups_of')}
    if mode == 'scale':
        out['chscale'] = (qv / kv) ** 0.25
        return out
    if mode == 'head':
        w = qv * kv
    elif mode == 'layer':  # one split for every head of the layer (each head's weights normalized)
        w = sum(a * b / (a * b).sum() for a, b in (weight(h) for h in range(heads)))
    else:  # random split of the same sizes
        w = np.random.default_rng(layer * 3 + head).random(k.shape[-1])
    order, at, out['groups'] = np.argsort(-w), 0, []
    for n, bits, block in groups:
        out['groups'].append((np.sort(order[at:at + n]), bits, block))
        at += n
    return out


def attention(q, k, v, qpos):
    s = q @ k.T / np.sqrt(q.shape[1])
    s[np.arange(k.shape[0])[None, :] > qpos[:, None]] = -np.inf
    s -= s.max(1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(1, keepdims=True)
    return p @ v, p


def evaluate(data, kspec, vspec, segment, layers, qstride, seed=42):
    k, v, q = data
    _, heads, t, _ = k.shape
    group = q.shape[1] // heads
    qpos = np.arange(t // 2, t, qstride)
    err = num = kl = 0.0
    n = 0
    for l in layers:
        for h in range(heads):
            kh = code_head(k[l, h], key_spec(kspec, k, q, l, h, heads, group), seed + l, segment)
            vh = code_head(v[l, h], vspec, (seed + l) ^ 0x5555, 0)
            for qh in range(h * group, (h + 1) * group):
                o, p = attention(q[l, qh, qpos], k[l, h], v[l, h], qpos)
                oh, ph = attention(q[l, qh, qpos], kh, vh, qpos)
                err += ((o - oh) ** 2).sum()
                num += (o ** 2).sum()
                with np.errstate(divide='ignore', invalid='ignore'):
                    kl += np.where(p > 0, p * (np.log(p) - np.log(np.maximum(ph, 1e-300))), 0).sum(1).mean()
                n += 1
    return err / num, kl / n


V3 = dict(bits=3, block=64)
# name: (key spec, value spec, key_mean_segment, key+value bytes per head and row at head_dim 64)
CONFIGS = {
    'q3': (dict(bits=3, block=32), V3, 256, 54),
    'q3-noseg': (dict(bits=3, block=32), V3, 0, 54),
    'K4kb64': (dict(bits=4, block=64), V3, 256, 60),
    'chscale': (dict(bits=3, block=32, calibrate='scale'), V3, 256, 54),
    'chscale-noseg': (dict(bits=3, block=32, calibrate='scale'), V3, 0, 54),
    'q3-log16': (dict(bits=3, block=32, scale='log16'), dict(V3, scale='log16'), 256, 51),
    'split-4/2-head': (dict(calibrate='head', groups_of=((32, 4, 32), (32, 2, 32))), V3, 256, 54),
    'split-4/2-layer': (dict(calibrate='layer', groups_of=((32, 4, 32), (32, 2, 32))), V3, 256, 54),
    'split-4/3-head': (dict(calibrate='head', groups_of=((32, 4, 32), (32, 3, 32))), V3, 256, 58),
    'split-4/3-random': (dict(calibrate='random', groups_of=((32, 4, 32), (32, 3, 32))), V3, 256, 58),
    'split-4/3-head-log16': (dict(calibrate='head', groups_of=((32, 4, 32), (32, 3, 32)), scale='log16'),
                             dict(V3, scale='log16'), 256, 55),
    'split-5/3/3-head': (dict(calibrate='head', groups_of=((16, 5, 16), (16, 3, 16), (32, 3, 32))), V3, 256, 60),
    # Within q3's 54 bytes: f16 scales (keys as many bytes as q3's), or one-byte scales on keys and values.
    'split-5/2/2-head': (dict(calibrate='head', groups_of=((16, 5, 16), (16, 2, 16), (32, 2, 32))), V3, 256, 54),
    'split-5/4/2-head-log16': (dict(calibrate='head', groups_of=((16, 5, 16), (16, 4, 16), (32, 2, 32)),
                                    scale='log16'), dict(V3, scale='log16'), 256, 54),
    'split-6/3/2-head-log16': (dict(calibrate='head', groups_of=((16, 6, 16), (16, 3, 16), (32, 2, 32)),
                                    scale='log16'), dict(V3, scale='log16'), 256, 54),
    'split-4/3-24/40-head-log16': (dict(calibrate='head', groups_of=((24, 4, 24), (40, 3, 40)), scale='log16'),
                                   dict(V3, scale='log16'), 256, 54),
    'split-4/3/2-head-log16': (dict(calibrate='head', groups_of=((32, 4, 32), (16, 3, 16), (16, 2, 16)),
                                    scale='log16'), dict(V3, scale='log16'), 256, 54),
    'split-5/3/2-head-log16': (dict(calibrate='head', groups_of=((16, 5, 16), (16, 3, 16), (32, 2, 32)),
                                    scale='log16'), dict(V3, scale='log16'), 256, 52),
}


def water_filled(p, total_bits):
    """Reverse water-filling: sum_i min(theta, p_i) at rate sum_i max(0, log2(p_i / theta) / 2)."""
    lo, hi = 1e-30, p.max()
    for _ in range(200):
        theta = np.sqrt(lo * hi)
        rate = np.where(p > theta, 0.5 * np.log2(p / theta), 0).sum()
        lo, hi = (theta, hi) if rate > total_bits else (lo, theta)
    return np.minimum(p, hi).sum()


def rate_distortion_gains(data, bits=3.0, splits=((32, 4, 2), (32, 3.5, 2.5), (16, 4.5, 2.5), (32, 4, 3), (24, 4, 3))):
    """Gaussian rate-distortion gains (dB) of query-weighted channel splits over the equal-bit
    rotation at `bits` per key element: split chosen on rows 1..256 (w_c = E[q_c^2] E[(k_c-mu_c)^2]),
    judged on rows 1536..2047 centred on rows 1280..1535's mean; first column the held-out oracle."""
    k, _, q = data
    layers, heads, _, d = k.shape
    group = q.shape[1] // heads
    rows = []
    for l in range(layers):
        for h in range(heads):
            mu = k[l, h, 1:257].mean(0)
            w = (q[l, h * group:(h + 1) * group, 1:257] ** 2).mean((0, 1)) * ((k[l, h, 1:257] - mu) ** 2).mean(0)
            vh = ((k[l, h, 1536:] - k[l, h, 1280:1536].mean(0)) ** 2).mean(0)
            qh = (q[l, h * group:(h + 1) * group, 1536:] ** 2).mean((0, 1))
            base = vh.sum() * qh.sum() / d * 2 ** (-2 * bits)
            row = [10 * np.log10(base / water_filled(qh * vh, bits * d))]
            order = np.argsort(-w)
            for n, b_hi, b_lo in splits:
                hi, lo = order[:n], order[n:]
                dist = qh[hi].mean() * vh[hi].sum() * 2 ** (-2 * b_hi) + qh[lo].mean() * vh[lo].sum() * 2 ** (-2 * b_lo)
                row.append(10 * np.log10(base / dist))
            rows.append(row)
    names = ['oracle'] + [f'{n}@{a}/{d - n}@{b}' for n, a, b in splits]
    return dict(zip(names, np.mean(rows, 0)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('prefix')
    ap.add_argument('--layers', default='2,8,14,20,26')
    ap.add_argument('--qstride', type=int, default=16)
    ap.add_argument('--configs', default=','.join(CONFIGS))
    ap.add_argument('--rd', action='store_true', help='print the Gaussian rate-distortion gains of splits and stop')
    args = ap.parse_args()
    meta = json.load(open(args.prefix + '.json'))
    shape = lambda h, d: (meta['layers'], h, meta['rows'], d)
    data = tuple(np.fromfile(f'{args.prefix}.{x}.f32', np.float32).reshape(shape(h, d)).astype(np.float64)
                 for x, h, d in (('k', meta['heads'], meta['key_dim']), ('v', meta['heads'], meta['value_dim']),
                                 ('q', meta['query_heads'], meta['key_dim'])))
    if args.rd:
        for name, gain in rate_distortion_gains(data).items():
            print(f'{name}: {gain:.2f} dB over 3 equal bits')
        return
    layers = [int(x) for x in args.layers.split(',')]
    print('| configuration | K+V bytes per head and row | attn_kl | out_relmse |\n|---|---:|---:|---:|')
    for name in args.configs.split(','):
        kspec, vspec, segment, nbytes = CONFIGS[name]
        t = time.time()
        out, kl = evaluate(data, kspec, vspec, segment, layers, args.qstride)
        print(f'| {name} | {nbytes} | {kl:.4f} | {out:.4f} |  <!-- {time.time() - t:.0f} s -->', flush=True)


if __name__ == '__main__':
    main()
