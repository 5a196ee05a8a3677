#!/usr/bin/env python3
"""Weight-only int4 g32 floor of stories260K, simulated in transformers (evidence for
docs/quantization.md; not run by ctest: CI has no Python packages).

Quantizes the q/k/v/o/gate/up projections (down_proj's 172 inputs are not a multiple of 32, so
llmc keeps it float) the way compiler/quant/quantize.cc does, optionally with the runtime's int8
activation quantization per block of 32, and prints mean KL(f32 || quantized) on the held-out
story. Also: AWQ-style scaling (compiler/quant/awq.cc's search) per fold, to show which folds help.

  python3 tests/quant/simulate_int4.py
"""
import copy
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "tests/data/stories260K")
NAMES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
SHRINKS = [1 - 0.025 * i for i in range(9)]  # quantize.cc's kClipSteps x kClipStep

torch.set_num_threads(1)
tokenizer = AutoTokenizer.from_pretrained(MODEL)
model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()


def tokens(text, limit=None):
    ids = tokenizer(text, return_tensors="pt").input_ids
    if ids[0, 0] != 1:
        ids = torch.cat([torch.tensor([[1]]), ids], 1)
    return ids[:, :limit] if limit else ids


heldout = tokens(open(os.path.join(ROOT, "tests/quant/data/heldout_story.txt")).read())
with torch.no_grad():
    reference = torch.log_softmax(model(heldout).logits[0].double(), -1)


def mean_kl(candidate):
    log_q = torch.log_softmax(model_logits(candidate)[0].double(), -1)
    return (reference.exp() * (reference - log_q)).sum(-1).mean().item()


def model_logits(m):
    with torch.no_grad():
        return m(heldout).logits


def f16(x):
    return x.half().float()


def quantize_int4(w, asymmetric=False, clip=True):
    """quantize.cc's int4 g32: per group the candidate of least squared error."""
    groups = w.reshape(-1, 32)
    shrinks = SHRINKS if clip else [1.0]
    signed_max = groups.gather(1, groups.abs().argmax(1, keepdim=True))
    low = groups.min(1, keepdim=True).values.clamp(max=0)
    high = groups.max(1, keepdim=True).values.clamp(min=0)

    def restore(scale, zero):
        safe = torch.where(scale == 0, torch.ones_like(scale), scale)
        return (torch.clamp(torch.round(groups / safe) + zero, 0, 15) - zero) * scale

    candidates = []
    for shrink in shrinks:
        if asymmetric:
            scale = f16((high - low) * shrink / 15)
            safe = torch.where(scale == 0, torch.ones_like(scale), scale)
            candidates.append(restore(scale, torch.clamp(torch.round(-low * shrink / safe), 0, 15)))
        else:
            candidates.append(restore(f16(signed_max.abs() * shrink / 7), 8))
    if clip and not asymmetric:
        candidates.append(restore(f16(signed_max / -8), 8))  # llama.cpp Q4_0's choice
    stacked = torch.stack(candidates)
    best = ((stacked - groups) ** 2).sum(-1).argmin(0)
    return stacked[best, torch.arange(groups.shape[0])].reshape(w.shape)


def quantize_activations(x):
    """quant_matmul.h: int8 per block of 32 columns, scale max|x| / 127."""
    k = x.shape[-1]
    blocks = torch.nn.functional.pad(x, (0, (-k) % 32)).reshape(*x.shape[:-1], -1, 32)
    d = blocks.abs().amax(-1, keepdim=True) / 127
    q = torch.round(blocks / torch.where(d > 0, d, torch.ones_like(d))) * d
    return q.reshape(*x.shape[:-1], -1)[..., :k]


def rtn(asymmetric=False, clip=True, int8_activations=False):
    m = copy.deepcopy(model)
    for name, module in m.named_modules():
        if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in NAMES:
            if module.weight.shape[1] % 32:
                continue
            with torch.no_grad():
                module.weight.copy_(quantize_int4(module.weight, asymmetric, clip))
            if int8_activations:
                module.register_forward_pre_hook(lambda _, a: (quantize_activations(a[0]),))
    return mean_kl(m)


