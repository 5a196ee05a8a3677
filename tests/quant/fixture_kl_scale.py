#!/usr/bin/env python3
"""Why the random-weight fixtures give int4 KL ~0.5 (evidence for docs/quantization.md, "The
fixtures"; not run by ctest: CI has no Python packages).

For stories260K, two fixtures and fresh models of llama_mha's config at several initializer
ranges: the logits' spread and entropy on the held-out story, the mean KL(f32 || int4) of plain
absmax int4 g32 RTN of the projections (weights only), and that KL with both models' logits
multiplied by c = 0.25, 0.5, 1, 2 (KL ~ c^2 for small perturbations).

  python3 tests/quant/fixture_kl_scale.py
"""
import copy
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

torch.set_num_threads(1)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
text=open(f"{ROOT}/tests/quant/data/heldout_story.txt").read()
def q4(w):
    g=w.reshape(-1,32); s=g.abs().amax(1,keepdim=True)/7; s=s.half().float(); s[s==0]=1
    return ((g/s).round().clamp(-8,7)*s).reshape(w.shape)
def quantized(m):
    m=copy.deepcopy(m)
    with torch.no_grad():
        for n,p in m.named_parameters():
            if any(k in n for k in ("q_proj","k_proj","v_proj","o_proj","gate_proj","up_proj","down_proj")) and n.endswith("weight") and p.shape[1]%32==0:
                p.copy_(q4(p))
    return m
def kl(a,b):
    la=torch.log_softmax(a.double(),-1); lb=torch.log_softmax(b.double(),-1)
    return (la.exp()*(la-lb)).sum(-1).mean().item()
def report(name, m, ids):
    with torch.no_grad():
        f=m(ids).logits[0]; q=quantized(m)(ids).logits[0]
    ent=-(torch.softmax(f.double(),-1)*torch.log_softmax(f.double(),-1)).sum(-1).mean().item()
    row=[f"{name:28s} logit std {f.std(-1).mean().item():6.2f} entropy {ent:5.2f}  int4 KL {kl(f,q):.4f}  scaled c=0.25/0.5/1/2:"]
    for c in (0.25,0.5,1,2): row.append(f"{kl(c*f,c*q):.4f}")
    print(" ".join(row), flush=True)
tok=AutoTokenizer.from_pretrained(f"{ROOT}/tests/data/stories260K")
ids=tok(text,return_tensors="pt").input_ids
if ids[0,0]!=1: ids=torch.cat([torch.tensor([[1]]),ids],1)
report("stories260K (trained)", AutoModelForCausalLM.from_pretrained(f"{ROOT}/tests/data/stories260K",dtype=torch.float32).eval(), ids)
for fx in ("llama_mha","qwen2_bias"):
    d=f"{ROOT}/tests/fixtures/{fx}"
    m=AutoModelForCausalLM.from_pretrained(d,dtype=torch.float32).eval()
    t=AutoTokenizer.from_pretrained(d); i=t(text,return_tensors="pt").input_ids
    report(fx+" (0.25)", m, i)
cfg=LlamaConfig.from_pretrained(f"{ROOT}/tests/fixtures/llama_mha")
for r in (0.02,0.05,0.08,0.1,0.15,0.25):
    torch.manual_seed(0)
    c=copy.deepcopy(cfg); c.initializer_range=r
    m=LlamaForCausalLM(c).eval()
    with torch.no_grad():
        for n,p in m.named_parameters():
            if n.endswith("norm.weight"): p.uniform_(0.5,1.5)
    report(f"llama_mha config, init {r}", m, i)