# Calibration rows: the built-in text of compiler/quant/default_calibration.cc.
source = open(os.path.join(ROOT, "compiler/quant/default_calibration.cc")).read()
calibration = tokens(source.split('R"text(')[1].split(')text"')[0], 512)
inputs = {}
hooks = [module.register_forward_pre_hook(
            lambda _, a, name=name: inputs.__setitem__(name, a[0][0].detach().clone()))
         for name, module in model.named_modules()
         if isinstance(module, torch.nn.Linear) and name.split(".")[-1] in NAMES]
with torch.no_grad():
    model(calibration)
for hook in hooks:
    hook.remove()


def awq_scales(w, x, asymmetric, tie=None):
    """awq.cc's SearchScales: duo scaling over alpha in 0..1 by 0.1, plus s = 1."""
    k = w.shape[1]
    mean = x.abs().mean(0).clamp(min=1e-4)
    if tie is not None:
        sums = torch.zeros(k).index_add_(0, tie, mean)
        counts = torch.zeros(k).index_add_(0, tie, torch.ones(k))
        mean = (sums / counts.clamp(min=1))[tie]
    g = w.reshape(w.shape[0], -1, 32).abs()
    w_mean = (g / g.amax(-1, keepdim=True).clamp(min=1e-12)).reshape(w.shape).mean(0).clamp(min=1e-4)
    target = x @ w.T
    best = None
    for point in [-1] + list(range(11)):
        alpha = point / 10
        s = torch.ones(k) if point < 0 else mean ** alpha / w_mean ** (1 - alpha)
        s = s / torch.sqrt(s.min() * s.max())
        loss = (((x / s) @ quantize_int4(w * s, asymmetric).T - target) ** 2).sum().item()
        if best is None or loss < best[0]:
            best = (loss, s)
    return best[1]


def awq(asymmetric, folds):
    m = copy.deepcopy(model)
    heads, kv_heads = m.config.num_attention_heads, m.config.num_key_value_heads
    head_dim = m.config.hidden_size // heads
    with torch.no_grad():
        for index, layer in enumerate(m.model.layers):
            prefix = f"model.layers.{index}."
            attention, mlp = layer.self_attn, layer.mlp
            qkv = (attention.q_proj, attention.k_proj, attention.v_proj)
            s = (awq_scales(torch.cat([l.weight for l in qkv]), inputs[prefix + "self_attn.q_proj"],
                            asymmetric) if "qkv" in folds else torch.ones(m.config.hidden_size))
            layer.input_layernorm.weight.div_(s)
            for linear in qkv:
                linear.weight.mul_(s)
            if "o" in folds:
                group = heads // kv_heads
                tie = torch.tensor([(c // head_dim // group) * head_dim + c % head_dim
                                    for c in range(heads * head_dim)])
                s = awq_scales(attention.o_proj.weight, inputs[prefix + "self_attn.o_proj"],
                               asymmetric, tie)
                per_row = torch.zeros(kv_heads * head_dim)
                per_row[tie] = s
                attention.v_proj.weight.div_(per_row[:, None])
                attention.o_proj.weight.mul_(s)
            gate_up = (mlp.gate_proj, mlp.up_proj)
            s = (awq_scales(torch.cat([l.weight for l in gate_up]), inputs[prefix + "mlp.gate_proj"],
                            asymmetric) if "gate_up" in folds else torch.ones(m.config.hidden_size))
            layer.post_attention_layernorm.weight.div_(s)
            for linear in gate_up:
                linear.weight.mul_(s)
            for linear in qkv + (attention.o_proj,) + gate_up:
                linear.weight.copy_(quantize_int4(linear.weight, asymmetric))
    return mean_kl(m)


print(f"held-out tokens {heldout.shape[1]}, calibration tokens {calibration.shape[1]}")
print(f"int4 g32 absmax RTN, weights only:         KL {rtn(clip=False):.4f}")
print(f"int4 g32 RTN + clip search, weights only:  KL {rtn():.4f}")
print(f"  + int8 activations per 32:               KL {rtn(int8_activations=True):.4f}")
print(f"int4 g32 asymmetric, weights only:         KL {rtn(asymmetric=True):.4f}")
for asymmetric in (False, True):
    scheme = "asymmetric" if asymmetric else "symmetric"
    for folds in (("qkv", "o", "gate_up"), ("qkv", "gate_up"), ("o",)):
        print(f"AWQ {scheme:10} folds {'+'.join(folds):12}: KL {awq(asymmetric, folds):.4f}")
